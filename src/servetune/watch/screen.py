"""The terminal view of a watch session (rich): traffic, latency percentiles, the engine's
state, the findings in force and the events of findings starting and stopping."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from servetune.watch.session import WatchFigures, WatchSession, fmt_age

_LAT_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E", "queue": "queue"}
_KIND_STYLE = {"bottleneck": "bold red", "warning": "yellow", "advisory": "cyan"}


def _ms(v: float | None) -> str:
    if v is None:
        return "—"
    if v >= 10_000:
        return f"{v / 1000:.1f} s"
    if v >= 1000:
        return f"{v / 1000:.2f} s"
    return f"{v:.1f} ms" if v < 10 else f"{v:.0f} ms"


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v:.0%}"


def _num(v: float | None, digits: int = 1) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


def figures_table(f: WatchFigures) -> Table:
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    t.add_row(
        "traffic",
        f"{_num(f.requests_per_s, 2)} req/s   prompt {_num(f.prompt_tokens_per_s, 0)} tok/s   "
        f"generated {_num(f.generation_tokens_per_s, 0)} tok/s",
    )
    lat = Table(box=None, pad_edge=False, show_edge=False, header_style="dim")
    lat.add_column("")
    for col in ("p50", "p90", "p99", "requests"):
        lat.add_column(col, justify="right")
    for name, q in f.latency_ms.items():
        n = q.get("count")
        lat.add_row(
            _LAT_NAMES.get(name, name),
            _ms(q.get("p50")),
            _ms(q.get("p90")),
            _ms(q.get("p99")),
            "—" if n is None else f"{n:,.0f}",
        )
    t.add_row("latency", lat if f.latency_ms else Text("no latency histogram exposed", "dim"))
    pool = f" of {f.kv_cache_tokens:,} tokens" if f.kv_cache_tokens else ""
    t.add_row(
        "KV cache",
        f"{_pct(f.kv_cache_usage)} now{pool}   mean {_pct(f.kv_cache_usage_mean)}   "
        f"max {_pct(f.kv_cache_usage_max)}",
    )
    t.add_row(
        "requests",
        f"running {_num(f.running, 0)} (mean {_num(f.running_mean)})   waiting "
        f"{_num(f.waiting, 0)} (mean {_num(f.waiting_mean)})",
    )
    pre = (
        "—" if f.preemptions is None else f"{f.preemptions:,.0f} ({_num(f.preemptions_per_s, 2)}/s)"
    )
    t.add_row(
        "engine",
        f"preemptions {pre}   prefix-cache hit rate {_pct(f.prefix_cache_hit_rate)}   "
        f"GPU utilisation {_pct(f.gpu_utilization_mean)}",
    )
    return t


def render(s: WatchSession, events: int = 6) -> Group:
    emap = s.scraper.engine_map
    head = Text.assemble(
        ("servetune watch ", "bold"),
        s.metrics_url,
        "  ",
        (f"{emap.label}" if emap else "engine ?", "cyan"),
        f"  window {s.window_s:g} s  scrape {s.interval_s:g} s  up {fmt_age(s.now())}",
    )
    parts: list[object] = [head]
    if s.unreachable_since is not None:
        parts.append(
            Text(
                f"metrics unreachable since t={s.unreachable_since:.0f} s: {s.last_error or ''}",
                "bold red",
            )
        )
    if s.figures is None:
        parts.append(Text("waiting for a second scrape …", "dim"))
    else:
        parts.append(figures_table(s.figures))
    find = Table.grid(padding=(0, 1))
    find.add_column(style="bold")
    find.add_column()
    if s.active:
        for rule, f in s.active.items():
            since = s.since.get(rule)
            age = (
                "" if since is None or s.figures is None else f" (for {s.figures.t - since:.0f} s)"
            )
            action = f" → {f.actions[0].title}" if f.actions else ""
            find.add_row(
                Text("●", _KIND_STYLE.get(f.kind, "")),
                Text(f"{f.title}{age}{action}", _KIND_STYLE.get(f.kind, "")),
            )
    titles = {f.rule: f.title for f in s.findings}
    for rule, onset in s.hold.pending.items():
        if s.figures is None or rule not in titles:
            continue
        find.add_row(
            Text("○", "dim"),
            Text(
                f"{titles[rule]} — pending: held {s.figures.t - onset:.0f} of "
                f"{s.hold.hold_s:g} s (--for)",
                "dim",
            ),
        )
    if not s.active and not s.hold.pending and s.findings:
        find.add_row(Text("✓", "green"), Text(s.findings[0].title, "green"))
    if not s.window_full and s.figures is not None:
        find.add_row(
            Text("…", "dim"),
            Text(f"filling the window ({s.figures.window_s:.0f} of {s.window_s:g} s)", "dim"),
        )
    parts.append(Text("findings (diagnose's rules over the window)", "bold underline"))
    parts.append(find)
    for f in s.cannot_tell():
        why = f.missing[0] if f.missing else "a figure is missing"
        parts.append(Text(f"cannot tell: {f.rule.replace('_', ' ')} — {why}", "dim"))
    if s.events:
        ev = Table.grid(padding=(0, 1))
        for e in s.events[-events:]:
            mark = "+" if e.event == "start" else "−"
            ev.add_row(
                Text(f"t={e.t:7.1f} s", "dim"),
                Text(mark, "red" if e.event == "start" else "green"),
                Text(f"{e.rule} {'started' if e.event == 'start' else 'stopped'}: {e.title}"),
            )
        parts.append(Text("events", "bold underline"))
        parts.append(ev)
    return Group(*parts)  # type: ignore[arg-type]
