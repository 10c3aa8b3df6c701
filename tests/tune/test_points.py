"""The points a tuning pass looks at (tune/points.py), and the calibrated simulator's ranking
of untried configurations drawn from them: the draw covers the whole space, not the product's
first points (which all share the first knobs' first values)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servetune.metrics.slo_spec import SloSpec, parse_slos
from servetune.results.schema import BenchConfig
from servetune.results.tune_file import TuneSpec
from servetune.tune.calibrating import CANDIDATES, QUEUED, Calibrating
from servetune.tune.points import SCREEN_SAMPLE, space_points
from servetune.tune.space import build_space

SEQS = [8, 16, 32, 64]


def _spec(knobs: list[str]) -> TuneSpec:
    return TuneSpec(
        engine="sim",
        model="Qwen/Qwen2.5-7B-Instruct",
        gpu="A100-80GB",
        workload=BenchConfig(num_prompts=50, seed=3),
        slos=parse_slos(["ttft:p99<=1000"]),
        space=build_space("sim", knobs),
        seed=11,
    )


LARGE = [
    "max_num_seqs=" + ",".join(map(str, SEQS)),
    "max_num_batched_tokens=" + ",".join(str(2048 * k) for k in range(1, 11)),
    "gpu_memory_utilization=0.6,0.65,0.7,0.75,0.8,0.85,0.9,0.95",
]
"""495 points (each knob also at "default"); in product order the first 192 hold only two
of max_num_seqs' five values."""


class Predictions:
    """Stands in for the calibrated simulator's predict: records what it was asked and
    scores by max_num_seqs (the ranking, not the simulation, is under test)."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    def predict(self, config: Mapping[str, Any], slos: list[SloSpec]) -> float | None:
        self.asked.append(dict(config))
        return float(config.get("max_num_seqs", 0))


def test_a_small_space_is_listed_whole_and_a_large_one_sampled_by_its_seed() -> None:
    small = _spec(["max_num_seqs=8,16", "max_num_batched_tokens=2048,4096"])
    assert len(space_points(small, random.Random(0))) == 9  # each knob also at "default"
    big = _spec(
        [
            "max_num_seqs=" + ",".join(str(8 * k) for k in range(1, 41)),
            "max_num_batched_tokens=" + ",".join(str(1024 * k) for k in range(1, 41)),
            "gpu_memory_utilization=0.6,0.7,0.8,0.9",
        ]
    )
    assert big.space.size() > SCREEN_SAMPLE
    a = space_points(big, random.Random(5))
    assert len(a) == SCREEN_SAMPLE and a == space_points(big, random.Random(5))
    assert len({p["max_num_seqs"] for p in a}) == 41  # every value drawn, not the first few


def test_the_ranking_draws_from_the_whole_space_and_queues_untried_points(
    tmp_path: Path,
) -> None:
    spec = _spec(LARGE)
    assert spec.space.size() > CANDIDATES * 4
    cal = Calibrating(spec, tmp_path, backend=None, catalog=None, echo=lambda _m: None)  # type: ignore[arg-type]
    sim = Predictions()
    tried = [{"max_num_seqs": 64, "max_num_batched_tokens": 2048, "gpu_memory_utilization": 0.9}]
    queued = cal._ranked(sim, tried)  # type: ignore[arg-type]
    # CANDIDATES scored (a "default" max_num_seqs predicts 0: not one), within the bound
    assert CANDIDATES < len(sim.asked) <= CANDIDATES * 4
    assert {c.get("max_num_seqs") for c in sim.asked} == {None, *SEQS}, "the whole space"
    assert len(queued) == QUEUED and all(q["max_num_seqs"] == 64 for q in queued)
    keys = [repr(sorted(q.items())) for q in queued]
    assert len(set(keys)) == QUEUED and repr(sorted(tried[0].items())) not in keys
    # another refit (one more trial) draws another order
    sim2 = Predictions()
    cal._ranked(sim2, [*tried, queued[0]])  # type: ignore[arg-type]
    assert sim2.asked != sim.asked
