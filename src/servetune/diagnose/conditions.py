"""Conditions over figures, and the templates that turn figures into sentences.

A :class:`Cond` compares one figure with a threshold. When the figure is missing, the
condition is *unknown*; ``if_missing`` says what that means for the rule:

- ``"cannot_tell"`` — the rule needs it: with it unknown, the rule cannot give a verdict;
- ``"note"``        — the rule can still be judged from the rest, and says what it could not see
  (e.g. GPU utilisation not measured), with its confidence lowered.

Templates are ``str.format`` strings over figure names, with a unit spec:
``{kv_share_above_90:pct}``, ``{ttft_p99_ms:ms}``, ``{kv_above_90:win}`` (time windows).
Without a spec the figure's own unit is used. A template that names a missing figure is
dropped, never printed with a hole.
"""

from __future__ import annotations

import operator
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from servetune.diagnose.figures.table import FIGURES, Figures

Op = Literal["<", "<=", ">", ">=", "==", "!="]
OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}
IfMissing = Literal["cannot_tell", "note"]


@dataclass(frozen=True)
class Cond:
    """``figure op value``; ``text`` is the condition in words (a template)."""

    figure: str
    op: Op
    value: float
    text: str
    if_missing: IfMissing = "cannot_tell"

    def figures(self) -> tuple[str, ...]:
        return (self.figure,)

    def evaluate(self, fig: Figures) -> bool | None:
        v = fig.get(self.figure)
        if v is None:
            return None
        return OPS[self.op](v, self.value)

    def describe(self) -> str:
        return f"{self.figure} {self.op} {fmt_threshold(self.figure, self.value)}"


@dataclass(frozen=True)
class AllOf:
    """True when every member is true; false when one is false; else unknown (a member inside
    an :class:`AnyOf`, e.g. a growth that must also be told from chance)."""

    conds: tuple[Cond, ...]

    def figures(self) -> tuple[str, ...]:
        return tuple(c.figure for c in self.conds)

    def evaluate(self, fig: Figures) -> bool | None:
        results = [c.evaluate(fig) for c in self.conds]
        if any(r is False for r in results):
            return False
        if any(r is None for r in results):
            return None
        return True

    def describe(self) -> str:
        return "(" + " and ".join(c.describe() for c in self.conds) + ")"


@dataclass(frozen=True)
class AnyOf:
    """True when any member is true; unknown when none is true and one is unknown."""

    conds: tuple[Cond | AllOf, ...]
    text: str
    if_missing: IfMissing = "cannot_tell"

    def figures(self) -> tuple[str, ...]:
        return tuple(f for c in self.conds for f in c.figures())

    def evaluate(self, fig: Figures) -> bool | None:
        results = [c.evaluate(fig) for c in self.conds]
        if any(r is True for r in results):
            return True
        if any(r is None for r in results):
            return None
        return False

    def describe(self) -> str:
        return " or ".join(c.describe() for c in self.conds)


Condition = Cond | AnyOf


# --- formatting -----------------------------------------------------------------------------


def fmt_ms(v: float) -> str:
    if abs(v) >= 10_000:
        return f"{v / 1000:.1f} s"
    if abs(v) >= 1000:
        return f"{v / 1000:.2f} s"
    if abs(v) >= 10:
        return f"{v:.0f} ms"
    return f"{v:.1f} ms"


def fmt_num(v: float) -> str:
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v):,}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def fmt_windows(windows: Sequence[tuple[float, float]], limit: int = 3) -> str:
    if not windows:
        return "no stretch"
    parts = [f"{a:.1f}–{b:.1f} s" for a, b in windows[:limit]]
    more = len(windows) - limit
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


FigureValue = float | str | list[tuple[float, float]]
"""A figure (a number), a text, or the time windows where something held."""


def fmt_value(value: FigureValue, unit: str) -> str:
    if isinstance(value, list):
        return fmt_windows(value)
    if isinstance(value, str):
        return value
    v = float(value)
    if unit == "pct":
        return f"{v:.0%}" if v >= 0.01 or v == 0 else f"{v:.1%}"
    if unit == "ms":
        return fmt_ms(v)
    if unit == "s":
        return f"{v:.1f} s"
    if unit in ("req/s", "tok/s"):
        return f"{fmt_num(round(v, 2))} {unit}"
    if unit == "per_s":
        return f"{v:+.2f}/s"
    if unit == "ratio":
        return f"{v:.2f}×" if abs(v) < 0.1 else f"{v:.1f}×"
    if unit == "flag":
        return "yes" if v else "no"
    if unit in ("count", "tokens"):
        return fmt_num(round(v, 1))
    return fmt_num(v)


def fmt_threshold(figure: str, value: float) -> str:
    unit = FIGURES[figure].unit if figure in FIGURES else "num"
    return fmt_value(value, unit)


_SPECS = {
    "pct": "pct",
    "ms": "ms",
    "s": "s",
    "rate": "req/s",
    "tok/s": "tok/s",
    "per_s": "per_s",
    "x": "ratio",
    "num": "num",
    "int": "count",
    "tok": "tokens",
    "win": "win",
}


class _Formatter(string.Formatter):
    def __init__(self, fig: Figures, extra: Mapping[str, Any]) -> None:
        self.fig = fig
        self.extra = extra

    def get_value(self, key: int | str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        name = str(key)
        if name in self.extra:
            return (name, self.extra[name])
        if name in self.fig.values:
            return (name, self.fig.values[name])
        if name in self.fig.windows:
            return (name, self.fig.windows[name])
        if name in self.fig.texts:
            return (name, self.fig.texts[name])
        raise KeyError(name)

    def format_field(self, value: Any, format_spec: str) -> str:
        name, v = value
        if format_spec:
            unit = _SPECS.get(format_spec, format_spec)
        else:
            unit = FIGURES[name].unit if name in FIGURES else "num"
        return fmt_value(v, unit)


def render(template: str, fig: Figures, extra: Mapping[str, Any] | None = None) -> str | None:
    """The template filled from the figures, or None when it names a missing one."""
    try:
        return _Formatter(fig, extra or {}).format(template)
    except KeyError:
        return None


def template_fields(template: str) -> list[str]:
    return [f for _, f, _, _ in string.Formatter().parse(template) if f]
