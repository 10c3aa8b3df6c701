"""A sweep measures the server, not its prefix cache (issue: every level sent the same prompts,
so from the second level on a server with prefix caching answered them from its cache).

Against the real-time simulated engine with prefix caching on (vLLM V1's default): every level
of a sweep sees a hit rate near what its own prompts imply, and no level is flagged; two bench
runs with the same --seed against one server are the counter-case — the second is flagged in
run.json, by the sweep row logic and by diagnose.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.cli import main
from servetune.diagnose import diagnose_path
from servetune.loadgen.bench import bench
from servetune.metrics.prefix_check import check_prefix_cache
from servetune.results.io import read_run_result
from servetune.results.schema import BenchConfig
from servetune.results.sweep_schema import read_sweep_result
from servetune.sim.config import EngineConfig
from servetune.sim.embedded import start_embedded

SIM = ["--model", "Qwen2.5-7B-Instruct", "--gpu", "A100-80GB", "--max-model-len", "4096"]


def test_each_level_of_a_realtime_sweep_sends_fresh_prompts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "sweep",
            *SIM,
            "--enable-prefix-caching",
            "--request-rates",
            "4,6,8",
            "--num-prompts",
            "20",
            "--random-input-len",
            "512",
            "--random-output-len",
            "8",
            "--metrics-interval",
            "0.25",
            "--result-dir",
            str(tmp_path),
            "--no-report",
            "--no-progress",
        ]
    )
    assert code == 0, capsys.readouterr().err
    sweep = read_sweep_result(tmp_path)
    rows = sweep.measured_rows()
    assert len(rows) == 3
    seeds = set()
    for row in rows:
        run = read_run_result(tmp_path / row.level_dir)
        seeds.add(run.config.seed)
        assert run.workload is not None and run.workload.implied_prefix_hit_rate == 0.0
        assert row.server is not None and row.server.prefix_cache_hit_rate is not None, row.label
        # Random prompts: the cache can only serve what the chat-free workload repeats (nothing).
        assert row.server.prefix_cache_hit_rate < 0.05, (row.label, row.server)
        assert not row.prefix_cache_flagged
    assert len(seeds) == 3


def test_a_repeated_seed_is_flagged_as_measuring_the_cache(tmp_path: Path) -> None:
    cfg = BenchConfig(
        num_prompts=16,
        request_rate=8.0,
        random_input_len=512,
        random_output_len=8,
        seed=1234,
    )
    engine = EngineConfig(
        model="Qwen2.5-7B-Instruct", max_model_len=4096, enable_prefix_caching=True
    )
    with start_embedded(engine) as server:
        cfg = cfg.model_copy(update={"base_url": server.base_url})
        first = bench(cfg, tmp_path / "first", progress=False, metrics_interval_s=0.25)
        second = bench(cfg, tmp_path / "second", progress=False, metrics_interval_s=0.25)
    one, two = check_prefix_cache(first), check_prefix_cache(second)
    assert one is not None and two is not None
    assert not one.flagged and one.measured < 0.05
    assert two.flagged and two.measured > 0.5, two
    assert any("measured the cache" in w for w in second.warnings)
    diag = diagnose_path(tmp_path / "second")
    top = [f for f in diag.findings if f.rule == "prefix_cache_inflated"]
    assert top and top[0].kind == "warning"
    assert "fresh" in top[0].actions[0].title or "--seed" in top[0].actions[0].title
    assert not [
        f for f in diagnose_path(tmp_path / "first").findings if f.rule == "prefix_cache_inflated"
    ]
