"""Blocks last at least two of a request's decodes (a request shares the server's batch with
the requests that arrive while it decodes, so shorter blocks share their load with the next
one); a run whose arrivals hold fewer than 5 such blocks is too short to tell, and compare says
so — with the run length that would do — instead of calling or passing.

Before: the blocks were as short as a decode (Llama-3.1-8B/H100, 512/256 at 15 req/s: blocks
of 5.9 s, decode 5.8 s) and two seeds of one configuration came out "different" in 8 of 40
pairs."""

from __future__ import annotations

from pathlib import Path

from tests.compare.sim_runs import sim_run

from servetune.compare.inputs import RunInput, load_run
from servetune.compare.runs import compare_runs
from servetune.compare.signflip import LIFETIMES, MIN_VERDICT_BLOCKS
from servetune.results.schema import BenchConfig
from servetune.sim.config import EngineConfig
from servetune.sim.offline import simulate

LLAMA = EngineConfig(gpu="H100-SXM", model="meta-llama/Llama-3.1-8B-Instruct")


def _llama(path: Path, seed: int, requests: int) -> RunInput:
    cfg = BenchConfig(
        request_rate=15.0,
        num_prompts=requests,
        seed=seed,
        random_input_len=512,
        random_output_len=256,
    )
    simulate(cfg, LLAMA, path)
    return load_run(path)


def test_a_run_too_short_for_its_requests_lifetime_cannot_tell(tmp_path: Path) -> None:
    # 300 requests at 15 req/s: 20 s of arrivals, a request decodes for ~6 s
    a, b = _llama(tmp_path / "a", 90014, 300), _llama(tmp_path / "b", 90015, 300)
    pc = compare_runs(a, b, replicates=2000)
    m = pc.method
    assert m.too_short and m.arrival_blocks < MIN_VERDICT_BLOCKS
    assert m.block_windows * m.window_s[0] >= LIFETIMES * m.decode_s
    assert pc.verdict.startswith("cannot tell: the runs are too short"), pc.verdict
    assert f"run ≥ {m.needed_requests} requests" in pc.verdict
    head = [f for f in pc.figures.values() if f.headline]
    assert head and all(f.verdict == "cannot tell" and not f.significant for f in head)
    # the advice is one that works: runs of that length hold enough blocks to tell
    n = m.needed_requests
    longer = compare_runs(
        _llama(tmp_path / "a2", 90014, n), _llama(tmp_path / "b2", 90015, n), replicates=2000
    )
    assert not longer.method.too_short, longer.verdict
    assert longer.method.arrival_blocks >= MIN_VERDICT_BLOCKS
    assert not longer.verdict.startswith("cannot tell")


def test_the_calibration_workload_has_blocks_of_two_decodes_and_a_verdict(
    tmp_path: Path,
) -> None:
    a = load_run(sim_run(tmp_path / "a", 8.0, 7000))
    b = load_run(sim_run(tmp_path / "b", 8.0, 7001))
    pc = compare_runs(a, b, replicates=2000)
    m = pc.method
    assert m.decode_s > 0 and not m.too_short
    assert m.block_windows * m.window_s[0] >= LIFETIMES * m.decode_s
    assert m.arrival_blocks >= 10 and m.rule["headline"] == "sign-flip max-T"
    assert pc.verdict.startswith("no significant difference"), pc.verdict
