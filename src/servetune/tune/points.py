"""The points of a tuning space a pass looks at: every combination of a small space, a seeded
sample of a large one. The screen before launch and the calibrated simulator's ranking of
untried configurations both take them from here, so neither favours the first knobs' values
the way the product's order would."""

from __future__ import annotations

import itertools
import random
from typing import Any

from servetune.results.tune_file import TuneSpec

SCREEN_SAMPLE = 4000
"""Points screened at most; a larger space is sampled (seeded by the spec)."""


def space_points(spec: TuneSpec, rng: random.Random) -> list[dict[str, Any]]:
    """Every point of ``spec``'s space when it has at most SCREEN_SAMPLE, in product order;
    else SCREEN_SAMPLE points drawn with ``rng`` (a value each, independently)."""
    dims = spec.space.dims
    if spec.space.size() <= SCREEN_SAMPLE:
        return [
            dict(zip([d.name for d in dims], combo, strict=True))
            for combo in itertools.product(*[d.values for d in dims])
        ]
    return [{d.name: rng.choice(d.values) for d in dims} for _ in range(SCREEN_SAMPLE)]


__all__ = ["SCREEN_SAMPLE", "space_points"]
