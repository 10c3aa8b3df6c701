"""The shapes of the knob registry: a :class:`Knob`, one engine's :class:`Spelling` of it (or
:class:`Absent`, with the reason), its :class:`Default`, its :class:`SearchRange` for the
tuner, and engine versions.

Versions are compared as tuples of integers: ``"0.8.5"`` → (0, 8, 5), ``"v0.10.1.1"`` →
(0, 10, 1, 1), llama.cpp's build ``"b6325"`` → (6325,). A spelling holds from ``since``
(inclusive) to ``until`` (exclusive); ``None`` is open-ended.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from servetune.errors import ConfigError

KnobType = Literal["int", "float", "bool", "choice", "int_list"]

KnobValue = bool | int | float | str | list[int]
"""A knob's value as the registry checks it (:func:`~servetune.knobs.check_value`), by its
:data:`KnobType`: a bool, an int, a float, a choice's word, or a list of ints."""


def value_text(value: KnobValue, on_off: tuple[str, str] = ("on", "off")) -> str:
    """A value as a person reads it: a bool as ``on_off``, a float without trailing zeros,
    a list with commas."""
    if isinstance(value, bool):
        return on_off[0] if value else on_off[1]
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return ", ".join(str(x) for x in value)
    return value if isinstance(value, str) else str(value)


Style = Literal[
    "value",  # --flag V
    "list",  # --flag V1 V2 … (argparse nargs="+")
    "csv",  # --flag V1,V2,…
    "bool_optional",  # --flag / --no-flag (argparse BooleanOptionalAction)
    "bool_value",  # --flag true|false (``words`` gives the two spellings)
    "switch",  # --flag when the value is ``on`` (default True), nothing otherwise
    "off_value",  # a value flag whose ``off`` word turns the feature off (SGLang -1)
    "slots_total",  # llama.cpp -c: max_model_len × max_num_seqs (per-slot × slots)
    "json_key",  # one key of a JSON object flag, shared by knobs (vLLM --speculative-config)
]

PlannerEffect = Literal[
    "kv_pool",  # sizes the memory left for the KV pool (a budget share, an explicit size)
    "kv_per_token",  # bytes one token's KV takes (dtype, heads per GPU)
    "activation_peak",  # the profiling run's activation peak (tokens/requests per step)
    "weights",  # bytes the weights take per GPU
    "cuda_graphs",  # memory and step padding of captured CUDA graphs
    "admission",  # what one request may hold (must fit the pool to start)
    "replicas",  # copies of the whole engine (memory per replica unchanged)
    "none",  # scheduling only: no effect on the memory plan
]


def parse_version(text: str) -> tuple[int, ...]:
    """``"0.8.5"`` → (0, 8, 5); ``"v0.10.1"`` → (0, 10, 1); ``"b6325"`` → (6325,).
    Pre-release and local suffixes (``"0.9.0rc1"``, ``"+cpu"``) are dropped."""
    raw = text.strip().lower().lstrip("vb")
    raw = raw.split("+", 1)[0]
    parts: list[int] = []
    for piece in raw.split("."):
        m = re.match(r"\d+", piece)
        if m is None:
            break
        parts.append(int(m.group()))
        if m.end() != len(piece):
            break
    if not parts:
        raise ConfigError(
            f"cannot read the engine version {text!r}",
            hint='give it as numbers, e.g. "0.10.1" (vLLM) or "b6325" (llama.cpp)',
            code="knob.version",
        )
    return tuple(parts)


def in_range(version: tuple[int, ...] | None, since: str | None, until: str | None) -> bool:
    """Whether VERSION lies in [since, until); ``None`` (the newest) lies in any range
    open at the top."""
    if version is None:
        return until is None
    if since is not None and version < parse_version(since):
        return False
    return not (until is not None and version >= parse_version(until))


