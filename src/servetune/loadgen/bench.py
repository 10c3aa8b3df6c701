"""One load test, end to end: target → plan → load → records → summary → run.json.

``run_bench`` is the function every other command calls for a real-time level (sweep,
tune, the e2e tests); the CLI's ``servetune bench`` is a thin layer over it.

The run directory: checked writable first; ``run.json`` written when the load starts (status
``running``, kept current, see :mod:`servetune.results.run_dir`) and finished at the end with
the verdict (complete, degraded, failed, interrupted). A run that fails before its first
request leaves nothing behind: whatever it created is removed.
"""

from __future__ import annotations

import contextlib
import math
import shutil
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import NamedTuple, TypedDict, Unpack

from servetune.client.payload import build_body
from servetune.client.target import ServerTokenizer, probe_target
from servetune.client.transports import make_session
from servetune.errors import ConfigError
from servetune.loadgen.capacity import choose_workers
from servetune.loadgen.driver import PlannedRequest
from servetune.loadgen.progress import ProgressLine
from servetune.loadgen.runner import LoadItem, LoopSetup, run_load
from servetune.loadgen.session_driver import PlannedSession, SessionStyle
from servetune.loadgen.stamps import note_stamps
from servetune.metrics.prefix_check import check_prefix_cache
from servetune.metrics.run_finish import finish
from servetune.metrics.run_result import run_result
from servetune.metrics.scraper import MetricsScraper, describe_info, metrics_url_for
from servetune.results.environment import this_machine
from servetune.results.io import (
    REQUESTS_FILE,
    RUN_FILE,
    SERVER_METRICS_FILE,
    ensure_result_dir,
    free_run_dir,
    read_records,
    write_run_result,
)
from servetune.results.run_dir import RunFile
from servetune.results.schema import (
    BenchConfig,
    ClientHealth,
    Environment,
    RunResult,
    ServerInfo,
    Summary,
    TargetInfo,
)
from servetune.workload.plan import Plan, make_plan
from servetune.workload.prefix_share import workload_facts
from servetune.workload.server_align import align_with_server
from servetune.workload.tokens import load_tokenizer

Notify = Callable[[str], None]


_RUN_FILES = (RUN_FILE, REQUESTS_FILE, SERVER_METRICS_FILE)


def _prepare_dir(result_dir: Path, overwrite: bool) -> tuple[Path, Path | None]:
    """The run directory, writable and free of an earlier run; and the topmost directory this
    call created (None when it existed), which a run that never started removes again."""
    p = result_dir.expanduser()
    created: Path | None = None
    probe = p
    while not probe.exists() and probe != probe.parent:
        created = probe
        probe = probe.parent
    d = ensure_result_dir(p)
    free_run_dir(d, overwrite)
    for n in _RUN_FILES:
        (d / n).unlink(missing_ok=True)
    return d, created


def _undo_dir(out: Path, created: Path | None) -> None:
    """Remove what a run that sent nothing left: its files, and the directories it made."""
    if (out / REQUESTS_FILE).exists() and (out / REQUESTS_FILE).stat().st_size > 0:
        return  # something was measured: keep it
    for n in _RUN_FILES:
        with contextlib.suppress(OSError):
            (out / n).unlink()
    for tmp in out.glob("*.tmp"):
        with contextlib.suppress(OSError):
            tmp.unlink()
    if created is not None and created.is_dir():
        leftovers = [f for f in created.rglob("*") if not f.is_dir()]
        if not leftovers:
            shutil.rmtree(created, ignore_errors=True)


def _check_lengths(plan: Plan, target: TargetInfo) -> None:
    if target.max_model_len is None:
        return
    requests = plan.requests
    if plan.sessions is not None:  # later turns are kept under the context cap as they go
        requests = [plan.requests[i] for i in _first_turns(plan)]
    worst = max(requests, key=lambda s: s.input_len + s.output_len)
    need = worst.input_len + worst.output_len
    if need > target.max_model_len:
        raise ConfigError.over_fields(
            f"a request needs {worst.input_len} input + {worst.output_len} output = {need} "
            f"tokens, beyond the server's max_model_len of {target.max_model_len}",
            hint="lower {random_input_len} / {random_output_len} (or the dataset's lengths), "
            "or restart the server with a larger max_model_len",
        )


