"""Real vLLM with its prefix cache on (V1's default): a sweep's levels each send fresh prompts,
so every level's hit rate stays near what its own prompts imply (≈ 0 for random prompts); the
counter-case — one bench run repeated with the same --seed — is flagged as measuring the
cache, in run.json, the sweep row and diagnose.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from real_engines import unexpected_failures

from servetune.diagnose import diagnose_path
from servetune.engines import EngineProcess, provisioned
from servetune.loadgen.bench import bench
from servetune.metrics.prefix_check import check_prefix_cache
from servetune.results.io import read_run_result
from servetune.results.schema import BenchConfig
from servetune.results.sweep_schema import SweepConfig
from servetune.sweep.runner import run_sweep
from servetune.sweep.targets import bench_runner

pytestmark = pytest.mark.real_engine


def _cfg(eng: EngineProcess, tiny: provisioned.TinyModel, seed: int) -> BenchConfig:
    return BenchConfig(
        base_url=eng.base_url,
        model="tiny",
        random_input_len=256,
        random_output_len=4,
        num_prompts=10,
        request_rate=4.0,
        tokenizer=str(tiny.hf_dir),
        seed=seed,
        request_timeout_s=300.0,
    )


def test_sweep_levels_do_not_measure_the_prefix_cache(
    vllm8: EngineProcess, tiny: provisioned.TinyModel, tmp_path: Path
) -> None:
    cfg = SweepConfig(bench=_cfg(vllm8, tiny, seed=501), mode="rate", request_rates=[2.0, 4.0])
    sweep = run_sweep(
        cfg, tmp_path, bench_runner(progress=False, metrics_interval_s=0.5), echo=lambda _: None
    )
    rows = sweep.measured_rows()
    assert len(rows) == 2
    for row in rows:
        assert not unexpected_failures(tmp_path / row.level_dir, "vllm-cpu")
        run = read_run_result(tmp_path / row.level_dir)
        assert run.workload is not None and run.workload.implied_prefix_hit_rate == 0.0
        check = check_prefix_cache(run)
        assert check is not None, "vLLM exports prefix-cache hits and queries"
        assert check.measured < 0.1 and not check.flagged, (row.label, check)
        assert row.server is not None and row.server.prefix_cache_hit_rate is not None
        assert not row.prefix_cache_flagged


def test_a_repeated_run_is_flagged_on_real_vllm(
    vllm8: EngineProcess, tiny: provisioned.TinyModel, tmp_path: Path
) -> None:
    cfg = _cfg(vllm8, tiny, seed=777)
    first = bench(cfg, tmp_path / "a", progress=False, metrics_interval_s=0.5)
    second = bench(cfg, tmp_path / "b", progress=False, metrics_interval_s=0.5)
    one, two = check_prefix_cache(first), check_prefix_cache(second)
    assert one is not None and two is not None
    assert not one.flagged, one
    # The CPU build caches in 128-token blocks and always recomputes the block holding a
    # prompt's last token: a repeated 256-token prompt hits 128 of its tokens (0.5).
    assert two.flagged and two.measured >= 0.4, two
    assert not math.isnan(two.measured)
    assert any(f.rule == "prefix_cache_inflated" for f in diagnose_path(tmp_path / "b").findings)
