"""The live `overloaded` rule and the hold time of watch's findings, closed loop on the
simulated engine's virtual clock: `sim run` traces (Poisson arrivals, fixed seeds — every
figure below is deterministic) replayed scrape by scrape through a real WatchSession, whose
refresh evaluates diagnose's rules over the sliding window and starts/stops findings.

Workload: 1024 prompt / 128 output tokens on the simulated A100 with Qwen2.5-7B, capacity
≈ 10.2 req/s. benchmarks/watch_overload.py measures the same over more seeds, loads and a
second workload (docs/watch.md has the table)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.diagnose.window import evaluate_window
from servetune.results.io import read_records, read_server_series
from servetune.results.schema import BenchConfig
from servetune.results.server_series import ServerSample
from servetune.results.watch_file import read_watch_recording
from servetune.sim.config import EngineConfig
from servetune.sim.offline import run_offline
from servetune.watch.hold import HOLD_S, Hold
from servetune.watch.session import WatchSession

CAPACITY = 10.2


def _trace(
    tmp_path: Path, rate: float, seconds: float, seed: int
) -> tuple[list[ServerSample], float]:
    """The server's samples every 1 s (watch's default scrape) and the last send."""
    out = tmp_path / f"r{rate:g}_s{seed}"
    cfg = BenchConfig(
        num_prompts=round(rate * seconds),
        request_rate=rate,
        random_input_len=1024,
        random_output_len=128,
        seed=seed,
    )
    run_offline(cfg, EngineConfig(), out)
    # without the latency histograms: the overloaded rule's conditions read none of them,
    # and they take most of a refresh's time (the test would take a minute instead of seconds)
    samples = [
        s.model_copy(update={"histograms": {}})
        for s in read_server_series(out)
        if abs(s.t - round(s.t)) < 1e-6
    ]
    return samples, max(r.send_ns for r in read_records(out)) / 1e9


def _replay(
    samples: list[ServerSample], until: float, window_s: float, hold_s: float, rec: Path | None
) -> tuple[WatchSession, list[tuple[float, bool, bool]]]:
    """Feed the samples to a WatchSession one scrape at a time (its clock = the trace's) and
    refresh after each: (t, the rule fired in this window, the finding is active)."""
    s = WatchSession(
        "http://127.0.0.1:9", window_s=window_s, hold_s=hold_s, record_dir=rec
    )  # never opened: no scraping, the test feeds it
    clock = [0.0]
    s.now = lambda: clock[0]  # type: ignore[method-assign]
    out = []
    for sample in samples:
        if sample.t > until:
            break
        clock[0] = sample.t
        s.scraper.samples.append(sample)
        s.refresh()
        if s.window_full:
            fired = any(f.rule == "overloaded" and f.kind == "bottleneck" for f in s.findings)
            out.append((sample.t, fired, "overloaded" in s.active))
    return s, out


def _share(rows: list[tuple[float, bool, bool]], col: int) -> float:
    return sum(r[col] for r in rows) / len(rows)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_stable_server_near_capacity_is_not_called_past_capacity(
    tmp_path: Path, seed: int
) -> None:
    # 9 req/s = 88% of capacity for 5 minutes. Before: the rule fired in 8% and 10% of the
    # 30-s windows of these two traces (the slope of a quarter window against 15% of the
    # arrivals), and every such stretch was a finding started and stopped: 10 and 6
    # start/stop pairs. A burst of arrivals above capacity still fires the bare rule for a
    # while (it is past capacity for those seconds: 3% and 8% of windows now); the finding
    # must hold for a minute, which no such burst does.
    samples, last = _trace(tmp_path, 9.0, 300, seed)
    s, rows = _replay(samples, last, 30.0, HOLD_S, tmp_path / "rec")
    assert len(rows) > 250
    assert not any(r[2] for r in rows), "the overloaded finding started at 88% load"
    assert not [e for e in s.events if e.rule == "overloaded"]
    rec = read_watch_recording(tmp_path / "rec")
    assert rec.hold_s == HOLD_S


def test_a_real_overload_is_held_not_flapping(tmp_path: Path) -> None:
    # 13 req/s = 1.27× capacity. Before: the rule fired in 54% of the 30-s windows, so the
    # finding started and stopped 18 times (and a `for: 1m` alert, reset by every gap, rarely
    # fired). Now the rule fires in 97% of them; one start, once it held for the hold time
    # (measured: condition from t=69 s, start at 129 s), and no stop.
    samples, last = _trace(tmp_path, 13.0, 240, 1)
    s, rows = _replay(samples, last, 30.0, HOLD_S, None)
    assert _share(rows, 1) >= 0.7  # the bare rule, per window (measured 0.9)
    events = [e for e in s.events if e.rule == "overloaded"]
    assert [e.event for e in events] == ["start"], events
    start = events[0]
    assert start.since is not None and start.t - start.since >= HOLD_S
    # on from its start to the end of the traffic
    assert all(r[2] for r in rows if r[0] >= start.t)
    assert start.t <= 30.0 + HOLD_S + 60  # it shows within a minute of the hold


def test_a_step_up_in_traffic_below_capacity_is_not_an_overload(tmp_path: Path) -> None:
    # 2 req/s, then from t=60 s 8.6 req/s (88% of this workload's capacity, ≈ 9.8 req/s) of
    # 256/512 ±50% tokens: the engine fills to its new level over ~10 s (E2E), and the windows
    # whose last two quarters hold that fill fire the bare rule — here from t=68 to 96 s (the
    # rule before: 68-93 s in three stretches, and 32-37 s, 156-157 s: 5 start/stop pairs of
    # the finding, which fails this test). The finding never starts: the fill is over before
    # the hold of a minute (a hold shorter than the fill, ~30 s here, would call it one).
    import numpy as np

    from servetune.sim.memory import plan_memory
    from servetune.sim.offline_plan import workload_plan
    from servetune.sim.offline_run import OfflineRun

    cfg = BenchConfig(
        num_prompts=1500,
        request_rate=8.6,
        random_input_len=256,
        random_output_len=512,
        random_range_ratio=0.5,
        seed=1,
    )
    plan, _, _ = workload_plan(cfg)
    rng = np.random.default_rng(1)
    offsets: list[float] = []
    t = 0.0
    while True:
        t += rng.exponential(1 / (2.0 if t < 60 else 8.6))
        if t > 200:
            break
        offsets.append(t)
    plan = plan.model_construct(
        requests=plan.requests[: len(offsets)], offsets_ns=[int(x * 1e9) for x in offsets]
    )
    r = EngineConfig().resolve()
    sim = OfflineRun(plan, cfg, r, plan_memory(r, None), keep_series=True)
    sim.run()
    samples = [
        s.model_copy(update={"histograms": {}}) for s in sim.series if abs(s.t - round(s.t)) < 1e-6
    ]
    s, rows = _replay(samples, offsets[-1], 30.0, HOLD_S, None)
    assert any(r[1] for r in rows if 60 < r[0] < 100)  # the bare rule sees the fill
    assert not [e for e in s.events if e.rule == "overloaded"]


def test_a_short_window_at_light_load_is_quiet(tmp_path: Path) -> None:
    # 2 req/s = 20% of capacity, --window 10: a quarter holds ~5 arrivals. Before: the rule
    # fired in 21 of 298 windows (7%); the growth is now told from the arrivals' noise first
    # (0 of 298).
    samples, last = _trace(tmp_path, 2.0, 300, 1)
    fired = 0
    n = 0
    for end in range(10, int(last) + 1):
        seen = [x for x in samples if end - 10 <= x.t <= end]
        _, findings = evaluate_window(seen, end - 10.0, float(end))
        fired += any(f.rule == "overloaded" and f.kind == "bottleneck" for f in findings)
        n += 1
    assert n > 250
    assert fired / n <= 0.01, f"{fired} of {n} windows called past capacity"


def test_hold_is_prometheus_for_and_keep_firing_for() -> None:
    h: Hold[str] = Hold(10.0)
    seen = {"kv": "KV full"}
    changes = []
    # true at 0..9: pending (for: 10s not reached); a gap at 10 resets it
    for t in range(10):
        changes += h.update(float(t), seen)
    assert not changes and "kv" in h.pending and not h.active
    changes += h.update(10.0, {})
    assert not h.pending
    # true from 11: starts at 21, condition onset 11
    for t in range(11, 22):
        changes += h.update(float(t), seen)
    assert [(c.event, c.t, c.since) for c in changes] == [("start", 21.0, 11.0)]
    # absent 22..30 (9 s after its last sighting at 21): keeps firing; back at 31
    for t in range(22, 31):
        assert not h.update(float(t), {})
    assert not h.update(31.0, seen) and "kv" in h.active
    # absent from 32: stops at 41 (10 s after 31), its last sighting recorded
    stops = [c for t in range(32, 42) for c in h.update(float(t), {})]
    assert [(c.event, c.t, c.since) for c in stops] == [("stop", 41.0, 31.0)]
    # hold 0: the bare rule
    h0: Hold[str] = Hold(0.0)
    assert [c.event for c in h0.update(0.0, seen)] == ["start"]
    assert [c.event for c in h0.update(1.0, {})] == ["stop"]


def test_the_report_shades_a_held_finding_where_its_rule_held() -> None:
    # a finding started 60 s after its rule began to hold and stopped 60 s after it last
    # held: the report's span is the rule's (40-95 s), not the hold-delayed events' (100-155 s)
    from servetune.report.recording import _spans
    from servetune.results.watch_file import FindingEvent, WatchRecording

    ev = {"at": "", "rule": "overloaded", "kind": "bottleneck", "title": "Past capacity"}
    rec = WatchRecording(
        url="u",
        metrics_url="u",
        started_at="",
        updated_at="",
        interval_s=1.0,
        window_s=30.0,
        hold_s=60.0,
        events=[
            FindingEvent(t=100.0, event="start", since=40.0, **ev),
            FindingEvent(t=155.0, event="stop", since=95.0, **ev),
        ],
    )
    assert _spans(rec, 200.0) == [(40.0, 95.0, "overloaded", "bottleneck")]
