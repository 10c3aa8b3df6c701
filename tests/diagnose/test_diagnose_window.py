"""The rules over a window of server metrics alone (diagnose.window), checked against the
same scenarios the run diagnosis is checked on: what the server's metrics show must name the
same bottleneck, without the client's records."""

from __future__ import annotations

from pathlib import Path

import pytest
from dx_scenarios import SCENARIOS

from servetune.diagnose.knobs import KnownConfig
from servetune.diagnose.window import WINDOW_RULES, evaluate_window
from servetune.results.io import read_records, read_run_result, read_server_series
from servetune.sim.offline import run_offline


def _recorded(tmp_path: Path, name: str) -> Path:
    sc = SCENARIOS[name]
    out = tmp_path / name
    run_offline(sc.bench_config(tmp_path), sc.engine_config(), out)
    return out


def _known() -> KnownConfig:
    return KnownConfig(source="test", gpu="A100-80GB", model="Qwen/Qwen2.5-7B-Instruct")


@pytest.mark.parametrize(
    "name,expect",
    [("kv_pool_full", "kv_pool_full"), ("under_loaded", "under_loaded"), ("healthy", "healthy")],
)
def test_window_names_the_scenarios_bottleneck(tmp_path: Path, name: str, expect: str) -> None:
    run_dir = _recorded(tmp_path, name)
    samples = read_server_series(run_dir)
    run = read_run_result(run_dir)
    start, end = run.summary.window_start_s, run.summary.window_end_s
    server = run.server.summary if run.server else {}
    fig, findings = evaluate_window(samples, start, end, _known(), server)
    fired = [f.rule for f in findings if f.kind in ("bottleneck", "warning", "healthy")]
    assert fired and fired[0] == expect, [(f.rule, f.kind, f.title) for f in findings]
    # server-side stand-ins for the client's figures
    assert fig.get("request_throughput") == pytest.approx(run.summary.request_throughput, rel=0.25)
    assert fig.get("ttft_p99_ms") is not None


def test_client_rules_are_not_judged(tmp_path: Path) -> None:
    run_dir = _recorded(tmp_path, "healthy")
    samples = read_server_series(run_dir)
    _, findings = evaluate_window(samples, samples[0].t, samples[-1].t, _known())
    ids = {f.rule for f in findings}
    assert not ids & {"client_behind", "burst", "failures"}
    assert {r.id for r in WINDOW_RULES} >= {"kv_pool_full", "batch_capped", "under_loaded"}
    # a rule that would need prompt lengths is never judged on a guess
    for f in findings:
        if f.rule in ("prefill_blocked", "short_prompts_wait"):
            assert f.kind == "cannot_tell"


def test_overload_seen_from_the_in_flight_trend(tmp_path: Path) -> None:
    from servetune.results.schema import BenchConfig
    from servetune.sim.config import EngineConfig

    out = tmp_path / "over"
    cfg = BenchConfig(
        num_prompts=400, request_rate=16.0, random_input_len=1024, random_output_len=128
    )
    run_offline(cfg, EngineConfig(max_num_seqs=256, max_num_batched_tokens=8192), out)
    samples = read_server_series(out)
    # a live window while the traffic goes on: up to the last send (the drain is not traffic)
    last_send = max(r.send_ns for r in read_records(out)) / 1e9
    fig, findings = evaluate_window(samples, 0.0, last_send, _known())
    assert (fig.get("inflight_growth_late_share") or 0) >= 0.15
    assert any(f.rule == "overloaded" and f.kind == "bottleneck" for f in findings)