def _planned_requests(plan: Plan, cfg: BenchConfig, model: str) -> list[PlannedRequest]:
    bodies: dict[int, bytes] = {}
    items = []
    for rid, (spec, off) in enumerate(zip(plan.requests, plan.offsets_ns, strict=True)):
        body = bodies.get(id(spec))
        if body is None:
            body = bodies[id(spec)] = build_body(
                spec, model, cfg.endpoint, cfg.ignore_eos, cfg.temperature
            )
        items.append(PlannedRequest(rid, off, body, spec.input_len, spec.output_len))
    return items


def _first_turns(plan: Plan) -> list[int]:
    """Indexes in ``plan.requests`` of each session's first turn."""
    out, i = [], 0
    for s in plan.sessions or []:
        out.append(i)
        i += len(s.turns)
    return out


def _planned_sessions(plan: Plan) -> list[PlannedSession]:
    out: list[PlannedSession] = []
    rid = 0
    assert plan.sessions is not None and plan.session_offsets_ns is not None
    for s, off in zip(plan.sessions, plan.session_offsets_ns, strict=True):
        turns = [(t.user, t.user_tokens, t.output_len, round(t.think_s * 1e9)) for t in s.turns]
        out.append(PlannedSession(s.sid, off, rid, s.system, s.system_tokens, turns))
        rid += len(turns)
    return out


def session_style(cfg: BenchConfig, model: str, max_model_len: int | None) -> SessionStyle:
    """How the sessions' requests are shaped; the context cap defaults to the server's
    max_model_len."""
    mt = cfg.multiturn
    return SessionStyle(
        model=model,
        chat=cfg.endpoint == "chat",
        ignore_eos=cfg.ignore_eos,
        temperature=cfg.temperature,
        header=mt.session_header,
        max_context=mt.max_context if mt.max_context is not None else max_model_len,
        on_overflow=mt.on_overflow,
    )


async def _prepare_scraper(
    base_url: str, result_dir: Path, interval_s: float, dcgm_url: str | None
) -> MetricsScraper:
    """A scraper with its costly first steps done (before the load: they would delay the
    first sends); started at the run's t0."""
    scraper = MetricsScraper(
        metrics_url_for(base_url),
        result_dir / SERVER_METRICS_FILE,
        interval_s=interval_s,
        dcgm_url=dcgm_url,
    )
    await scraper.prepare()
    return scraper


async def run_bench(
    cfg: BenchConfig,
    result_dir: str | Path,
    *,
    progress: bool = True,
    scrape_metrics: bool = True,
    metrics_interval_s: float = 1.0,
    dcgm_url: str | None = None,
    overwrite: bool = False,
    num_prompts_given: bool = True,
    notify: Notify | None = None,
    on_start: Callable[[int], Awaitable[None]] | None = None,
) -> RunResult:
    """Run one load test against ``cfg.base_url`` and write the run directory."""
    say = notify or (lambda _m: None)
    if cfg.base_url is None:
        raise ConfigError(
            "no target: run_bench needs cfg.base_url",
            hint="to load-test the simulated engine, start it (servetune.simulate runs it "
            "offline; `servetune sim serve` serves it)",
        )
    env = this_machine()
    out, created = _prepare_dir(Path(result_dir), overwrite)
    try:
        return await _run(
            cfg,
            out,
            env,
            say,
            _RunOptions(progress, scrape_metrics, metrics_interval_s, dcgm_url, num_prompts_given),
            on_start,
        )
    except BaseException:
        _undo_dir(out, created)  # keeps everything once a request was recorded
        raise


class _RunOptions(NamedTuple):
    progress: bool
    scrape_metrics: bool
    metrics_interval_s: float
    dcgm_url: str | None
    num_prompts_given: bool


