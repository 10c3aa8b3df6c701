"""``servetune watch URL``: a running server's own /metrics, live in the terminal.

Requests/s, tokens/s, TTFT/TPOT/ITL/E2E percentiles from the engine's histograms over a
sliding window, KV-cache use, running/waiting, preemptions, prefix-cache hit rate, and the
seed's rules (diagnose's table) evaluated over the same window: findings shown as they start
(once a rule held for ``--for``) and stop (once absent as long). ``--record DIR`` writes
``server_metrics.jsonl`` and ``watch.json`` (diagnose and the report read them).
``--duration S`` stops by itself; ``--json`` prints one JSON document at the end (the last
window's figures, the findings, the events) instead of the live view.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from servetune.commands._url_args import http_url
from servetune.commands.export import parse_duration
from servetune.watch.hold import HOLD_S


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", help="the server's base URL (http://host:port[/v1]) or its /metrics URL")
    p.add_argument(
        "--window", type=float, default=30.0, help="sliding window, seconds (rules judge full ones)"
    )
    p.add_argument("--interval", type=float, default=1.0, help="seconds between scrapes")
    p.add_argument("--refresh", type=float, default=1.0, help="seconds between screen updates")
    p.add_argument(
        "--for",
        dest="hold_s",
        metavar="DURATION",
        type=parse_duration,
        default=HOLD_S,
        help="a finding starts once its rule held this long and stops once absent this long "
        "(1m, the alert rules' for: / keep_firing_for:; 0 = at every refresh)",
    )
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.add_argument("--record", type=Path, metavar="DIR", help="write the samples and findings")
    p.add_argument("--json", action="store_true", help="one JSON document at the end, no view")
    p.add_argument(
        "--server-cmd",
        metavar="COMMAND",
        help='the server\'s command line ("vllm serve MODEL --max-num-seqs …"): knob values '
        "for the rules",
    )
    p.add_argument("--config", dest="server_cmd", help=argparse.SUPPRESS)  # its earlier name
    p.add_argument("--gpu", help="GPU type, for the compute-load estimate (e.g. A100-80GB)")
    p.add_argument("--model", help="model (`servetune sim models`), for the compute estimate")
    p.add_argument(
        "--dcgm-url", type=http_url, help="an NVIDIA DCGM exporter's /metrics, for GPU utilisation"
    )


def run(args: argparse.Namespace) -> int:
    import asyncio

    from servetune.diagnose import known_from_options
    from servetune.errors import ConfigError
    from servetune.watch.session import WatchSession, run_for

    if not args.refresh > 0:  # NaN too
        raise ConfigError(
            f"--refresh must be > 0 s (got {args.refresh:g})", hint="e.g. --refresh 1"
        )
    if args.duration is not None and not args.duration > 0:
        raise ConfigError(
            f"--duration must be > 0 s (got {args.duration:g})",
            hint="e.g. --duration 300, or leave it out to watch until Ctrl-C",
        )
    known = known_from_options(args.server_cmd, args.gpu, args.model)
    session = WatchSession(
        args.url,
        interval_s=args.interval,
        window_s=args.window,
        record_dir=args.record,
        known=known,
        dcgm_url=args.dcgm_url,
        hold_s=args.hold_s,
    )
    if args.json:
        asyncio.run(run_for(session, args.refresh, args.duration))
        doc = {
            "url": session.url,
            "metrics_url": session.metrics_url,
            "engine": session.scraper.engine_map.label if session.scraper.engine_map else None,
            "window": session.figures.model_dump(mode="json") if session.figures else None,
            "findings": [f.model_dump(mode="json") for f in session.findings],
            "active": list(session.active),
            "events": [e.model_dump(mode="json") for e in session.events],
            "record": str(args.record) if args.record else None,
        }
        import json

        sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        return 0
    from rich.console import Console
    from rich.live import Live

    from servetune.watch.screen import render

    console = Console()
    with Live(console=console, refresh_per_second=4, screen=False, transient=False) as live:

        def show(s: WatchSession) -> None:
            live.update(render(s))

        try:
            asyncio.run(run_for(session, args.refresh, args.duration, show))
        except KeyboardInterrupt:
            pass
    if args.record:
        console.print(f"recorded: {args.record} (servetune diagnose {args.record})")
    return 0
