"""Look-ups over the knob table: a knob by name, an engine's spelling of it at a version, its
default, a value checked against its type and range, the knobs a tuner may turn, and the
difference between two configurations.

A *configuration* is a plain ``dict`` of engine-neutral knob name → value (``None`` or
absent = the engine's default), so it crosses files and processes as JSON as it is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from servetune.errors import ConfigError
from servetune.knobs.model import (
    Absent,
    Default,
    DefaultContext,
    Knob,
    KnobType,
    KnobValue,
    PlannerEffect,
    SearchRange,
    Spelling,
    in_range,
    parse_version,
)
from servetune.knobs.table import KNOBS
from servetune.profiles import profile

KNOB_NAMES: tuple[str, ...] = tuple(k.name for k in KNOBS)
_BY_NAME: dict[str, Knob] = {k.name: k for k in KNOBS}

Version = str | tuple[int, ...] | None
"""An engine version: ``"0.10.1"``, ``"b6325"``, a parsed tuple, or None for the newest."""


def _version(v: Version) -> tuple[int, ...] | None:
    if v is None or isinstance(v, tuple):
        return v
    return parse_version(v)


def check_engine(engine: str) -> str:
    """ENGINE's one spelling (its profile's id; an alias such as ``llamacpp`` is read), or a
    ConfigError listing the engines."""
    return profile(engine).id


def knob(name: str) -> Knob:
    """The knob named NAME (vLLM's Python name, ``-`` accepted for ``_``)."""
    key = name.strip().lstrip("-").replace("-", "_")
    found = _BY_NAME.get(key)
    if found is None:
        raise ConfigError(
            f"unknown knob {name!r}",
            hint=f"knobs: {', '.join(KNOB_NAMES)}",
            code="knob.unknown",
        )
    return found


def spelling(engine: str, name: str, version: Version = None) -> Spelling | Absent:
    """How ENGINE (at VERSION; None = the newest) spells knob NAME, or why it has none."""
    k = knob(name)
    engine = check_engine(engine)
    v = _version(version)
    for s in k.spellings.get(engine, ()):
        if in_range(v, s.since, s.until):
            return s
    return Absent(f"{engine} has no {k.name.replace('_', '-')} in the registry")


def flag(engine: str, name: str, version: Version = None) -> str | None:
    """The flag ENGINE spells NAME with (``("llama.cpp", "max_num_seqs") → "-np"``), the
    environment variable or side-file key for one set that way, or None when the engine has
    no such knob."""
    s = spelling(engine, name, version)
    if isinstance(s, Absent):
        return None
    return s.env or s.yaml or s.flag


def note(engine: str, name: str, version: Version = None) -> str | None:
    """How ENGINE's meaning differs from the engine-neutral one, or why it lacks the knob."""
    s = spelling(engine, name, version)
    text = s.reason if isinstance(s, Absent) else s.note
    return text or None


def require(engine: str, name: str, version: Version = None) -> Spelling:
    """ENGINE's spelling of NAME, or a ConfigError naming the engine and the knob it lacks."""
    s = spelling(engine, name, version)
    if isinstance(s, Absent):
        at = f" {version}" if isinstance(version, str) else ""
        raise ConfigError(
            f"engine {engine}{at} has no knob {knob(name).name}",
            hint=s.reason,
            code="knob.absent",
        )
    return s


def has(engine: str, name: str, version: Version = None) -> bool:
    return not isinstance(spelling(engine, name, version), Absent)


def engine_knobs(engine: str, version: Version = None) -> list[str]:
    """The knobs ENGINE has at VERSION, in the table's order."""
    engine = check_engine(engine)
    return [k.name for k in KNOBS if has(engine, k.name, version)]


# --- defaults -----------------------------------------------------------------------------


def _default_entry(engine: str, k: Knob, v: tuple[int, ...] | None) -> Default | None:
    for dflt in k.defaults.get(engine, ()):
        if in_range(v, dflt.since, dflt.until):
            return dflt
    return None


def default(engine: str, name: str, context: DefaultContext | None = None) -> KnobValue | None:
    """ENGINE's default for NAME in CONTEXT (the version, the device, …), or None when it
    depends on what the context does not say (``default_rule`` says it in words)."""
    k = knob(name)
    engine = check_engine(engine)
    ctx = context or DefaultContext()
    entry = _default_entry(engine, k, ctx.version)
    return None if entry is None else entry.resolve(ctx)


def default_rule(engine: str, name: str, version: Version = None) -> str:
    """ENGINE's default for NAME in words."""
    k = knob(name)
    entry = _default_entry(check_engine(engine), k, _version(version))
    if entry is None:
        s = spelling(engine, name, version)
        return "no such knob" if isinstance(s, Absent) else "the engine's own"
    return entry.describe()


# --- values -------------------------------------------------------------------------------

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _bad(k: Knob, value: object, want: str) -> ConfigError:
    return ConfigError(
        f"{k.name} = {value!r}: expected {want}",
        hint=f"{k.name}: {k.summary}",
        code="knob.value",
    )


def _coerce_int(k: Knob, value: Any) -> int:
    if isinstance(value, bool):
        raise _bad(k, value, "an integer")
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise _bad(k, value, "an integer") from None
    if isinstance(value, float) and value != out:
        raise _bad(k, value, "an integer")
    return out


def _coerce_scalar(k: Knob, kind: KnobType, value: Any) -> bool | int | float | str:
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise _bad(k, value, "on or off (true/false)")
    if kind == "int":
        return _coerce_int(k, value)
    if kind == "float":
        if isinstance(value, bool):
            raise _bad(k, value, "a number")
        try:
            out = float(value)
        except (TypeError, ValueError):
            raise _bad(k, value, "a number") from None
        if not math.isfinite(out):  # NaN passes every range check; JSON has neither
            raise _bad(k, value, "a finite number")
        return out
    text = str(value).strip()
    if k.choices and text not in k.choices:
        raise _bad(k, value, "one of " + ", ".join(k.choices))
    return text


def check_value(name: str, value: object) -> KnobValue | None:
    """VALUE as knob NAME's type, checked against its range; None stays None (the default)."""
    k = knob(name)
    if value is None:
        return None
    if k.type == "int_list":
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple) or not items:
            raise _bad(k, value, "a list of integers")
        out_list = [_coerce_int(k, x) for x in items]
        for x in out_list:
            _check_range(k, x)
        return out_list
    out = _coerce_scalar(k, k.type, value)
    if isinstance(out, int | float) and not isinstance(out, bool):
        _check_range(k, out)
    return out


