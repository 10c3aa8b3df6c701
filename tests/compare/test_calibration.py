"""compare's statistics, checked by repetition on the simulated engine's offline path.

Two runs of one configuration that differ only in the seed must come out "no significant
difference" on the headline figures at least 95% of the time — at a light load, near the knee
and past capacity (where the queue grows through the run) — and a real change must be found.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.compare.sim_runs import sim_run

from servetune.compare.inputs import load_run
from servetune.compare.runs import compare_runs
from servetune.results.schema import BenchConfig
from servetune.sim.config import EngineConfig
from servetune.sim.offline import simulate

PAIRS_PER_LOAD = 16
# Saturation of Qwen2.5-7B on A100-80GB with 1024/128 tokens is ~10 req/s: 4 is light, 8 near
# the knee, 32 far past capacity.
LOADS = (4.0, 8.0, 32.0)


@pytest.mark.slow
def test_same_configuration_different_seeds_is_no_difference_95_percent(tmp_path: Path) -> None:
    hits: list[tuple[float, int, list[str]]] = []
    total = 0
    for rate in LOADS:
        for i in range(PAIRS_PER_LOAD):
            seed = 7000 + 2 * i
            a = load_run(sim_run(tmp_path / f"a{rate:g}-{i}", rate, seed))
            b = load_run(sim_run(tmp_path / f"b{rate:g}-{i}", rate, seed + 1))
            pc = compare_runs(a, b, replicates=2000, seed=i)
            assert pc.comparable
            sig = [k for k, f in pc.figures.items() if f.headline and f.significant]
            if sig:
                hits.append((rate, i, sig))
            total += 1
    allowed = int(0.05 * total)
    assert len(hits) <= allowed, f"{len(hits)} of {total} same-config pairs differ: {hits}"


@pytest.mark.parametrize("seed", [11, 23, 37])
def test_max_num_seqs_16_to_128_at_high_load_is_found(tmp_path: Path, seed: int) -> None:
    # 8 req/s: past what max-num-seqs 16 sustains (~5.9 req/s), within what 128 does
    a = load_run(sim_run(tmp_path / "a", 8.0, seed, max_num_seqs=16))
    b = load_run(sim_run(tmp_path / "b", 8.0, seed + 1, max_num_seqs=128))
    pc = compare_runs(a, b, replicates=2000)
    head = {k: f for k, f in pc.figures.items() if f.headline}
    assert any(f.significant for f in head.values()), pc.verdict
    assert head["p50_ttft_ms"].verdict == "better"
    assert head["request_throughput"].verdict in ("better", "same")
    assert all(f.verdict != "worse" or k.endswith("tpot_ms") for k, f in head.items())
    assert "B differs from A" in pc.verdict
    assert any(d.flag == "--max-num-seqs" for d in pc.flags)


# Requests that live long against the run: Llama-3.1-8B on H100, 512/256 tokens at 15 req/s
# (a request decodes for ~6 s of a 67 s run), and the calibration workload run for only 60 s.
LONG_LIVED = {
    "llama8b-h100-15rps": (
        dict(request_rate=15.0, num_prompts=1000, random_input_len=512, random_output_len=256),
        EngineConfig(gpu="H100-SXM", model="meta-llama/Llama-3.1-8B-Instruct"),
    ),
    "qwen-60s-8rps": (dict(request_rate=8.0, duration_s=60), EngineConfig()),
}
LONG_LIVED_PAIRS = 12
LONG_LIVED_ALLOWED = 4
"""Of 2 × 12 pairs. A statistic with a 5% false-alarm rate exceeds 4 of 24 with probability
0.7% (3% at 7.5%); the seeds are fixed, so this test does not flake. On these very pairs the
earlier statistic (blocks as short as a decode) called 6 "different"; this one calls 3.
Measured over 40 pairs each: 8 → 3 (Llama) and 6 → 3 (60 s)."""


def test_requests_that_live_long_against_the_run_are_no_difference(tmp_path: Path) -> None:
    hits: list[tuple[str, int, list[str]]] = []
    for name, (bench, engine) in LONG_LIVED.items():
        for i in range(LONG_LIVED_PAIRS):
            runs = []
            for seed in (90000 + 2 * i, 90001 + 2 * i):
                path = tmp_path / f"{name}-{seed}"
                simulate(BenchConfig(seed=seed, **bench), engine, path)  # type: ignore[arg-type]
                runs.append(load_run(path))
            pc = compare_runs(runs[0], runs[1], replicates=2000, seed=i)
            assert pc.comparable
            sig = [k for k, f in pc.figures.items() if f.headline and f.significant]
            if sig:
                hits.append((name, i, sig))
    assert len(hits) <= LONG_LIVED_ALLOWED, hits
