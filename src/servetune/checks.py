"""Checks that live in the models: how a pydantic model's refusal becomes a ServetuneError.

A model that crosses a file, a process or the Python API carries its ranges as ``Field``
constraints and its consistency rules as validators that raise :class:`Invalid` — a message
written over the model's fields (``{burstiness} 0.5 shapes random gaps``). Who reports the
error decides how a field is named: a library caller reads the field's own name
(``burstiness``), the CLI the flag that set it (``--burstiness``): :func:`config_error`
without ``name=`` gives an error over fields
(:meth:`~servetune.errors.ServetuneError.over_fields`) that the CLI shows with the flags of its
command line (``commands/_flags.py``), or with ``name=`` names them up front. So no library
layer names a CLI flag, and no command re-checks what the model checks.

    try:
        BenchConfig(num_prompts=-1)
    except ValidationError as exc:
        raise config_error(exc) from None   # "num_prompts must be ≥ 1 (got -1)"
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from servetune.errors import ConfigError, fill_fields

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

Namer = Callable[[str], str]

SECONDS: dict[str, Any] = {"unit": "seconds"}
"""``Field(json_schema_extra=SECONDS)``: the field is a time in seconds (said in its errors)."""


class Invalid(ValueError):
    """A consistency rule broken, written over fields: ``{field}`` in MESSAGE and HINT is
    filled with the field's name, or the flag that set it."""

    def __init__(self, message: str, hint: str | None = None, code: str = "config") -> None:
        super().__init__(fill_fields(message, str))
        self.template = message
        self.hint_template = hint
        self.code = code

    def render(self, name: Namer) -> tuple[str, str | None]:
        hint = fill_fields(self.hint_template, name) if self.hint_template else None
        return fill_fields(self.template, name), hint


def _bounds(model: type[BaseModel] | None, field: str) -> str:
    """The field's range in words (``> 0``, ``≥ 1``, ``in [0, 1)``), from its constraints."""
    if model is None or field not in model.model_fields:
        return ""
    lo = hi = ""
    for m in model.model_fields[field].metadata:
        if getattr(m, "gt", None) is not None:
            lo = f"> {m.gt:g}"
        elif getattr(m, "ge", None) is not None:
            lo = f"≥ {m.ge:g}"
        if getattr(m, "lt", None) is not None:
            hi = f"< {m.lt:g}"
        elif getattr(m, "le", None) is not None:
            hi = f"≤ {m.le:g}"
    if lo and hi:
        left = "(" if lo.startswith(">") else "["
        right = ")" if hi.startswith("<") else "]"
        return f"in {left}{lo.split()[1]}, {hi.split()[1]}{right}"
    return lo or hi


def _unit(model: type[BaseModel] | None, field: str) -> str:
    if model is None or field not in model.model_fields:
        return ""
    extra = model.model_fields[field].json_schema_extra
    return str(extra.get("unit", "")) if isinstance(extra, dict) else ""


def _got(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return repr(value) if isinstance(value, str) else str(value)


def _example(model: type[BaseModel] | None, field: str, name: Namer) -> str | None:
    if model is None or field not in model.model_fields:
        return None
    examples = model.model_fields[field].examples
    if not examples:
        return None
    shown = name(field)
    joiner = " " if shown.startswith("-") else "="  # "{field}=" in a message over fields
    return "e.g. " + " or ".join(f"{shown}{joiner}{e}" for e in examples)


def config_error(
    exc: ValidationError, name: Namer | None = None, model: type[BaseModel] | None = None
) -> ConfigError:
    """EXC (the first of its errors) as a ConfigError with a hint, each field shown by NAME
    (default: its own name). MODEL: the model that refused (for its ranges and examples;
    read from EXC when it says)."""
    if name is None:  # over fields: shown by their names here, by their flags in the CLI
        message, hint = _refusal(exc, lambda f: "{" + f + "}", model)
        return ConfigError.over_fields(message, hint, code=_code(exc))
    message, hint = _refusal(exc, name, model)
    return ConfigError(message, hint=hint, code=_code(exc))


def _code(exc: ValidationError) -> str:
    cause = (exc.errors(include_url=False)[0].get("ctx") or {}).get("error")
    return cause.code if isinstance(cause, Invalid) else "config"


def _refusal(
    exc: ValidationError, namer: Namer, model: type[BaseModel] | None
) -> tuple[str, str | None]:
    err = exc.errors(include_url=False)[0]
    ctx = err.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, Invalid):
        return cause.render(namer)
    loc = [str(x) for x in err.get("loc", ())]
    field = loc[0] if loc else ""
    shown = namer(field) if field else "the configuration"
    value = err.get("input")
    kind = err.get("type", "")
    bounds = _bounds(model, field)
    if kind == "finite_number" or (isinstance(value, float) and not math.isfinite(value)):
        what = "a finite number"
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        what = bounds or err["msg"].lower()
    elif kind.endswith("_parsing") or kind.endswith("_type"):
        what = err["msg"].lower().replace("input should be ", "")
    else:
        what = err["msg"].lower().replace("input should be ", "").replace("value error, ", "")
    if kind != "finite_number" and _unit(model, field):
        what += f" {_unit(model, field)}"
    return f"{shown} must be {what} (got {_got(value)})", _example(model, field, namer)


def validated(model: type[Any], data: dict[str, Any], name: Namer | None = None) -> Any:
    """MODEL built from DATA, its refusal as a ConfigError (fields shown by NAME)."""
    from pydantic import ValidationError

    try:
        return model(**data)
    except ValidationError as exc:
        raise config_error(exc, name, model) from None