def _check_range(k: Knob, x: float) -> None:
    if k.low is not None and x < k.low:
        raise _bad(k, x, f"≥ {k.low:g}")
    if k.high is not None and x > k.high:
        raise _bad(k, x, f"≤ {k.high:g}")


def check_values(values: Mapping[str, object]) -> dict[str, KnobValue]:
    """Every value checked (see :func:`check_value`), keyed by the knobs' own names, in the
    table's order; None values dropped."""
    checked = {knob(name).name: check_value(name, v) for name, v in values.items()}
    return {n: v for n in KNOB_NAMES if (v := checked.get(n)) is not None}


def check_config(
    engine: str, values: Mapping[str, object], version: Version = None
) -> dict[str, KnobValue]:
    """VALUES checked for ENGINE: each knob exists on the engine, each value fits, and the
    knobs agree with one another (the rules in ``Knob.requires``). Returns the checked
    configuration; raises ConfigError (``knob.absent``/``knob.value``/``knob.conflict``)."""
    cfg = check_values(values)
    for name in cfg:
        require(engine, name, version)
    problems = conflicts(engine, cfg)
    if problems:
        raise ConfigError(
            f"{engine}: " + "; ".join(problems),
            hint="change one of the knobs named",
            code="knob.conflict",
        )
    return cfg


