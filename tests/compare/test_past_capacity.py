"""Two runs past capacity: the per-request latencies are shown, not tested; throughput is.

Past capacity in both runs, a chance difference in the queue lasts the rest of the run — in
the waits, and in the token pace too (when each run's batch filled and what it held). Before,
TPOT was tested there: two seeds of Llama-3.1-8B/L4 512/128 at 4 and 5 req/s (capacity ~3.2)
came out "different" on P99 TPOT in 10 of these 20 pairs, the difference of one sign in nearly
every block (longer blocks did not help: at ≥ 2 decodes × the served/arrival rate ratio still
5 of 20 at 4 req/s and 3 of 20 at 8, and at ≥ 2 decodes the runs were too short to tell).
Throughput still finds a real change at saturation."""

from __future__ import annotations

from pathlib import Path

from servetune.compare.inputs import RunInput, load_run
from servetune.compare.runs import compare_runs
from servetune.results.schema import BenchConfig, Slo
from servetune.sim.config import EngineConfig
from servetune.sim.offline import simulate

SLO = Slo(ttft=1000, tpot=100)
PAIRS_PER_LOAD = 10
ALLOWED = 3
"""Of 2 × 10 pairs. A statistic with a 5% false-alarm rate exceeds 3 of 20 with probability
1.6%."""


def _llama_l4(path: Path, rate: float, seed: int, max_num_seqs: int | None = None) -> RunInput:
    cfg = BenchConfig(
        request_rate=rate,
        num_prompts=400,
        seed=seed,
        random_input_len=512,
        random_output_len=128,
        goodput=SLO,
    )
    engine = EngineConfig(
        gpu="L4",
        model="meta-llama/Llama-3.1-8B-Instruct",
        max_model_len=4096,
        max_num_seqs=max_num_seqs,
    )
    simulate(cfg, engine, path)
    return load_run(path)


def test_same_configuration_past_capacity_is_no_difference(tmp_path: Path) -> None:
    hits: list[tuple[float, int, list[str]]] = []
    for rate in (4.0, 5.0):
        for i in range(PAIRS_PER_LOAD):
            seed = 50000 + 2 * i
            a = _llama_l4(tmp_path / f"a{rate:g}-{i}", rate, seed)
            b = _llama_l4(tmp_path / f"b{rate:g}-{i}", rate, seed + 1)
            pc = compare_runs(a, b, SLO, replicates=2000, seed=i)
            sig = sorted(k for k, f in pc.figures.items() if f.headline and f.significant)
            if sig:
                hits.append((rate, i, sig))
    assert len(hits) <= ALLOWED, f"{len(hits)} of 20 same-config pairs differ: {hits}"


def test_max_num_seqs_at_saturation_is_found_by_throughput(tmp_path: Path) -> None:
    # 8 req/s: 2.5 times the capacity, past it with 16 sequences and with 128
    a = _llama_l4(tmp_path / "a", 8.0, 51000, max_num_seqs=16)
    b = _llama_l4(tmp_path / "b", 8.0, 51001, max_num_seqs=128)
    pc = compare_runs(a, b, SLO, replicates=2000)
    head = pc.figures
    assert head["output_throughput"].significant, pc.verdict
    assert head["output_throughput"].verdict == "better"
    assert head["p99_tpot_ms"].verdict == "past capacity"
    assert head["p50_ttft_ms"].verdict == "past capacity"
    assert "B differs from A" in pc.verdict
