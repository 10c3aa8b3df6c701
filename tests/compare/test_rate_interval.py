"""A rate compared on the additive scale (some block has none of it, e.g. goodput under a tight
SLO) keeps its interval in req/s: the blocks' rates average to the run's, they do not add up."""

from __future__ import annotations

from pathlib import Path

from tests.compare.sim_runs import sim_run

from servetune.compare.inputs import load_run
from servetune.compare.runs import compare_runs
from servetune.results.schema import Slo


def test_goodput_interval_on_the_additive_scale_is_in_req_per_s(tmp_path: Path) -> None:
    # 16 sequences cannot keep up with 8 req/s: A's queue grows and most of its blocks hold no
    # request within 300 ms TTFT, so goodput is compared as a difference, not a ratio
    a = load_run(sim_run(tmp_path / "a", 8.0, 11, max_num_seqs=16))
    b = load_run(sim_run(tmp_path / "b", 8.0, 12, max_num_seqs=128))
    pc = compare_runs(a, b, Slo(ttft=300.0, tpot=40.0), replicates=2000)
    good = pc.figures["request_goodput"]
    assert good.a is not None and good.b is not None and good.delta is not None
    assert good.ci_low is not None and good.ci_high is not None
    assert good.a < 1.0 < 4.0 < good.b
    assert good.ci_low <= good.delta <= good.ci_high
    # a goodput difference is at most what was offered (8 req/s): the interval may overshoot
    # that by its noise, not by the number of blocks (it reached ~126 req/s when the blocks'
    # rate differences were summed as if they were counts)
    assert good.ci_high < 2 * 8.0, (good.ci_low, good.ci_high)
    assert good.significant and good.verdict == "better"