@dataclass(frozen=True)
class Spelling:
    """How one engine (in a range of its versions) spells a knob on its command line."""

    flag: str
    style: Style = "value"
    aliases: tuple[str, ...] = ()
    """Other spellings the engine accepts for the same flag (read back, never rendered)."""
    since: str | None = None
    until: str | None = None
    values: dict[str, str] = field(default_factory=dict)
    """Engine-neutral value → the engine's word for it, where they differ."""
    choices: tuple[str, ...] = ()
    """The engine's accepted values (engine words), when it has a fixed list."""
    words: tuple[str, str] = ("true", "false")
    """``bool_value``: the words for on and off."""
    on: bool = True
    """``switch``: the knob value the bare flag means (False: a ``--disable-…`` flag)."""
    off: str = "-1"
    """``off_value``: the word that turns the feature off."""
    turn_on: str = ""
    """``off_value``: the value a person gives to turn the feature on again (a launch renders
    nothing for on: it is the default); see :func:`~servetune.knobs.render_change`."""
    turn_on_from: str = ""
    """``off_value``: the knob whose value ``turn_on`` takes when the change sets it too
    (SGLang's chunk size is the per-step prefill budget itself)."""
    also: tuple[str, ...] = ()
    """Further flags that take the same value (llama.cpp's -ctv beside -ctk)."""
    note: str = ""
    """How the engine's meaning differs from the engine-neutral one, when it does."""
    env: str = ""
    """Set through an environment variable instead of a flag (rendered as ``VAR=value``)."""
    yaml: str = ""
    """Set in the engine's YAML side file under this dotted key instead of a flag (its
    profile names the flag that reads the file: TensorRT-LLM's ``--extra_llm_api_options``);
    ``flag`` is then the key as a person reads it."""
    key: str = ""
    """``json_key``: the knob's key in the flag's JSON object (the knobs spelled with the same
    flag share one object: ``--speculative-config '{"method": …, "num_speculative_tokens":
    …}'``)."""


@dataclass(frozen=True)
class Absent:
    """The engine has no such knob; ``reason`` says why and what to do instead."""

    reason: str
    since: str | None = None
    until: str | None = None


@dataclass(frozen=True)
class DefaultContext:
    """What an engine's default can depend on."""

    version: tuple[int, ...] | None = None
    device_name: str | None = None
    device_gib: float | None = None
    usage: Literal["openai_api_server", "llm_class"] = "openai_api_server"
    chunked_prefill: bool | None = None
    max_model_len: int | None = None


@dataclass(frozen=True)
class Default:
    """An engine's default for a knob: a constant, or a rule (``rule`` in words, ``fn``
    computing it from a :class:`DefaultContext`; ``fn`` returns None when the context lacks
    what it needs)."""

    value: KnobValue | None = None
    rule: str = ""
    fn: Callable[[DefaultContext], KnobValue | None] | None = None
    since: str | None = None
    until: str | None = None

    def resolve(self, ctx: DefaultContext) -> KnobValue | None:
        return self.fn(ctx) if self.fn is not None else self.value

    def describe(self) -> str:
        if self.rule:
            return self.rule
        return "unset" if self.value is None else value_text(self.value)


@dataclass(frozen=True)
class SearchRange:
    """Where a tuner looks: integers or reals between ``low`` and ``high`` (``log``: spaced
    by factors, e.g. powers of two), or one of ``choices``."""

    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()
    why: str = ""

    def grid(self, kind: KnobType, points: int = 6) -> list[Any]:
        """A small grid over the range (choices as they are)."""
        if self.choices:
            return list(self.choices)
        assert self.low is not None and self.high is not None
        lo, hi = float(self.low), float(self.high)
        if self.log:
            out: list[float] = []
            v = lo
            while v <= hi * 1.0000001:
                out.append(v)
                v *= 2.0
        else:
            step = (hi - lo) / max(points - 1, 1)
            out = [lo + i * step for i in range(points)]
        if kind == "int":
            return list(dict.fromkeys(round(x) for x in out))
        return [round(x, 4) for x in out]


@dataclass(frozen=True)
class Knob:
    """One engine-neutral knob: its name is vLLM's Python name (``EngineArgs`` field)."""

    name: str
    type: KnobType
    summary: str
    planner: tuple[PlannerEffect, ...]
    """What the memory planner does with it."""
    planner_note: str
    spellings: dict[str, tuple[Spelling | Absent, ...]]
    """engine → its spellings over versions (or why it has none)."""
    defaults: dict[str, tuple[Default, ...]] = field(default_factory=dict)
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    """Engine-neutral values (a ``choice`` knob); an engine maps them in ``Spelling.values``."""
    nullable: bool = False
    """None is a value of its own (``quantization``: None = unquantized)."""
    search: SearchRange | None = None
    """Where a tuner looks; None: not a tuning knob (set from the workload or the model)."""
    requires: str = ""
    """A cross-knob rule, in words (checked by :func:`servetune.knobs.check_config`)."""
