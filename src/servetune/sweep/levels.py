"""Load-level planning: the levels of a sweep, their folder labels, and ``--request-rates auto``.

``auto`` first runs one probe at an unbounded rate (every request sent at once), which measures
the saturation throughput X_sat; the levels then go from ~10% to ~120% of X_sat, denser near
saturation where the knee lives (fractions in :data:`AUTO_FRACTIONS`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

import numpy as np
from scipy.interpolate import PchipInterpolator

from servetune.errors import ConfigError
from servetune.results.schema import BenchConfig
from servetune.results.sweep_schema import LevelRole, LoadMode, PlannedLevel
from servetune.workload.seeds import derive_seed

_N = TypeVar("_N", int, float)

DEFAULT_RATES: tuple[float, ...] = (8.0, 16.0, 32.0, 64.0, 128.0)
"""The seed's sweep."""
AUTO_FRACTIONS: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.85, 0.95, 1.05, 1.2)
"""Levels as fractions of the probed saturation throughput, for the default 8 levels; other
counts sample the same monotone shape (PCHIP through these anchors)."""
PROBE_LABEL = "probe-inf"


def format_value(v: float) -> str:
    """A short, filesystem-safe number: 8, 12.5, 0.25, inf."""
    if math.isinf(v):
        return "inf"
    text = f"{v:.4f}".rstrip("0").rstrip(".")
    return text or "0"


def level_label(mode: LoadMode, value: float, role: LevelRole = "level", repeat: int = 0) -> str:
    base = f"rate-{format_value(value)}" if mode == "rate" else f"conc-{format_value(value)}"
    if role == "probe":
        return PROBE_LABEL
    if role == "confirm":
        return f"confirm-{base}"
    return base if repeat == 0 else f"{base}-r{repeat + 1}"


def _parse_levels(
    text: str, flag: str, number: Callable[[str], _N], kind: str, least: _N, example: str
) -> list[_N]:
    """Comma-separated load levels, each a ``number`` of at least ``least`` (a rate: above
    0), sorted, duplicates dropped; an error names the flag and the bad part."""
    out: list[_N] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        try:
            v = number(part)
        except ValueError:
            raise ConfigError(
                f"{flag}: {part!r} is not {kind}",
                hint=f"give {flag} values separated by commas, e.g. {example}",
            ) from None
        if not (v > 0 if least == 0 else v >= least):
            rule = "> 0" if least == 0 else f"≥ {least}"
            raise ConfigError(
                f"{flag}: every value must be {rule} (got {part})", hint=f"e.g. {flag} {example}"
            )
        out.append(v)
    if not out:
        raise ConfigError(f"{flag} is empty", hint=f"e.g. {flag} {example}")
    return sorted(set(out))


def parse_rates(text: str) -> list[float] | str:
    """``8,16,32`` → [8, 16, 32]; ``auto`` → "auto"; ``inf`` allowed as a level."""
    if text.strip().lower() == "auto":
        return "auto"
    return _parse_levels(
        text, "--request-rates", float, "a number (req/s) or 'auto'", 0.0, "8,16,32,64,128"
    )


def parse_concurrencies(text: str) -> list[int]:
    """``1,2,4`` → [1, 2, 4]: concurrency caps, whole numbers ≥ 1."""
    return _parse_levels(text, "--concurrencies", int, "a whole number", 1, "1,2,4,8,16,32")


def round_sig(v: float, digits: int = 3) -> float:
    if v <= 0 or math.isinf(v):
        return v
    return float(f"{v:.{digits}g}")


def auto_fractions(n: int) -> list[float]:
    """``n`` fractions of the saturation throughput, from 0.1 to 1.2, denser near 1."""
    if n < 2:
        raise ConfigError.over_fields(
            f"{{auto_levels}} must be ≥ 2 (got {n})", hint="e.g. {auto_levels}=8"
        )
    anchors_t = np.linspace(0.0, 1.0, len(AUTO_FRACTIONS))
    shape = PchipInterpolator(anchors_t, np.array(AUTO_FRACTIONS))
    return [float(f) for f in shape(np.linspace(0.0, 1.0, n))]


def auto_rates(saturation_rps: float, n: int = len(AUTO_FRACTIONS)) -> list[float]:
    """Rates for a sweep around a measured saturation throughput (req/s)."""
    if not saturation_rps > 0 or math.isinf(saturation_rps):
        raise ConfigError.over_fields(
            "cannot place auto levels: the probe measured a throughput of "
            f"{saturation_rps:g} req/s",
            hint="check the probe level's run.json for failures, or give {request_rates}",
        )
    rates = sorted({round_sig(f * saturation_rps) for f in auto_fractions(n)})
    return [r for r in rates if r > 0]


def plan_levels(
    mode: LoadMode, values: list[float] | list[int], repeats: int = 1
) -> list[PlannedLevel]:
    """Levels in rising load; with ``repeats`` > 1 each load runs that many times in a row."""
    if repeats < 1:
        raise ConfigError.over_fields(f"{{repeats}} must be ≥ 1 (got {repeats})")
    return [
        PlannedLevel(
            label=level_label(mode, float(v), repeat=r), mode=mode, value=float(v), repeat=r
        )
        for v in sorted(values)
        for r in range(repeats)
    ]


def probe_level() -> PlannedLevel:
    return PlannedLevel(label=PROBE_LABEL, mode="rate", value=math.inf, role="probe")


PROBE_MAX_PROMPTS = 2000


def level_config(base: BenchConfig, level: PlannedLevel) -> BenchConfig:
    """The bench configuration of one level: the base with the level's rate or concurrency,
    and a seed of its own (:func:`~servetune.workload.seeds.derive_seed` of the sweep's seed
    and the level's label), so that no level sends the prompts of another: a server's prefix
    cache would answer them and the level would measure the cache.

    The probe sends a fixed number of requests at once (the sweep's ``--num-prompts``, at most
    2000, 1000 under ``--duration``) so that it saturates the server without a huge backlog.
    """
    seed = derive_seed(base.seed, level.label)
    if level.role == "probe":
        n = base.num_prompts if base.duration_s is None else 1000
        return base.model_copy(
            update={
                "request_rate": math.inf,
                "num_prompts": min(n, PROBE_MAX_PROMPTS),
                "duration_s": None,
                "label": level.label,
                "seed": seed,
            }
        )
    if level.mode == "rate":
        update: dict[str, object] = {"request_rate": level.value, "label": level.label}
    else:
        update = {
            "max_concurrency": int(level.value),
            "label": level.label,
        }
    update["seed"] = seed
    return base.model_copy(update=update)
