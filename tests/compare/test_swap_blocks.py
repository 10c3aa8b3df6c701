"""A sweep shift's no-change replicates swap A's and B's runs of a level in blocks that follow
the run comparison's rule (:mod:`servetune.compare.blockrule`): at least two of a request's
decodes long unless both runs were past capacity — a request shares the server's batch with
the requests that arrive while it decodes, so a shorter block shares its load with the next.

Before: the swap's blocks were only capped to leave 12 over the arrivals. On a long-output
level (Qwen2.5-14B/H100, 256/1,024 tokens, 400 requests) they were 8.5 s against a 27 s
decode at 4 req/s and 3.4 s against 64 s at 8 req/s (medians over 20 seed pairs,
``benchmarks/compare_sweep_calibration.py``); here, at 2 req/s, 16 s against 2 × 17 s."""

from __future__ import annotations

from pathlib import Path

from servetune.compare.blockrule import past_capacity
from servetune.compare.inputs import RunInput, load_run
from servetune.compare.runs import compare_runs, paired_windows
from servetune.compare.signflip import LIFETIMES
from servetune.compare.swap import LevelSwap
from servetune.compare.sweeps import CURVE_FIGS
from servetune.results.schema import BenchConfig, Slo
from servetune.sim.config import EngineConfig
from servetune.sim.offline import simulate

QWEN14B = EngineConfig(gpu="H100-SXM", model="Qwen/Qwen2.5-14B-Instruct")
SLO = Slo(ttft=1000, tpot=20)


def _level(path: Path, seed: int, rate: float) -> RunInput:
    cfg = BenchConfig(
        request_rate=rate,
        num_prompts=400,
        seed=seed,
        random_input_len=256,
        random_output_len=1024,
        goodput=SLO,
    )
    simulate(cfg, QWEN14B, path)
    return load_run(path)


def test_swap_blocks_last_two_decodes_like_the_run_comparisons(tmp_path: Path) -> None:
    for rate in (2.0, 4.0):
        a = _level(tmp_path / f"a{rate:g}", 50004, rate)
        b = _level(tmp_path / f"b{rate:g}", 50005, rate)
        wa, wb = paired_windows(a, b, SLO)
        assert not (past_capacity(wa) and past_capacity(wb))
        decode_s = max(wa.decode_s, wb.decode_s)
        assert decode_s > 10.0  # the requests live long against the level's blocks
        swap = LevelSwap(wa, wb, CURVE_FIGS)
        assert swap.block * wa.width_s >= LIFETIMES * decode_s, (rate, swap.block, decode_s)
        assert swap.k == -(-wa.n // swap.block)
        # one rule: where the floor decides, the run comparison of the level cuts the same
        m = compare_runs(a, b, SLO, check=False, replicates=200).method
        assert m.block_windows == swap.block
