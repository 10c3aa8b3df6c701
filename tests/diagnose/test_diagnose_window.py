"""The rules over a window of server metrics alone (diagnose.window), checked against the
same scenarios the run diagnosis is checked on: what the server's metrics show must name the
same bottleneck, without the client's records."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.diagnose.dx_scenarios import SCENARIOS

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


def _synthetic(inflight_at, finished_rate: float = 6.0) -> list:  # type: ignore[no-untyped-def]
    from servetune.results.server_series import ServerSample

    out = []
    done = 0.0
    for i in range(81):
        t = i * 0.5
        busy = t >= 20
        done += finished_rate * 0.5 if busy else 0.0
        n = inflight_at(t)
        out.append(
            ServerSample(
                t=t,
                values={
                    "running": float(min(n, 256)),
                    "waiting": float(max(0, n - 256)),
                    "kv_cache_usage": 0.3 if busy else 0.0,
                    "requests_finished_total": done,
                    "preemptions_total": 0.0,
                },
            )
        )
    return out


def test_a_step_up_in_traffic_is_not_an_overload() -> None:
    # idle, then traffic arrives at t=27 s and the engine fills to 25 running within 4 s
    step = _synthetic(lambda t: 0 if t < 27 else min(25.0, (t - 27) * 6.25))
    fig, findings = evaluate_window(step, 10.0, 40.0, _known())
    assert (fig.get("inflight_growth_late_share") or 0) < 0.15
    assert not any(f.rule == "overloaded" and f.kind == "bottleneck" for f in findings)
    # the same window with requests piling up at 3/s throughout is one
    pile = _synthetic(lambda t: 0 if t < 20 else (t - 20) * 3.0)
    fig, findings = evaluate_window(pile, 10.0, 40.0, _known())
    assert (fig.get("inflight_growth_late_share") or 0) >= 0.15
    assert any(f.rule == "overloaded" and f.kind == "bottleneck" for f in findings)
