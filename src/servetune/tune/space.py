"""The search space, from the knob registry (:mod:`servetune.knobs`): which knobs, which
values, and what the engine does by default.

Every knob the engine has that a tuner may turn (``knobs.tunable``) becomes a dimension of
discrete values — the registry's grid (powers of two for ``max_num_seqs`` and
``max_num_batched_tokens``, 0.80–0.95 for ``gpu_memory_utilization``, its choices
otherwise) — with these exceptions: parallelism only when several GPUs are given (and tensor
parallelism only up to their number), ``threads`` only when asked for.
``--knob NAME=a,b,c`` sets a knob's values (``--knob NAME`` takes the registry's grid); once
one ``--knob`` is given, only the knobs given are searched. ``--fix NAME=VALUE`` pins one.
A knob the engine lacks is a ConfigError naming the engine (``knobs.require``).

Values are the registry's engine-neutral ones; ``DEFAULT`` stands for "leave it to the
engine", so the engine's default configuration is a point of the space (every dimension at
``DEFAULT``) and is measured in the same study.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from servetune.errors import ConfigError
from servetune.knobs import check_value, knob, require, tunable
from servetune.results.tune_file import DEFAULT, Dim, Space

PARALLEL = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
ASK_ONLY = ("threads",)
GMU_POINTS = 4


def parse_assignments(items: Sequence[str] | None, flag: str) -> dict[str, str | None]:
    """``NAME=V1,V2`` (or ``NAME``) items → {name: "V1,V2" or None}."""
    out: dict[str, str | None] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        name = name.strip()
        if not name or (sep and not value.strip()):
            raise ConfigError(
                f"{flag} {item!r}: expected NAME=VALUE" + ("S" if flag == "--knob" else ""),
                hint="e.g. --knob max_num_seqs=64,128,256 --fix gpu_memory_utilization=0.9",
            )
        out[knob(name).name] = value.strip() if sep else None
    return out


def _grid(name: str, tunables: dict[str, Any]) -> list[Any]:
    t = tunables[name]
    if name == "gpu_memory_utilization":
        return [round(float(v), 2) for v in t.search.grid(t.type, GMU_POINTS)]
    return list(t.grid())


def _values(name: str, raw: str) -> list[Any]:
    out: list[Any] = []
    for piece in raw.split(","):
        piece = piece.strip()
        if not piece:
            continue
        if piece.lower() == DEFAULT:
            out.append(DEFAULT)
            continue
        value = None if piece.lower() in ("none", "null") else piece
        out.append(check_value(name, value))
    return list(dict.fromkeys(out)) if out else [DEFAULT]


def build_space(
    engine: str,
    knob_items: Sequence[str] | None = None,
    fix_items: Sequence[str] | None = None,
    gpus: int = 1,
) -> Space:
    """The space for ENGINE (see the module docstring)."""
    tunables = {t.name: t for t in tunable(engine)}
    asked = parse_assignments(knob_items, "--knob")
    fixed_raw = parse_assignments(fix_items, "--fix")
    for name in [*asked, *fixed_raw]:
        require(engine, name)  # a knob the engine lacks: ConfigError naming the engine
    both = set(asked) & set(fixed_raw)
    if both:
        raise ConfigError(
            f"{', '.join(sorted(both))}: both searched (--knob) and fixed (--fix)",
            hint="give each knob either --knob or --fix",
        )
    fixed: dict[str, Any] = {}
    for name, raw in fixed_raw.items():
        if raw is None:
            raise ConfigError(f"--fix {name}: needs a value", hint=f"e.g. --fix {name}=VALUE")
        vals = _values(name, raw)
        if len(vals) != 1:
            raise ConfigError(f"--fix {name}={raw}: one value only", hint="use --knob to search")
        if vals[0] != DEFAULT:
            fixed[name] = vals[0]
    if asked:
        names = list(asked)
    else:
        names = [
            n
            for n in tunables
            if n not in fixed_raw and n not in ASK_ONLY and (n not in PARALLEL or gpus > 1)
        ]
    dims: list[Dim] = []
    for name in names:
        raw = asked.get(name)
        if raw is not None:
            values = _values(name, raw)
        elif name in tunables:
            values = _grid(name, tunables)
        else:
            raise ConfigError(
                f"--knob {name}: not a tuning knob of {engine}, give its values",
                hint=f"e.g. --knob {name}=V1,V2",
            )
        if name in PARALLEL:
            values = [v for v in values if v == DEFAULT or int(v) <= gpus]
        if name == "tensor_parallel_size" and gpus > 1 and gpus not in values:
            values.append(gpus)
        if DEFAULT not in values:
            values.insert(0, DEFAULT)
        if len(values) > 1:
            dims.append(Dim(name=name, values=values))
    if not dims:
        raise ConfigError(
            "the search space is empty: every knob is fixed",
            hint="leave at least one knob to search (--knob NAME=V1,V2)",
        )
    return Space(engine=engine, dims=dims, fixed=fixed)


def neighbours(space: Space, params: Mapping[str, Any], name: str) -> list[Any]:
    """The values one step below and above ``params[name]`` in its dimension (``DEFAULT``
    is not a step: its neighbours are the values around the engine's default)."""
    d = space.dim(name)
    ordered = [v for v in d.values if v != DEFAULT or isinstance(v, bool)]
    cur = params.get(name, DEFAULT)
    if cur == DEFAULT and not isinstance(cur, bool):
        return []
    try:
        i = next(j for j, v in enumerate(ordered) if v == cur and type(v) is type(cur))
    except StopIteration:
        return []
    return [ordered[j] for j in (i - 1, i + 1) if 0 <= j < len(ordered)]
