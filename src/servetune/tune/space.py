"""The search space, from the knob registry (:mod:`servetune.knobs`): which knobs, which
values, and what the engine does by default.

Every knob the engine has that a tuner may turn (``knobs.tunable``) becomes a dimension of
discrete values — the registry's grid (powers of two for ``max_num_seqs`` and
``max_num_batched_tokens``, 0.80–0.95 for ``gpu_memory_utilization``, its choices
otherwise) — with these exceptions: parallelism only when several GPUs are given (and tensor
parallelism only up to their number), speculative decoding only for a model with its own
drafter (``speculative``: the simulated engine's model has MTP layers), ``threads`` only when
asked for.
``--knob NAME=a,b,c`` sets a knob's values (``--knob NAME`` takes the registry's grid); once
one ``--knob`` is given, only the knobs given are searched. ``--fix NAME=VALUE`` pins one.
A knob the engine lacks is a ConfigError naming the engine (``knobs.require``).

Values are the registry's engine-neutral ones; ``DEFAULT`` stands for "leave it to the
engine", so the engine's default configuration is a point of the space (every dimension at
``DEFAULT``) and is measured in the same study.

``--baseline`` (:func:`parse_baseline`, :func:`place_baseline`): the configuration the user
serves today, as ``NAME=VALUE`` items or the server's command line (read by the registry's
parser), becomes the study's reference point: its value of each searched knob joins that
knob's values, and the knobs it sets that are not searched are kept for every candidate
(the search changes only what it searches; a deployment's context length or memory share
carries over). Knobs it leaves out stay at ``DEFAULT``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from servetune.errors import ConfigError
from servetune.knobs import check_value, knob, parse_command, require, tunable
from servetune.profiles import profile
from servetune.results.tune_file import DEFAULT, Dim, Space

PARALLEL = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
MULTI_GPU = (*PARALLEL, "enable_expert_parallel", "expert_parallel_size", "enable_dp_attention")
"""Knobs that mean something only with more than one GPU (searched when --gpus > 1)."""
SPECULATIVE = ("speculative_method", "num_speculative_tokens")
"""Speculative decoding's knobs: searched by default only for a model that ships a drafter
(its MTP layers), where the gain rests on the acceptance rate assumed (docs/tune.md)."""
ASK_ONLY = ("threads",)
GMU_POINTS = 4


def parse_assignments(items: Sequence[str] | None, field: str) -> dict[str, str | None]:
    """``NAME=V1,V2`` (or ``NAME``) items of parameter FIELD (``knob``, ``fix``) →
    {name: "V1,V2" or None}."""
    out: dict[str, str | None] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        name = name.strip()
        if not name or (sep and not value.strip()):
            raise ConfigError.over_fields(
                f"{{{field}}} {item!r}: expected NAME=VALUE" + ("S" if field == "knob" else ""),
                hint="e.g. {knob} max_num_seqs=64,128,256 {fix} gpu_memory_utilization=0.9",
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
    speculative: bool = False,
) -> Space:
    """The space for ENGINE (see the module docstring)."""
    tunables = {t.name: t for t in tunable(engine)}
    asked = parse_assignments(knob_items, "knob")
    fixed_raw = parse_assignments(fix_items, "fix")
    for name in [*asked, *fixed_raw]:
        require(engine, name)  # a knob the engine lacks: ConfigError naming the engine
    both = set(asked) & set(fixed_raw)
    if both:
        raise ConfigError.over_fields(
            f"{', '.join(sorted(both))}: both searched ({{knob}}) and fixed ({{fix}})",
            hint="give each knob either {knob} or {fix}",
        )
    fixed: dict[str, Any] = {}
    for name, raw in fixed_raw.items():
        if raw is None:
            raise ConfigError.over_fields(
                f"{{fix}} {name}: needs a value", hint=f"e.g. {{fix}} {name}=VALUE"
            )
        vals = _values(name, raw)
        if len(vals) != 1:
            raise ConfigError.over_fields(
                f"{{fix}} {name}={raw}: one value only", hint="use {knob} to search"
            )
        if vals[0] != DEFAULT:
            fixed[name] = vals[0]
    if asked:
        names = list(asked)
    else:
        names = [
            n
            for n in tunables
            if n not in fixed_raw
            and n not in ASK_ONLY
            and (n not in MULTI_GPU or gpus > 1)
            and (n not in SPECULATIVE or speculative)
        ]
    dims: list[Dim] = []
    for name in names:
        raw = asked.get(name)
        if raw is not None:
            values = _values(name, raw)
        elif name in tunables:
            values = _grid(name, tunables)
        else:
            raise ConfigError.over_fields(
                f"{{knob}} {name}: not a tuning knob of {engine}, give its values",
                hint=f"e.g. {{knob}} {name}=V1,V2",
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
        raise ConfigError.over_fields(
            "the search space is empty: every knob is fixed",
            hint="leave at least one knob to search ({knob} NAME=V1,V2)",
        )
    return Space(engine=engine, dims=dims, fixed=fixed)


def params_key(params: Mapping[str, Any]) -> str:
    """One point of the space as a comparable key (equal parameters, equal keys)."""
    return repr(sorted((k, repr(v)) for k, v in params.items()))


def _is_default(v: Any) -> bool:
    return v == DEFAULT and not isinstance(v, bool)


def _same(a: Any, b: Any) -> bool:
    return bool(a == b) and type(a) is type(b)


def neighbours(
    space: Space,
    params: Mapping[str, Any],
    name: str,
    engine_values: Mapping[str, Any] | None = None,
) -> list[Any]:
    """The values one step below and above ``params[name]`` in its dimension. At ``DEFAULT``
    the steps are taken from the value the engine then uses (``engine_values[name]``: vLLM's
    1024 sequences on an H100 has 512 below it, its bf16 weights have FP8 beside them); with
    that value unknown, a knob left to the engine has no neighbours."""
    d = space.dim(name)
    ordered = [v for v in d.values if not _is_default(v)]
    cur = params.get(name, DEFAULT)
    if _is_default(cur):
        if engine_values is None or name not in engine_values:
            return []
        cur = engine_values[name]
        if all(_is_number(v) for v in [*ordered, cur]):
            below = [v for v in ordered if v < cur]
            above = [v for v in ordered if v > cur]
            return below[-1:] + above[:1]
    try:
        i = next(j for j, v in enumerate(ordered) if _same(v, cur))
    except StopIteration:
        return []
    return [ordered[j] for j in (i - 1, i + 1) if 0 <= j < len(ordered)]


def one_knob_moves(
    space: Space, params: Mapping[str, Any], engine_values: Mapping[str, Any] | None = None
) -> list[tuple[str, Any, str, dict[str, Any]]]:
    """Every point one knob-step from PARAMS: (knob, value, "up" or "down", point)."""
    out = []
    for d in space.dims:
        cur = params.get(d.name, DEFAULT)
        if _is_default(cur) and engine_values is not None:
            cur = engine_values.get(d.name, cur)
        for value in neighbours(space, params, d.name, engine_values):
            try:
                up = value > cur if _is_number(value) and _is_number(cur) else None
            except TypeError:
                up = None
            if up is None:
                where = [j for j, v in enumerate(d.values) if _same(v, cur)]
                up = not where or d.index(value) > where[0]
            out.append((d.name, value, "up" if up else "down", {**params, d.name: value}))
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


_ASSIGNMENT = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*=")


def parse_baseline(engine: str, text: str) -> dict[str, Any]:
    """The knob values of ``--baseline TEXT`` for ENGINE: ``NAME=VALUE`` items
    (``max_num_seqs=1 max_num_batched_tokens=512``; ``NAME=default`` leaves it to the engine),
    or the server's command line (``vllm serve MODEL --max-num-seqs 1 …``, or just its
    flags), read by the knob registry's parser: flags that set no knob (ports, keys) are
    ignored."""
    hint = (
        "e.g. {baseline} 'max_num_seqs=1 max_num_batched_tokens=512' or {baseline} "
        "'vllm serve MODEL --max-num-seqs 1 --max-num-batched-tokens 512'"
    )
    try:
        tokens = shlex.split(text.replace("\\\n", " "))
    except ValueError as exc:
        raise ConfigError.over_fields(f"{{baseline}} {text!r}: {exc}", hint=hint) from None
    if not tokens:
        raise ConfigError.over_fields("{baseline} is empty", hint=hint)
    if all(_ASSIGNMENT.match(t) for t in tokens):
        out: dict[str, Any] = {}
        for tok in tokens:
            name, _, raw = tok.partition("=")
            k = knob(name).name  # an unknown name: ConfigError listing the knobs
            require(engine, k)
            if raw.strip().lower() != DEFAULT:
                value = check_value(k, None if raw.lower() in ("none", "null") else raw)
                if value is not None:
                    out[k] = value
        return out
    first = next(t for t in tokens if not _ASSIGNMENT.match(t))
    reads_as = profile(engine).reads_as
    if not first.startswith("-") and reads_as:
        # vLLM's CPU build is launched as vLLM; the simulated engine models vLLM and has its
        # own `servetune sim serve`: the baseline may be either engine's command line
        parsed = parse_command(tokens)
        if parsed.engine not in (*reads_as, profile(engine).id):
            raise ConfigError.over_fields(
                f"{{baseline}} is {parsed.engine}'s command line ({parsed.entry}), not {engine}'s",
                hint=f"give the command line {engine} runs today, or NAME=VALUE items",
            )
        entry = profile(engine).entry
        if not (entry.programs or entry.modules):  # no line of its own: read with its knobs
            parsed = parse_command(tokens, engine=engine)
    else:
        parsed = parse_command(tokens, engine=engine)
    return dict(parsed.values)


def _insert(values: list[Any], value: Any) -> list[Any]:
    """VALUES with VALUE in its place (numbers in order after ``DEFAULT``)."""
    numeric = [v for v in values if v != DEFAULT]
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in [*numeric, value]):
        return [v for v in values if v == DEFAULT] + sorted([*numeric, value])
    return [*values, value]


def place_baseline(space: Space, values: Mapping[str, Any]) -> tuple[Space, dict[str, Any]]:
    """SPACE with the baseline's VALUES as one of its points (see the module docstring), and
    that point's params. A knob the baseline sets one way and ``--fix`` another is an
    error."""
    dims = [d.model_copy(deep=True) for d in space.dims]
    fixed = dict(space.fixed)
    params = {d.name: DEFAULT for d in dims}
    for name, value in values.items():
        if name in fixed:
            if fixed[name] != value:
                raise ConfigError.over_fields(
                    f"{{baseline}} sets {name}={value} but {{fix}} sets {name}={fixed[name]}",
                    hint="the baseline is what you serve today: drop the {fix}, or fix the "
                    "baseline's value",
                )
            continue
        d = next((d for d in dims if d.name == name), None)
        if d is None:
            fixed[name] = value  # not searched: every candidate keeps the deployment's value
            continue
        try:
            d.index(value)
        except ValueError:
            d.values = _insert(d.values, value)
        params[name] = value
    return space.model_copy(update={"dims": dims, "fixed": fixed}), params
