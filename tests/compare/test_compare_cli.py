"""``servetune compare`` end to end on simulated runs and sweeps: output forms, the
comparability check, engine flags, run/sweep mixes and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.compare.sim_runs import sim_run

from servetune.cli import main
from servetune.results.schema import BenchConfig, Slo
from servetune.results.sweep_schema import SweepConfig
from servetune.sim.config import EngineConfig
from servetune.sweep.runner import run_sweep
from servetune.sweep.targets import offline_runner

KEYS = {"a", "b", "delta", "ci_low", "ci_high", "significant"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("runs")
    return {
        "a": sim_run(d / "a", 8.0, 1, num_prompts=600),
        "a2": sim_run(d / "a2", 8.0, 2, num_prompts=600),
        "m16": sim_run(d / "m16", 8.0, 3, max_num_seqs=16, num_prompts=600),
        "longer": sim_run(d / "longer", 8.0, 4, num_prompts=600, random_input_len=2048),
        "r4": sim_run(d / "r4", 4.0, 5, num_prompts=600),
    }


def test_json_has_every_figure_under_its_vllm_key(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["compare", str(runs["a"]), str(runs["m16"]), "--json"])
    assert code == 0
    body = json.loads(capsys.readouterr().out)
    figs = body["figures"]
    for key in (
        "p50_ttft_ms",
        "p99_ttft_ms",
        "p90_tpot_ms",
        "p99_itl_ms",
        "p99_e2el_ms",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "failed",
        "kv_cache_usage_mean",
        "running_mean",
        "waiting_mean",
    ):
        assert set(figs[key]) >= KEYS, key
    ttft = figs["p50_ttft_ms"]
    assert ttft["delta"] == pytest.approx(ttft["b"] - ttft["a"])
    assert ttft["ci_low"] <= ttft["delta"] <= ttft["ci_high"]
    assert ttft["significant"] is True  # 16 sequences cannot keep up with 8 req/s
    pair = body["pairs"][0]
    assert {"flag": "--max-num-seqs", "a": 256, "b": 16}.items() <= pair["flags"][0].items() or any(
        f["flag"] == "--max-num-seqs" and f["a"] == 256 and f["b"] == 16 for f in pair["flags"]
    )


def test_terminal_and_html(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html = tmp_path / "out" / "cmp.html"
    assert main(["compare", str(runs["a"]), str(runs["a2"]), "--html", str(html)]) == 0
    out = capsys.readouterr().out
    assert "headline figures" in out and "P99 TTFT" in out and "verdict:" in out
    assert "seed: 1 vs 2" in out
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "P99 TTFT" in page and "<script" not in page


def test_different_workloads_are_refused_then_forced(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["compare", str(runs["a"]), str(runs["longer"])])
    captured = capsys.readouterr()
    assert code == 2
    assert "NOT COMPARABLE" in captured.out
    assert "random_input_len: 1024 vs 2048" in captured.out
    assert "--force" in captured.err
    code = main(["compare", str(runs["a"]), str(runs["r4"]), "--force", "--brief"])
    out = capsys.readouterr().out
    assert code == 0
    assert "request_rate: 8 vs 4" in out and "warning:" in out and "P50 TTFT" in out


def test_bad_input_is_a_clear_error(
    tmp_path: Path, runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", str(runs["a"])]) == 2
    assert "at least two" in capsys.readouterr().err
    assert main(["compare", str(runs["a"]), str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["compare", str(runs["a"]), str(empty)]) == 2
    assert "holds no servetune result" in capsys.readouterr().err
    # a numpy traceback before
    assert main(["compare", str(runs["a"]), str(runs["a"]), "--seed", "-1"]) == 2
    assert "--seed must be ≥ 0" in capsys.readouterr().err
    # the hint named --out, which compare does not have
    assert main(["compare", str(runs["a"]), str(runs["a"]), "--html", str(empty)]) == 2
    assert "hint: give another place (--html FILE)" in capsys.readouterr().err


LEVEL_REQUESTS = 800
"""A level's requests. At 8 req/s a request of 1,024/128 tokens decodes for ~4 s, and blocks
last two decodes: 400 requests (50 s of arrivals) hold 6 independent blocks, where P50 TTFT
766 → 185 ms (32 sequences falling behind, their queue growing from block to block: the log
ratio runs from −0.24 to −2.3) is t = 3.7 against the family's Student-Bonferroni 4.5 — not
called, honestly; 800 requests hold 13 blocks and it is."""


def _sweep(path: Path, max_num_seqs: int) -> Path:
    cfg = SweepConfig(
        bench=BenchConfig(num_prompts=LEVEL_REQUESTS, seed=3, goodput=Slo(ttft=2000, tpot=60)),
        request_rates=[2.0, 4.0, 6.0, 8.0, 10.0],
        target="offline",
    )
    run_sweep(
        cfg, path, offline_runner(EngineConfig(max_num_seqs=max_num_seqs)), echo=lambda _m: None
    )
    return path


def test_two_sweeps_side_by_side_with_knee_and_slo_max(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = _sweep(tmp_path / "s32", 32), _sweep(tmp_path / "s256", 256)
    code = main(
        [
            "compare",
            str(a),
            str(b),
            "--json",
            "--replicates",
            "500",
            "--html",
            str(tmp_path / "s.html"),
        ]
    )
    assert code == 0
    body = json.loads(capsys.readouterr().out)
    sc = body["sweeps"][0]
    assert [r["load"] for r in sc["rows"]] == [2.0, 4.0, 6.0, 8.0, 10.0]
    assert sc["knee_a"]["value"] is not None and sc["slo_max_b"]["value"] is not None
    shift = sc["slo_max_shift"]
    assert shift["value"] > 0  # 256 sequences hold the SLOs at a higher rate than 32
    assert shift["low"] <= shift["value"] <= shift["high"]
    at8 = next(r for r in sc["rows"] if r["load"] == 8.0)
    # 8 req/s: past what 32 sequences sustain, within what 256 do
    assert at8["significant"]["p50_ttft_ms"] is True
    assert at8["comparison"]["figures"]["p50_ttft_ms"]["verdict"] == "better"
    assert "<svg" in (tmp_path / "s.html").read_text()


def test_a_run_against_a_sweep_uses_the_sweeps_level_at_its_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = _sweep(tmp_path / "s", 256)
    run = sim_run(
        tmp_path / "r", 6.0, 9, num_prompts=LEVEL_REQUESTS, goodput=Slo(ttft=2000, tpot=60)
    )
    assert main(["compare", str(sweep), str(run), "--brief"]) == 0
    assert "rate-6" in capsys.readouterr().out
    odd = sim_run(tmp_path / "odd", 5.0, 9, num_prompts=LEVEL_REQUESTS)
    assert main(["compare", str(sweep), str(odd)]) == 2
    err = capsys.readouterr().err
    assert "5 req/s" in err and "2, 4, 6, 8, 10" in err
