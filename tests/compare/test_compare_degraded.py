"""A run whose requests failed beyond --max-failure-rate is refused for what it is (degraded:
it finished, its latencies describe only the requests that succeeded), not as unfinished."""

from __future__ import annotations

from pathlib import Path

from servetune.compare.inputs import load_run
from servetune.compare.runs import compare_runs
from servetune.results.schema import BenchConfig
from servetune.sim.config import EngineConfig
from servetune.sim.offline import simulate


def _run(path: Path, seed: int, max_model_len: int | None) -> Path:
    # prompts of 512–1536 tokens against a 1,200-token context: the longer ones are refused
    cfg = BenchConfig(
        request_rate=8.0,
        num_prompts=300,
        seed=seed,
        random_input_len=1024,
        random_range_ratio=0.5,
    )
    simulate(cfg, EngineConfig(max_model_len=max_model_len), path)
    return path


def test_a_degraded_run_is_refused_as_degraded(tmp_path: Path) -> None:
    a = load_run(_run(tmp_path / "a", 3, None))
    b = load_run(_run(tmp_path / "b", 4, 1200))
    assert a.result.status == "complete" and b.result.status == "degraded"
    pc = compare_runs(a, b)
    assert not pc.comparable
    status = next(d for d in pc.differences if d.field == "run B status")
    assert status.severity == "refuse"
    assert "requests failed" in status.why and "did not finish" not in status.why
