"""The server-metrics scraper: GET ``/metrics`` every interval during a run, map the engine's
names to concepts, append one :class:`ServerSample` a line to ``server_metrics.jsonl``.

It shares the event loop with the load generator, so it is built never to delay a send: one
request in flight at a time; once the engine is known, a :class:`Reducer` sums only the
mapped families straight from the text (no object per line, so no garbage to collect), fed
in slices of :data:`PARSE_SLICE_LINES` lines with a yield to the loop between slices (a
thread would not help: the GIL hands the loop back only every 5 ms). So no stretch holds the
loop for more than a fraction of a millisecond (``benchmarks/scrape_overhead.py`` measures
it); NVML reads run in a thread. Every failure is an observation, not an error: an absent or
unparsable ``/metrics`` is reported once (a warning and ``ServerInfo.error``) and the run
goes on; a concept the server does not expose lands in ``names_missing``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from servetune import profiles
from servetune.metrics.engine_maps import (
    VLLM_CACHE_CONFIG_INFO,
    EngineMap,
    all_base_names,
    detect,
)
from servetune.metrics.extract import extract_histograms, extract_values, reducer_for
from servetune.metrics.gpu import DcgmSource, GpuSource, NvmlSource, is_local_url
from servetune.metrics.loop_clock import LoopClock
from servetune.metrics.prom_reducer import Reducer
from servetune.metrics.prometheus import (
    MetricsView,
    ParsedMetrics,
    parse,
    parse_lines,
    wanted_sample_names,
)
from servetune.metrics.server_summary import cache_config, summarize_server
from servetune.results.io import LineAppender, sample_line
from servetune.results.schema import ServerInfo
from servetune.results.server_series import Histogram, ServerSample

log = logging.getLogger(__name__)

# Lines read between two yields to the event loop: ~0.1 ms of work on a quiet core (a yield
# costs a loop turn, ~10 us: 20 of them per 2,000-line page are cheap insurance).
PARSE_SLICE_LINES = 100

# Plain text (not OpenMetrics, not gzip): cheapest to produce and to read over loopback.
_HEADERS = {"Accept": "text/plain;version=0.0.4;q=1.0,*/*;q=0.1", "Accept-Encoding": "identity"}


def metrics_paths() -> tuple[str, ...]:
    """Where the engines serve their metrics (each profile's path, each once; ``/metrics``
    first)."""
    return tuple(dict.fromkeys(["/metrics", *(p.metrics.path for p in profiles.PROFILES)]))


def metrics_url_for(base_url: str, path: str = "/metrics") -> str:
    """``http://h:p/v1`` → ``http://h:p/metrics`` (a path prefix before ``/v1`` is kept)."""
    parts = urlsplit(base_url.strip())
    prefix = parts.path.rstrip("/")
    if prefix.endswith("/v1"):
        prefix = prefix[: -len("/v1")]
    return urlunsplit((parts.scheme or "http", parts.netloc, f"{prefix}{path}", "", ""))


def _alternatives(metrics_url: str) -> list[str]:
    """The other engines' metrics paths at METRICS_URL's origin, when it ends in one."""
    for path in metrics_paths():
        if metrics_url.endswith(path):
            base = metrics_url[: -len(path)]
            return [base + other for other in metrics_paths() if other != path]
    return []