def _vllm_batch(cfg: Mapping[str, Any]) -> list[str]:
    """vLLM's scheduler: the step budget holds every running sequence, and — with chunked
    prefill off — one whole max_model_len prompt."""
    out: list[str] = []
    seqs = cfg.get("max_num_seqs")
    mnbt = cfg.get("max_num_batched_tokens")
    mml = cfg.get("max_model_len")
    if seqs is not None and mnbt is not None and mnbt < seqs:
        out.append(f"max_num_batched_tokens ({mnbt}) must be ≥ max_num_seqs ({seqs})")
    chunked_off = cfg.get("enable_chunked_prefill") is False
    if chunked_off and mnbt is not None and mml is not None and mnbt < mml:
        out.append(
            f"with chunked prefill off, max_num_batched_tokens ({mnbt}) must be ≥ "
            f"max_model_len ({mml})"
        )
    lpt = cfg.get("long_prefill_token_threshold")
    if lpt and mml is not None and lpt > mml:
        out.append(f"long_prefill_token_threshold ({lpt}) must be ≤ max_model_len ({mml})")
    return out


def _llama_batch(cfg: Mapping[str, Any]) -> list[str]:
    """llama.cpp: the micro-batch fits the batch; a quantized V cache needs flash attention."""
    out: list[str] = []
    mnbt = cfg.get("max_num_batched_tokens")
    ub = cfg.get("ubatch_size")
    if ub is not None and mnbt is not None and ub > mnbt:
        out.append(f"ubatch_size -ub ({ub}) must be ≤ max_num_batched_tokens -b ({mnbt})")
    kv = cfg.get("kv_cache_dtype")
    if (
        kv not in (None, "auto", "float16", "bfloat16", "f16", "f32", "bf16")
        and cfg.get("flash_attn") is False
    ):
        out.append(f"a quantized V cache ({kv}) needs flash attention (flash_attn on/auto)")
    return out


def _sglang_chunk(cfg: Mapping[str, Any]) -> list[str]:
    """SGLang spells chunked prefill and its chunk with one flag (--chunked-prefill-size N,
    -1 for off): the two knobs must agree."""
    out: list[str] = []
    chunk = cfg.get("chunked_prefill_size")
    on = cfg.get("enable_chunked_prefill")
    if on is False and chunk is not None and chunk > 0:
        out.append(
            f"chunked prefill is off but chunked_prefill_size is {chunk} (SGLang spells "
            "both --chunked-prefill-size: give one)"
        )
    if on is True and chunk is not None and chunk <= 0:
        out.append(f"chunked prefill is on but chunked_prefill_size is {chunk}")
    return out


RULES: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    "vllm_batch": _vllm_batch,
    "llama_batch": _llama_batch,
    "sglang_chunk": _sglang_chunk,
}
"""Cross-knob rules by name; an engine's profile says which hold on it (``knob_rules``)."""


def conflicts(engine: str, cfg: Mapping[str, Any]) -> list[str]:
    """The cross-knob rules CFG breaks on ENGINE, in words (known values only)."""
    out: list[str] = []
    for rule in profile(engine).knob_rules:
        out += RULES[rule](cfg)
    return out


# --- the tuner's view ------------------------------------------------------------------------


@dataclass(frozen=True)
class Tunable:
    """One knob a tuner may turn on an engine, with where to look."""

    name: str
    type: KnobType
    flag: str
    search: SearchRange
    default_rule: str
    planner: tuple[PlannerEffect, ...]
    requires: str = ""

    def grid(self, points: int = 6) -> list[Any]:
        return self.search.grid(self.type, points)


def tunable(engine: str, version: Version = None) -> list[Tunable]:
    """The knobs ENGINE has at VERSION that a tuner may turn, with their search ranges, in
    the table's order (knobs set from the workload or the model, like max_model_len and
    dtype, are not among them)."""
    out: list[Tunable] = []
    for k in KNOBS:
        s = spelling(engine, k.name, version)
        if k.search is None or isinstance(s, Absent):
            continue
        out.append(
            Tunable(
                name=k.name,
                type=k.type,
                flag=s.env or s.yaml or s.flag,
                search=k.search,
                default_rule=default_rule(engine, k.name, version),
                planner=k.planner,
                requires=k.requires,
            )
        )
    return out
