"""A closed loop (``--request-rate inf --max-concurrency N``) plans every request at 0 and
sends it when a slot frees: compare places a request's latencies in the window it was
released in. Before, they all fell in the first window, so no latency was tested: max-num-seqs
16 → 128 at 32 in flight showed P50 TTFT 2,702 → 617 ms and P50 TPOT 20 → 27 ms with no
interval and the verdict "same"."""

from __future__ import annotations

from pathlib import Path

from tests.compare.sim_runs import sim_run

from servetune.compare.inputs import load_run
from servetune.compare.runs import compare_runs


def test_a_closed_loop_has_its_latencies_tested(tmp_path: Path) -> None:
    a = load_run(sim_run(tmp_path / "a", float("inf"), 1, 16, 600, max_concurrency=32))
    b = load_run(sim_run(tmp_path / "b", float("inf"), 2, 128, 600, max_concurrency=32))
    pc = compare_runs(a, b, replicates=2000)
    assert pc.method.arrival_blocks >= 10, pc.method
    ttft, tpot = pc.figures["p50_ttft_ms"], pc.figures["p50_tpot_ms"]
    assert ttft.ci_high is not None and ttft.ci_high < 0 and ttft.verdict == "better"
    assert tpot.ci_low is not None and tpot.ci_low > 0 and tpot.verdict == "worse"