class MetricsScraper:
    """Scrape ``metrics_url`` every ``interval_s`` seconds from :meth:`start` to :meth:`stop`.

    ``t0_ns`` is the run clock's zero (``time.perf_counter_ns()``); a sample's ``t`` is when
    its response arrived, in seconds on that clock. ``samples`` keeps what was written, so the
    caller can summarise any window with :func:`~servetune.metrics.server_summary.summarize_server`.
    """

    def __init__(
        self,
        metrics_url: str,
        out_path: Path,
        t0_ns: int = 0,
        interval_s: float = 1.0,
        dcgm_url: str | None = None,
        session: aiohttp.ClientSession | None = None,
        then: str | None = "the run goes on without them",
    ) -> None:
        """``then``: what the first scrape error's warning says happens next (None: no
        warning, the caller reports errors itself, as watch does)."""
        if interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        self.then = then
        self.metrics_url = metrics_url
        self.out_path = Path(out_path)
        self.t0_ns = t0_ns
        self.interval_s = interval_s
        self.dcgm_url = dcgm_url
        self.samples: list[ServerSample] = []
        self.engine_map: EngineMap | None = None
        self.block_s: list[float] = []
        """Per scrape, the longest stretch it held the event loop without yielding (wall s)."""
        self.measure_cpu = False
        """Also record CPU times (``block_cpu_s``, ``busy_cpu_s``): for benchmarks."""
        self.block_cpu_s: list[float] = []
        """Per scrape, the CPU time of that longest stretch (s): the scraper's own share."""
        self.busy_cpu_s: list[float] = []
        """Per scrape, the CPU time it used in all after the response (decode, parse, map,
        write)."""
        self._session = session
        self._own_session = session is None
        self._timeout = aiohttp.ClientTimeout(total=max(2.0, 2 * interval_s))
        self._wanted = wanted_sample_names(all_base_names() | {VLLM_CACHE_CONFIG_INFO})
        self.cache_config: dict[str, Any] = {}
        """The engine's KV-cache configuration (:func:`cache_config`), read with the first page."""
        self._found: dict[str, str] = {}
        self._logged = False
        self._reducer: Reducer | None = None
        self._error: str | None = None
        self._last_status: int | None = None
        self._recovered = False
        self._gpu: GpuSource | None = None
        self._nvml_opening: asyncio.Task[NvmlSource | None] | None = None
        self._gpu_error: str | None = None
        self._appender: LineAppender | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._prepared = False

    # -- lifecycle ---------------------------------------------------------------------------

    async def prepare(self, gpu_wait_s: float = 5.0) -> None:
        """Everything costly before the load starts: the HTTP session and its connection, the
        GPU source, and one full read of ``/metrics`` that detects the engine (no sample is
        kept). After it, each scrape during the run is the cheap, sliced reducer pass — so
        the first seconds of a run are not the ones a scrape delays."""
        if self._prepared:
            return
        self._prepared = True
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=2), headers=_HEADERS
            )
        self._appender = LineAppender(self.out_path)
        if self.dcgm_url:
            self._gpu = DcgmSource(self.dcgm_url, self._session, timeout_s=self._timeout.total or 2)
        elif is_local_url(self.metrics_url):
            # nvmlInit can take a good part of a second: wait a while for it here, before the
            # load; if it is slower still, GPU figures join the samples once NVML is up.
            self._nvml_opening = asyncio.create_task(asyncio.to_thread(NvmlSource.open))
        fetched = await self._fetch(quiet_404=True)
        if fetched is None and self._last_status == 404:
            fetched = await self._find_metrics()
            if fetched is None:
                self._report(f"GET {self.metrics_url} answered HTTP 404 (no /metrics here?)")
        if fetched is not None:
            await self._map(fetched[0], LoopClock())
        found = profiles.find(self.engine_map.engine) if self.engine_map is not None else None
        if found is not None and found.metrics.config_path:
            self.cache_config.update(await self._server_config(found.metrics))
        if self._nvml_opening is not None:
            await asyncio.wait([self._nvml_opening], timeout=gpu_wait_s)

    async def start(self, t0_ns: int | None = None) -> None:
        """Begin scraping: the first scrape runs at once (t≈0), then one each interval.
        ``t0_ns`` (the run's zero, if only known now) replaces the one given at creation."""
        if self._task is not None:
            raise RuntimeError("scraper already started")
        if t0_ns is not None:
            self.t0_ns = t0_ns
        await self.prepare()
        self._task = asyncio.create_task(self._run(), name="servetune-metrics-scraper")

    async def stop(self) -> ServerInfo:
        """Stop the loop, take one final scrape, flush, and say what was found."""
        if self._task is not None:
            self._stop.set()
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            await self._scrape_once()
        if self._appender is not None:
            self._appender.close()
            self._appender = None
        if self._nvml_opening is not None:
            # a thread cannot be cancelled: let it finish, then let go of NVML
            await asyncio.wait([self._nvml_opening])
            opened = self._nvml_opened(self._nvml_opening)
            self._nvml_opening = None
            if opened is not None:
                opened.close()
        if self._gpu is not None:
            self._gpu.close()
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None
        return self.info()

    def info(self, start_s: float | None = None, end_s: float | None = None) -> ServerInfo:
        """What was found; the summary covers [start_s, end_s] on the run clock (default: the
        whole series). Pass the client's measured window (``Summary.window_start_s`` /
        ``window_end_s``) so that server and client figures describe the same seconds."""
        emap = self.engine_map
        missing = [c for c in emap.concepts() if c not in self._found] if emap else []
        error = self._error
        if error and self._recovered:
            error += " (later scrapes succeeded)"
        summary = summarize_server(self.samples, start_s, end_s) if self.samples else {}
        summary.update(self.cache_config)
        if emap is not None:
            summary["engine_version"] = emap.version
        if self._gpu is not None:
            summary["gpu_source"] = self._gpu.name
        if self._gpu_error:
            summary["gpu_error"] = self._gpu_error
        return ServerInfo(
            engine=emap.engine if emap else None,
            metrics_url=self.metrics_url,
            names_found=dict(self._found),
            names_missing=missing,
            samples=len(self.samples),
            error=error,
            summary=summary,
        )

    # -- the loop ----------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while not self._stop.is_set():
            await self._scrape_once()
            next_at += self.interval_s
            now = loop.time()
            if next_at <= now:  # a slow scrape: skip the missed slots, keep the phase
                next_at += math.ceil((now - next_at) / self.interval_s + 1e-9) * self.interval_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), next_at - now)

    def _report(self, message: str) -> None:
        if self._error is None:
            self._error = message
            if self.then is not None:
                log.warning("server metrics: %s; %s", message, self.then)
            else:
                log.debug("server metrics: %s", message)
        else:
            log.debug("server metrics: %s", message)

    async def _fetch(self, quiet_404: bool = False) -> tuple[bytes, int] | None:
        """The page and when it arrived; None (reported) on any failure — a 404 not
        reported when ``quiet_404`` (the caller tries the other engines' paths first)."""
        assert self._session is not None
        try:
            async with self._session.get(
                self.metrics_url, timeout=self._timeout, headers=_HEADERS
            ) as resp:
                self._last_status = resp.status
                if resp.status == 404 and quiet_404:
                    return None
                if resp.status != 200:
                    hint = " (no /metrics here?)" if resp.status == 404 else ""
                    self._report(f"GET {self.metrics_url} answered HTTP {resp.status}{hint}")
                    return None
                body = await resp.read()
                return body, time.perf_counter_ns()
        except TimeoutError:
            self._report(f"GET {self.metrics_url} timed out after {self._timeout.total:g} s")
        except aiohttp.ClientConnectorError as exc:
            self._report(f"cannot connect to {self.metrics_url}: {exc.os_error or exc}")
        except aiohttp.ClientError as exc:
            self._report(f"GET {self.metrics_url} failed: {exc.__class__.__name__}: {exc}")
        return None

    async def _find_metrics(self) -> tuple[bytes, int] | None:
        """The page at another engine's metrics path of the same server (TensorRT-LLM serves
        ``/prometheus/metrics``), when ``metrics_url`` answered 404; the scraper keeps the
        one that answers."""
        assert self._session is not None
        for url in _alternatives(self.metrics_url):
            try:
                async with self._session.get(url, timeout=self._timeout, headers=_HEADERS) as r:
                    if r.status != 200:
                        continue
                    body = await r.read()
            except (TimeoutError, aiohttp.ClientError):
                continue
            log.info("server metrics: %s answered 404; using %s", self.metrics_url, url)
            self.metrics_url = url
            self._error = None
            return body, time.perf_counter_ns()
        return None

    async def _server_config(self, where: profiles.Metrics) -> dict[str, Any]:
        """The server's configuration from its JSON endpoint beside the metrics (llama.cpp's
        ``/props``: its slots and each slot's context), as the profile maps its fields.
        Nothing when the server does not answer it."""
        assert self._session is not None and where.config_path
        base = self.metrics_url[: -len(where.path)] if self.metrics_url.endswith(where.path) else ""
        url = (base or self.metrics_url.rsplit("/", 1)[0]) + where.config_path
        try:
            async with self._session.get(url, timeout=self._timeout) as resp:
                if resp.status != 200:
                    return {}
                props = await resp.json(content_type=None)
        except (TimeoutError, aiohttp.ClientError, ValueError):
            return {}
        out: dict[str, Any] = {}
        for dotted, key in where.config_fields:
            value: Any = props
            for part in dotted.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                out[key] = value
        return out

    def _nvml_opened(self, task: asyncio.Task[NvmlSource | None]) -> NvmlSource | None:
        try:
            return task.result()
        except Exception as exc:  # an NVML that fails oddly is still only "no GPU figures"
            self._gpu_error = f"nvml: {exc}"
            log.warning("GPU metrics unavailable: %s", self._gpu_error)
            return None

    async def _read_gpu(self) -> dict[str, float]:
        if self._gpu is None:
            return {}
        try:
            values = await self._gpu.read()
        except Exception as exc:  # a GPU source failing never stops the run
            if self._gpu_error is None:
                self._gpu_error = f"{self._gpu.name}: {exc}"
                log.warning("GPU metrics unavailable: %s", self._gpu_error)
            return {}
        for concept in values:
            self._found.setdefault(concept, self._gpu.names.get(concept, self._gpu.name))
        return values

    async def _scrape_once(self) -> None:
        if self._nvml_opening is not None and self._nvml_opening.done():
            self._gpu = self._nvml_opened(self._nvml_opening)
            self._nvml_opening = None
        if self._gpu is not None:
            fetched, gpu_values = await asyncio.gather(self._fetch(), self._read_gpu())
        else:
            fetched, gpu_values = await self._fetch(), {}
        clock = LoopClock(self.measure_cpu)
        values: dict[str, float] = {}
        hists: dict[str, Histogram] = {}
        if fetched is not None:
            body, at_ns = fetched
            t = (at_ns - self.t0_ns) / 1e9
            mapped = await self._map(body, clock)
            if mapped is not None:
                values, hists = mapped
        else:
            t = (time.perf_counter_ns() - self.t0_ns) / 1e9
        values.update(gpu_values)
        if values or hists:
            sample = ServerSample.model_construct(t=t, values=values, histograms=hists)
            self.samples.append(sample)
            if self._appender is not None:
                self._appender.write(sample_line(sample))
        clock.stop()
        self.block_s.append(clock.longest)
        if self.measure_cpu:
            self.block_cpu_s.append(clock.longest_cpu)
            self.busy_cpu_s.append(clock.total_cpu)

    async def _map(
        self, body: bytes, clock: LoopClock
    ) -> tuple[dict[str, float], dict[str, Histogram]] | None:
        lines = body.decode("utf-8", "replace").split("\n")
        await clock.yield_()  # decoding and splitting 170 KiB is a stretch of its own
        parsed: MetricsView
        emap = self.engine_map
        reducer = self._reducer
        if emap is not None and reducer is not None:
            reducer.reset()
            for i in range(0, len(lines), PARSE_SLICE_LINES):
                reducer.feed(lines[i : i + PARSE_SLICE_LINES])
                await clock.yield_()
            parsed = reducer
        else:
            full = ParsedMetrics()
            for i in range(0, len(lines), PARSE_SLICE_LINES):
                parse_lines(lines[i : i + PARSE_SLICE_LINES], full, self._wanted)
                await clock.yield_()
            parsed = full
        if emap is None:
            # the info gauge is configuration, not a sign of which engine this is
            emap = detect(parsed.names() - {VLLM_CACHE_CONFIG_INFO})
            if emap is None:
                self._report(self._why_not_mapped("\n".join(lines)))
                return None
            self.engine_map = emap
            if isinstance(parsed, ParsedMetrics):
                rows = parsed.series(VLLM_CACHE_CONFIG_INFO)
                self.cache_config = cache_config([row.labels for row in rows])
            self._wanted = wanted_sample_names(emap.base_names())
            self._reducer = reducer_for(emap)
        values, used = extract_values(parsed, emap)
        hists: dict[str, Histogram] = {}
        for _ in extract_histograms(parsed, emap, hists, used):
            await clock.yield_()
        for concept, name in used.items():
            self._found.setdefault(concept, name)
        if not self._logged:
            self._logged = True
            self._log_detected(emap)
        if self._error is not None:
            self._recovered = True
        return values, hists

    def _why_not_mapped(self, text: str) -> str:
        full = parse(text)
        good = full.lines - full.bad_lines
        if good <= 0 or full.bad_lines > good:
            head = text.strip()[:60].replace("\n", " ")
            return f"{self.metrics_url} is not Prometheus text (starts {head!r})"
        return (
            f"{self.metrics_url} exposes {len(full.samples)} series but no vLLM, SGLang, TGI "
            "or llama.cpp metric names"
        )

    def _log_detected(self, emap: EngineMap) -> None:
        missing = [c for c in emap.concepts() if c not in self._found]
        log.info("server metrics: %s at %s", emap.label, self.metrics_url)
        for concept in missing:
            log.info("server metrics: %s not exposed by this server", concept)


def describe_info(info: ServerInfo) -> list[str]:
    """Lines for a person: engine, what was missing, the error if any."""
    out: list[str] = []
    if info.engine:
        version = info.summary.get("engine_version")
        out.append(f"server metrics: {info.engine} {version or ''}".rstrip())
    out.extend(f"{c} not exposed by this server" for c in info.names_missing)
    if info.error:
        out.append(f"server metrics error: {info.error}")
    return out
