"""Run directories from the simulated engine's offline path, for compare's tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servetune.results.schema import BenchConfig
from servetune.sim.config import EngineConfig
from servetune.sim.offline import simulate


def sim_run(
    path: Path,
    rate: float,
    seed: int,
    max_num_seqs: int | None = None,
    num_prompts: int = 1000,
    **bench: Any,
) -> Path:
    cfg = BenchConfig(request_rate=rate, num_prompts=num_prompts, seed=seed, **bench)
    simulate(cfg, EngineConfig(max_num_seqs=max_num_seqs), path)
    return path
