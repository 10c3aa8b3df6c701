"""The end-of-run summary table, in the shape ``vllm bench serve`` users know."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from servetune.metrics.prefix_check import check_prefix_cache
from servetune.results.record import ERROR_CLASSES
from servetune.results.schema import RunResult, Stats

_METRICS = {
    "ttft": ("Time to first token", "TTFT"),
    "tpot": ("Time per output token (excl. 1st)", "TPOT"),
    "itl": ("Inter-token latency (chunk gaps)", "ITL"),
    "e2el": ("End-to-end latency", "E2EL"),
}
_STATUS_STYLE = {
    "complete": "green",
    "degraded": "bold yellow",
    "failed": "bold red",
    "interrupted": "yellow",
    "cut_short": "bold yellow",
    "running": "cyan",
}


def _fmt(x: float | None, digits: int = 2) -> str:
    return "—" if x is None else f"{x:,.{digits}f}"


def summary_table(result: RunResult) -> Table:
    s = result.summary
    h = result.client_health
    t = Table(
        title="Serving benchmark result (servetune)",
        show_header=False,
        box=None,
        title_justify="left",
        pad_edge=False,
    )
    t.add_column(style="bold")
    t.add_column(justify="right")

    def row(name: str, value: str) -> None:
        t.add_row(name, value)

    def section(name: str) -> None:
        t.add_row(f"[dim]── {name}[/dim]", "")

    style = _STATUS_STYLE.get(result.status, "bold")
    row("Status", f"[{style}]{result.status}[/{style}]")
    row("Successful requests", f"{s.completed}")
    row("Failed / cancelled / excluded", f"{s.failed} / {s.cancelled} / {s.excluded}")
    f = result.failures
    if f is not None and f.failed:
        section("Failures")
        row("  failed / ended (share)", f"{f.failed} / {f.requests} ({f.share:.1%})")
        row("  allowed (--max-failure-rate)", f"{f.max_share:.1%}")
        for cls, n in f.classes.items():
            row(f"  {cls}", str(n))
    cfg = result.config
    if s.short_outputs:
        note = " (ignore_eos sent!)" if cfg.ignore_eos else " (EOS; --ignore-eos to prevent)"
        row(
            "Outputs shorter than asked",
            f"{s.short_outputs} of {s.completed}, {s.short_output_tokens:,} tokens short" + note,
        )
    row("Benchmark duration (s)", _fmt(s.duration_s))
    row("Total input tokens", f"{s.total_input_tokens:,}")
    row("Total generated tokens", f"{s.total_output_tokens:,}")
    row("Request throughput (req/s)", _fmt(s.request_throughput))
    if s.request_goodput is not None:
        row("Request goodput (req/s)", _fmt(s.request_goodput))
    row("Output token throughput (tok/s)", _fmt(s.output_throughput))
    row("Total token throughput (tok/s)", _fmt(s.total_token_throughput))
    row("Peak / mean requests in flight", f"{s.max_concurrent_requests} / {s.mean_concurrency:.1f}")

    def stats(metric: str, st: Stats) -> None:
        """vLLM's block: mean, median and the --metric-percentiles of one metric."""
        title, short = _METRICS[metric]
        section(title)
        row(f"  Mean / median {short} (ms)", f"{_fmt(st.mean)} / {_fmt(st.p50)}")
        for word, value in (s.percentiles.get(metric) or {}).items():
            row(f"  P{word} {short} (ms)", _fmt(value))
        if st.p99_ci and "99" in (s.percentiles.get(metric) or {}):
            row("  P99 95% CI (ms)", f"[{_fmt(st.p99_ci[0])}, {_fmt(st.p99_ci[1])}]")

    # --percentile-metrics picks the blocks, --metric-percentiles their rows (vLLM's rule;
    # run.json keeps every metric's full distribution whatever is printed).
    for metric in cfg.percentile_metrics:
        stats(metric, getattr(s, metric))
    sched = s.ttft_from_scheduled
    if sched.count:
        row("TTFT from scheduled send, P99 (ms)", _fmt(sched.p99))
    section("Client health")
    rate = "—"
    if h.target_rate is not None:
        rate = f"{_fmt(h.achieved_rate)} / {_fmt(h.planned_rate)} / {_fmt(h.target_rate)}"
    cfg = result.config
    if cfg.dataset_name == "multiturn" and cfg.multiturn.rate_unit == "sessions":
        # sends are requests (turns); the rate asked for counts new sessions
        row("  achieved / planned req/s / target sessions/s", rate)
    else:
        row("  achieved / planned / target rate", rate)
    row("  send lag p50 / p99 (ms)", f"{_fmt(h.send_lag.p50, 3)} / {_fmt(h.send_lag.p99, 3)}")
    row("  workers", str(h.workers))
    if h.arrival_stamps is not None:
        share = h.kernel_stamped_share
        detail = (
            f" ({share:.0%} of reads by the kernel)"
            if h.arrival_stamps == "mixed" and share
            else ""
        )
        row("  arrival stamps", h.arrival_stamps + detail)
    ss = s.sessions
    if ss is not None:
        section("Sessions")
        row(
            "  sessions (completed / ended early)",
            f"{ss.sessions} ({ss.completed} / {ss.ended_early})",
        )
        row("  turns sent per session (mean)", _fmt(ss.mean_turns))
        if ss.truncated_turns:
            row("  turns truncated to the context cap", str(ss.truncated_turns))
        for tr in (ss.first_turn, ss.later_turns):
            if tr is not None:
                name = "first turns" if tr.turn == "1" else "later turns"
                row(
                    f"  {name}: P50 / P99 TTFT (ms)",
                    f"{_fmt(tr.ttft_p50)} / {_fmt(tr.ttft_p99)}  ({tr.requests} requests)",
                )
        row(
            "  per session mean TTFT, P50 / P99 (ms)",
            f"{_fmt(ss.session_ttft_mean_p50)} / {_fmt(ss.session_ttft_mean_p99)}",
        )
    cf = s.cache
    if cf is not None and cf.hit_rate is not None:
        section("Prefix cache (as the answers said)")
        row(
            "  cached / prompt tokens",
            f"{cf.cached_tokens:,} / {cf.prompt_tokens:,} = {cf.hit_rate:.1%}",
        )
        if cf.hit_rate_later_turns is not None:
            row("  hit rate of later turns", f"{cf.hit_rate_later_turns:.1%}")
        if cf.requests_reporting < cf.requests:
            row("  requests that said", f"{cf.requests_reporting} of {cf.requests}")
    w = result.workload
    if w is not None:
        section("Workload")
        row("  seed (--seed repeats it)", str(w.seed))
        if w.implied_prefix_hit_rate is not None:
            row("  prompt share a prefix cache may serve", f"{w.implied_prefix_hit_rate:.1%}")
    if result.server is not None and result.server.engine:
        section("Server")
        row("  engine (from /metrics)", result.server.engine)
        row("  samples", str(result.server.samples))
        cache = check_prefix_cache(result)
        if cache is not None:
            flag = "  [bold red]MEASURED THE CACHE[/bold red]" if cache.flagged else ""
            row("  prefix-cache hit rate", f"{cache.measured:.1%} (≤ {cache.ceiling:.0%}){flag}")
    return t


def print_summary(result: RunResult, console: Console | None = None) -> None:
    c = console or Console()
    c.print(summary_table(result))
    f = result.failures
    for w in result.warnings:
        if f is not None and f.over and w == f.verdict:
            continue  # said below, with the run's status
        style = "bold red" if "BEHIND" in w else "yellow"
        c.print(f"[{style}]warning:[/{style}] {w}")
    if f is not None and f.over:
        c.print(f"[bold red]{result.status}:[/bold red] {f.verdict}")
        for cls, example in f.examples.items():
            c.print(f"  {cls}: {ERROR_CLASSES.get(cls, '')} — e.g. {example}")