async def _run(
    cfg: BenchConfig,
    out: Path,
    env: Environment,
    say: Notify,
    opts: _RunOptions,
    on_start: Callable[[int], Awaitable[None]] | None,
) -> RunResult:
    assert cfg.base_url is not None
    async with make_session(cfg.api_key) as session:
        target = await probe_target(session, cfg.base_url, cfg.model)
        cfg = cfg.model_copy(update={"model": target.model})
        tok = load_tokenizer(cfg.tokenizer)
        plan = make_plan(cfg, tok, opts.num_prompts_given)
        target.tokenizer, target.tokens_approximate = tok.name, not tok.exact
        if not tok.exact and plan.sessions is None:
            counter = ServerTokenizer(session, target.base_url, target.model)
            if await counter.count("hello world") is not None:
                say("aligning prompt lengths with the server's /tokenize …")
                resize = cfg.dataset_name in ("random", "prefix")
                specs, missed = await align_with_server(plan.requests, counter.count, resize)
                plan = plan.model_copy(update={"requests": specs})
                target.tokenizer, target.tokens_approximate = "server", missed > 0
        _check_lengths(plan, target)
    facts = workload_facts(plan.requests, cfg.seed, cfg.endpoint == "chat", plan.sessions)
    items: Sequence[LoadItem]
    style = None
    if plan.sessions is not None:
        items = _planned_sessions(plan)
        style = session_style(cfg, target.model, target.max_model_len)
    else:
        items = _planned_requests(plan, cfg, target.model)
    mean_out = sum(s.output_len for s in plan.requests) / max(1, len(plan.requests))
    workers = cfg.workers or choose_workers(plan.planned_rate or cfg.request_rate, mean_out)
    workers = max(1, min(workers, len(items)))
    setup = LoopSetup(
        base_url=cfg.base_url,
        endpoint=cfg.endpoint,
        api_key=cfg.api_key,
        timeout_s=cfg.request_timeout_s,
        http_client=cfg.http_client,
        requests_path=out / REQUESTS_FILE,
        max_concurrency=cfg.max_concurrency,
        stop_after_ns=plan.duration_ns,
        drain_timeout_s=cfg.request_timeout_s,
        tokenizer=cfg.tokenizer,
        sessions=style,
    )
    scraper: MetricsScraper | None = None
    if opts.scrape_metrics:
        scraper = await _prepare_scraper(
            target.base_url, out, opts.metrics_interval_s, opts.dcgm_url
        )
    run_file = RunFile(
        out,
        run_result(
            cfg,
            Summary(),
            environment=env,
            target=target,
            health=ClientHealth(workers=workers),
            status="running",
            workload=facts,
        ),
    )

    async def started(t0_ns: int) -> None:
        run_file.result.environment.clock_t0_ns = t0_ns
        run_file.start()
        if scraper is not None:
            await scraper.start(t0_ns)
        if on_start is not None:
            await on_start(t0_ns)

    what = f"{len(items)} requests"
    unit = "req/s"
    if plan.sessions is not None:
        what = f"{len(items)} sessions ({len(plan.requests)} turns planned)"
        unit = "sessions/s"
        if cfg.multiturn.rate_unit == "requests":
            unit = "req/s (sessions start at that over the mean turns)"
    say(
        f"{what} to {target.model} at {target.base_url}, "
        f"rate {cfg.request_rate:g} {unit}"
        + (f", max concurrency {cfg.max_concurrency}" if cfg.max_concurrency else "")
        + f", {workers} worker{'s' if workers > 1 else ''}"
    )
    line = ProgressLine(
        None if plan.duration_ns else len(plan.requests),
        None if math.isinf(cfg.request_rate) else plan.planned_rate,
        enabled=opts.progress,
        on_update=run_file.progress,
    )
    try:
        outcome = await run_load(items, setup, workers, line, on_start=started)
    finally:
        if scraper is not None:
            await scraper.stop()
        await run_file.settle()

    records = read_records(out)
    env.clock_t0_ns = outcome.t0_ns
    result = finish(
        run_file.result.model_copy(update={"environment": env}),
        records,
        interrupted=outcome.interrupted,
        workers=workers,
    )
    health = result.client_health
    health.cpu_s = outcome.cpu_s
    health.cpu_per_request_ms = 1000 * outcome.cpu_s / len(records) if records else None
    note_stamps(health, outcome.snapshots)
    if scraper is not None:
        # The server's figures over the same seconds as the client's (warm-up/cool-down out).
        win = result.summary
        server: ServerInfo = scraper.info(win.window_start_s, win.window_end_s)
        for note in describe_info(server):
            say(note)
        result.server = server
    cache = check_prefix_cache(result)
    if cache is not None and cache.flagged:
        result.warnings.append(cache.message())
        say(cache.message())
    write_run_result(out, result)
    return result


class BenchOptions(TypedDict, total=False):
    """:func:`run_bench`'s keyword arguments, for :func:`bench` to pass on."""

    progress: bool
    scrape_metrics: bool
    metrics_interval_s: float
    dcgm_url: str | None
    overwrite: bool
    num_prompts_given: bool
    notify: Notify | None
    on_start: Callable[[int], Awaitable[None]] | None


def bench(cfg: BenchConfig, result_dir: str | Path, **kwargs: Unpack[BenchOptions]) -> RunResult:
    """Synchronous :func:`run_bench` (on uvloop when installed)."""
    from servetune.aio import run

    return run(run_bench(cfg, result_dir, **kwargs))
