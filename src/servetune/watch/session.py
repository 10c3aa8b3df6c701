"""A watch session: scrape a server's ``/metrics`` every interval (the run scraper of
:mod:`servetune.metrics.scraper`, engine names discovered by its maps), keep the samples of a
sliding window, and at every refresh compute the window's figures and evaluate diagnose's rules
over it (:func:`servetune.diagnose.window.evaluate_window`; one rule table for diagnose, watch
and the alerts). A finding *starts* once its rule has held at every refresh for the hold time
(``--for``) and *stops* once it has been absent as long (:mod:`servetune.watch.hold`, the
alert rules' ``for:`` / ``keep_firing_for:``); both are events, kept and recorded.

Window figures: counters and histograms are differences between the sample at or before the
window's start and the last one (so rates and percentiles cover exactly the window); gauges
are the samples inside it (:func:`servetune.metrics.server_summary.summarize_server`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from servetune.diagnose.knobs import KnownConfig
from servetune.diagnose.model import Finding
from servetune.diagnose.window import evaluate_window
from servetune.errors import ConfigError, TargetError
from servetune.metrics.scraper import MetricsScraper, metrics_url_for
from servetune.metrics.server_summary import summarize_server
from servetune.results import server_series as ss
from servetune.results.io import RUN_FILE, SERVER_METRICS_FILE, SWEEP_FILE, ensure_result_dir
from servetune.results.server_series import ServerSample
from servetune.results.watch_file import (
    WATCH_FILE,
    FindingEvent,
    WatchRecording,
    write_watch_recording,
)
from servetune.watch.hold import HOLD_S, Hold

ACTIVE_KINDS = ("bottleneck", "warning", "advisory")
LATENCIES = (
    ("ttft", ss.TTFT_SECONDS),
    ("tpot", ss.TPOT_SECONDS),
    ("itl", ss.ITL_SECONDS),
    ("e2e", ss.E2E_SECONDS),
    ("queue", ss.QUEUE_SECONDS),
)


def resolve_metrics_url(url: str) -> str:
    """A base URL (``http://h:p`` or ``…/v1``) or the ``/metrics`` URL itself."""
    u = url.strip()
    if not u.startswith(("http://", "https://")):
        raise ConfigError(
            f"not an http(s) URL: {url!r}", hint="e.g. servetune watch http://127.0.0.1:8000"
        )
    try:
        _ = urlsplit(u).port
        bad_port = False
    except ValueError:  # 99999: aiohttp's InvalidUrlClientError, or urllib wrapping it round
        bad_port = True
    if bad_port or not urlsplit(u).hostname:
        raise ConfigError(
            f"not a valid URL (host, or a port in 1-65535): {url!r}",
            hint="e.g. servetune watch http://127.0.0.1:8000",
        )
    if u.rstrip("/").endswith("/metrics"):
        return u.rstrip("/")
    return metrics_url_for(u)


class WatchFigures(BaseModel):
    """What the screen shows for one sliding window (None: not exposed by this server)."""

    t: float
    window_s: float
    samples: int
    requests_per_s: float | None = None
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    latency_ms: dict[str, dict[str, float | None]] = Field(default_factory=dict)
    """ttft/tpot/itl/e2e/queue → p50, p90, p99 (and count) from the histograms."""
    kv_cache_usage: float | None = None
    kv_cache_usage_mean: float | None = None
    kv_cache_usage_max: float | None = None
    running: float | None = None
    running_mean: float | None = None
    waiting: float | None = None
    waiting_mean: float | None = None
    preemptions: float | None = None
    preemptions_per_s: float | None = None
    prefix_cache_hit_rate: float | None = None
    gpu_utilization_mean: float | None = None
    kv_cache_tokens: int | None = None


def window_figures(
    samples: list[ServerSample], start: float, end: float, pool_tokens: int | None
) -> WatchFigures:
    summ = summarize_server(samples, start, end)
    last = samples[-1].values if samples else {}
    lat: dict[str, dict[str, float | None]] = {}
    for name, _concept in LATENCIES:
        h = summ.get(f"{name}_ms")
        if isinstance(h, dict):
            lat[name] = {k: h.get(k) for k in ("p50", "p90", "p99", "count")}
    return WatchFigures(
        t=end,
        window_s=end - start,
        samples=int(summ.get("samples", 0)),
        requests_per_s=summ.get("requests_finished_per_s"),
        prompt_tokens_per_s=summ.get("prompt_tokens_per_s"),
        generation_tokens_per_s=summ.get("generation_tokens_per_s"),
        latency_ms=lat,
        kv_cache_usage=last.get(ss.KV_CACHE_USAGE),
        kv_cache_usage_mean=summ.get("kv_cache_usage_mean"),
        kv_cache_usage_max=summ.get("kv_cache_usage_max"),
        running=last.get(ss.RUNNING),
        running_mean=summ.get("running_mean"),
        waiting=last.get(ss.WAITING),
        waiting_mean=summ.get("waiting_mean"),
        preemptions=summ.get("preemptions"),
        preemptions_per_s=summ.get("preemptions_per_s"),
        prefix_cache_hit_rate=summ.get("prefix_cache_hit_rate"),
        gpu_utilization_mean=summ.get("gpu_utilization_mean"),
        kv_cache_tokens=pool_tokens,
    )


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _refuse_results_in(d: Path) -> None:
    """A recording replaces server_metrics.jsonl: never in a folder that already holds results
    (a run's or sweep's, or an earlier recording), whose own samples it would destroy."""
    held = [n for n in (RUN_FILE, SWEEP_FILE, WATCH_FILE) if (d / n).exists()]
    samples = d / SERVER_METRICS_FILE
    if samples.exists() and (held or samples.stat().st_size > 0):
        held.append(SERVER_METRICS_FILE)
    if held:
        raise ConfigError.over_fields(
            f"{{record}} {d} already holds results ({', '.join(held)}); recording there would "
            f"replace its {SERVER_METRICS_FILE}",
            hint="give {record} a new or empty folder",
        )


class WatchSession:
    """Scrape, window, evaluate, track, record. Drive it with :meth:`open`, :meth:`refresh`
    (every refresh interval) and :meth:`close`."""

    def __init__(
        self,
        url: str,
        *,
        interval_s: float = 1.0,
        window_s: float = 30.0,
        record_dir: str | Path | None = None,
        known: KnownConfig | None = None,
        dcgm_url: str | None = None,
        hold_s: float = HOLD_S,
    ) -> None:
        if not interval_s > 0:
            raise ConfigError.over_fields(
                f"{{interval_s}} must be > 0 s (got {interval_s:g})", hint="e.g. {interval_s}=1"
            )
        if not window_s >= 2 * interval_s:
            raise ConfigError.over_fields(
                f"{{window_s}} ({window_s:g} s) must hold at least two scrapes "
                f"({{interval_s}} {interval_s:g} s)",
                hint="a window of 30-120 s is usual",
            )
        if not 0 <= hold_s < math.inf:
            raise ConfigError.over_fields(
                f"{{hold_s}} must be ≥ 0 s (got {hold_s:g})", hint="e.g. 60 s, or 0 for at once"
            )
        self.url = url
        self.metrics_url = resolve_metrics_url(url)
        self.hold: Hold[Finding] = Hold(hold_s)
        self.interval_s = interval_s
        self.window_s = window_s
        self.known = known or KnownConfig()
        if record_dir is not None:
            _refuse_results_in(Path(record_dir).expanduser())
        self.record_dir = ensure_result_dir(record_dir) if record_dir is not None else None
        out = self.record_dir / SERVER_METRICS_FILE if self.record_dir else Path(os.devnull)
        if self.record_dir is not None:
            (self.record_dir / SERVER_METRICS_FILE).unlink(missing_ok=True)
        self.t0_ns = time.perf_counter_ns()
        self.scraper = MetricsScraper(
            self.metrics_url,
            out,
            t0_ns=self.t0_ns,
            interval_s=interval_s,
            dcgm_url=dcgm_url,
            then=None,  # the session says what an unreachable server means for the watch
        )
        self.started_at = _now_iso()
        self.active: dict[str, Finding] = {}
        self.since: dict[str, float] = {}
        """Active finding → when its condition began to hold."""
        self.events: list[FindingEvent] = []
        self.findings: list[Finding] = []
        self.figures: WatchFigures | None = None
        self.unreachable_since: float | None = None
        self.window_full = False
        self.last_error: str | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self, patience_s: float = 15.0) -> None:
        """Read /metrics and find the engine; a TargetError when that fails. A server too busy
        to answer the first read in time gets ``patience_s`` more of the scraper's reads."""
        await self.scraper.prepare()
        started = False
        if self.scraper.engine_map is None and "timed out" in (self.scraper.info().error or ""):
            await self.scraper.start(self.t0_ns)
            started = True
            deadline = time.monotonic() + patience_s
            while self.scraper.engine_map is None and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
        if self.scraper.engine_map is None:
            why = self.scraper.info().error or "no engine metrics found"
            await self.scraper.stop()
            raise TargetError(
                f"cannot watch {self.metrics_url}: {why}",
                hint="is the server up, and does it expose /metrics (vLLM does; llama-server "
                "needs --metrics; TGI/SGLang expose it by default)? A base URL like "
                "http://127.0.0.1:8000 or the /metrics URL itself both work",
            )
        if not started:
            await self.scraper.start(self.t0_ns)
        self._record()

    async def close(self) -> None:
        info = await self.scraper.stop()
        self.last_error = info.error
        self.refresh()
        self._record(status="stopped")

    # -- each refresh ----------------------------------------------------------------------

    def now(self) -> float:
        return (time.perf_counter_ns() - self.t0_ns) / 1e9

    def _trim(self) -> None:
        """Keep the window's samples and the one before it (the counters' baseline)."""
        samples = self.scraper.samples
        keep_from = self.now() - self.window_s - 2 * self.interval_s
        cut = 0
        while cut < len(samples) - 2 and samples[cut + 1].t < keep_from:
            cut += 1
        if cut:
            del samples[:cut]

    def refresh(self) -> WatchFigures | None:
        """Compute the window, evaluate the rules, note the findings that start and stop."""
        self._trim()
        samples = list(self.scraper.samples)
        now = self.now()
        if samples and now - samples[-1].t > 3 * self.interval_s + 2:
            if self.unreachable_since is None:
                self.unreachable_since = samples[-1].t
        else:
            self.unreachable_since = None
        self.last_error = self.scraper.info().error if self.unreachable_since else None
        if len(samples) < 2:
            return None
        end = samples[-1].t
        start = max(samples[0].t, end - self.window_s)
        pool = self.scraper.cache_config.get("kv_cache_tokens")
        self.figures = window_figures(samples, start, end, pool if isinstance(pool, int) else None)
        if end - samples[0].t < self.window_s - self.interval_s:
            return self.figures  # the rules judge full windows only (no start-up transient)
        self.window_full = True
        _fig, findings = evaluate_window(samples, start, end, self.known, self.scraper.cache_config)
        self.findings = findings
        current = {f.rule: f for f in findings if f.kind in ACTIVE_KINDS}
        for ch in self.hold.update(end, current):
            self.events.append(
                FindingEvent(
                    t=ch.t,
                    at=_now_iso(),
                    event=ch.event,
                    rule=ch.key,
                    kind=ch.item.kind,
                    title=ch.item.title,
                    since=ch.since,
                )
            )
        self.active = dict(self.hold.active)
        self.since = dict(self.hold.onset)
        self._record()
        return self.figures

    def cannot_tell(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "cannot_tell"]

    # -- recording -------------------------------------------------------------------------

    def recording(self, status: str = "running") -> WatchRecording:
        info = self.scraper.info()
        emap = self.scraper.engine_map
        return WatchRecording(
            status=status,  # type: ignore[arg-type]
            url=self.url,
            metrics_url=self.metrics_url,
            engine=emap.engine if emap else None,
            engine_version=emap.version if emap else None,
            started_at=self.started_at,
            updated_at=_now_iso(),
            interval_s=self.interval_s,
            window_s=self.window_s,
            hold_s=self.hold.hold_s,
            duration_s=self.now(),
            samples=info.samples,
            names_found=info.names_found,
            names_missing=info.names_missing,
            server_summary=dict(self.scraper.cache_config),
            config=self.known.model_dump(mode="json", exclude={"engine_config"}),
            last_window=self.figures.model_dump(mode="json") if self.figures else {},
            active=list(self.active),
            events=list(self.events),
            error=self.last_error,
        )

    def _record(self, status: str = "running") -> None:
        if self.record_dir is not None:
            write_watch_recording(self.record_dir, self.recording(status))


async def run_for(
    session: WatchSession,
    refresh_s: float,
    duration_s: float | None,
    on_refresh: Any = None,
) -> None:
    """Open, refresh every ``refresh_s`` until ``duration_s`` (None: until cancelled), close."""
    await session.open()
    deadline = None if duration_s is None else time.monotonic() + duration_s
    try:
        while True:
            await asyncio.sleep(refresh_s)
            session.refresh()
            if on_refresh is not None:
                on_refresh(session)
            if deadline is not None and time.monotonic() >= deadline:
                break
    finally:
        with contextlib.suppress(asyncio.CancelledError):
            await session.close()
        if on_refresh is not None:
            on_refresh(session)


def fmt_age(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "—"
    s = int(seconds)
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"
