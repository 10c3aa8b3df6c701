"""At a tight SLO's edge one draw of the longer check does not decide it. The check steps
down until a 4,000-request draw meets the SLOs, so the rate it stops at is one that draw met
by a hair: Llama-3.1-8B on an H100 (simulated, 512→512 tokens, P99 TPOT ≤ 12 ms) reported
10.2 req/s, which its check's draw met, and six fresh 4,000-request draws at that rate missed
the SLOs, every one (worst SLO 1.00–1.09× its limit). A draw that meets with a margin under
the draw-to-draw noise (measured on the search's and the repeats' draws) is now drawn again,
and the rate holds only when both meet: the same study reports 9.25 req/s, which the six
draws met (0.92–0.99× the limit).

The simulated engine is deterministic for a seed; the fresh draws use seeds no part of the
study uses. Asserted with room: two of three fresh draws meet (before: none did)."""

from __future__ import annotations

from pathlib import Path

from servetune.metrics.slo_spec import parse_slos
from servetune.results.schema import BenchConfig
from servetune.results.tune_file import Dim, Space, TuneSpec
from servetune.tune.backends import SimBackend
from servetune.tune.run import run_tune

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
GPU = "H100-SXM"
SLOS = parse_slos(["ttft:p99<=200", "tpot:p99<=12"])
SPACE = Space(
    engine="sim",
    dims=[
        Dim(name="max_num_seqs", values=[8, 16, 32, 64, 128, 256, 512, 1024]),
        Dim(name="max_num_batched_tokens", values=[512, 1024, 2048, 4096, 8192, 16384]),
        Dim(name="kv_cache_dtype", values=["auto", "fp8"]),
        Dim(name="quantization", values=[None, "fp8"]),
    ],
)


def test_the_figure_reported_at_a_tight_slos_edge_holds_on_fresh_draws(tmp_path: Path) -> None:
    wl = BenchConfig(num_prompts=1000, random_input_len=512, random_output_len=512, seed=1)
    spec = TuneSpec(
        engine="sim",
        model=MODEL,
        gpu=GPU,
        workload=wl,
        slos=SLOS,
        space=SPACE,
        trials=12,
        repeats=3,
        ofat=False,
        seed=100,
    )
    r = run_tune(spec, tmp_path / "t", echo=lambda _m: None)
    assert r.best is not None
    held = next(c for c in r.confirmations if c.params == r.best.params)
    assert held.sustained
    # the figure reported, on 4,000 requests drawn with three other seeds
    met = []
    for seed in (70_001, 70_002, 70_003):
        fresh = wl.model_copy(update={"num_prompts": 4000, "seed": seed})
        probe = SimBackend(GPU, MODEL, fresh, SLOS).measurer(r.best.config, SLOS)(held.sustained)
        met.append(probe.meets)
    assert sum(met) >= 2, (held.sustained, met)
    # what held on how many draws, as the verdict says it
    assert held.noise is not None
    on = "two independent draws" if held.draws == 2 else "one draw"
    assert f"the best held {held.sustained:.3g} req/s there on {on}" in r.verdict, r.verdict
