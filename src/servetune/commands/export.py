"""``servetune export``: the figures and rules of `servetune watch`, for Grafana and Prometheus.

``servetune export grafana [--engine vllm | --metrics-url URL] [-o FILE]``
    a Grafana (≥ 10) dashboard JSON: requests/s, tokens/s, TTFT/TPOT/ITL/E2E percentiles,
    KV-cache use, running/waiting, preemptions, prefix-cache hit rate.
``servetune export prometheus-rules [--engine vllm | --metrics-url URL] [--window 5m]
[--for 1m] [--server-cmd "vllm serve …"] [--gpu G --model M] [-o FILE]``
    Prometheus alerting rules for the seed's troubleshooting table, generated from diagnose's
    rules (the same conditions and thresholds); the header names the rules left out and why.

The metric names are the engine's: ``--engine`` takes a map of an engine profile (``vllm`` =
V1 ≥ 0.10, ``vllm-0.8-v1``, ``vllm-0.8-v0``, ``sglang``, ``sglang-2024``, ``tgi``,
``llama.cpp`` = recent builds, ``llama.cpp-old``, ``trtllm``; ``llamacpp`` is read too);
``--metrics-url`` reads a running server's /metrics, picks its map
and keeps only the names it exports. Written to stdout unless ``-o``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from servetune.profiles import metric_map_names
from servetune.watch.hold import HOLD_S


def parse_duration(text: str) -> float:
    t = text.strip().lower()
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    for u in ("ms", "s", "m", "h"):
        if t.endswith(u) and t[: -len(u)].replace(".", "", 1).isdigit():
            return float(t[: -len(u)]) * units[u]
    try:
        return float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 30s, 5m)") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=["grafana", "prometheus-rules"], help="what to write")
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--engine",
        default=None,
        help="engine map: " + ", ".join(metric_map_names()) + " (the first, vLLM V1, is the "
        "default)",
    )
    src.add_argument(
        "--metrics-url", help="a running server's /metrics (or base URL): its map and names"
    )
    p.add_argument("-o", "--out", type=Path, help="write here instead of stdout")
    p.add_argument(
        "--window", type=parse_duration, default=300.0, help="rules: window of each figure (5m)"
    )
    p.add_argument(
        "--resolution",
        type=parse_duration,
        default=15.0,
        help="rules: subquery step, ≈ the scrape interval (15s)",
    )
    p.add_argument(
        "--for",
        dest="for_s",
        type=parse_duration,
        default=HOLD_S,
        help="rules: how long a condition must hold before firing, and be absent before it "
        "resolves (1m, as `watch --for`; 0 = at once)",
    )
    p.add_argument(
        "--server-cmd", metavar="COMMAND", help="the engine's command line (knob values)"
    )
    p.add_argument("--config", dest="server_cmd", help=argparse.SUPPRESS)  # its earlier name
    p.add_argument("--gpu", help="GPU type, for the compute-load estimate")
    p.add_argument("--model", help="model, for the compute-load estimate")
    p.add_argument("--input-len", type=float, default=1024.0, help="prompt tokens (compute est.)")
    p.add_argument("--output-len", type=float, default=128.0, help="output tokens (compute est.)")


def _promql(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from servetune.diagnose import known_from_options
    from servetune.errors import ConfigError, TargetError
    from servetune.metrics.engine_maps import ENGINE_MAPS, VLLM_CACHE_CONFIG_INFO, detect
    from servetune.profiles import NEUTRAL, profile
    from servetune.watch.promql import Promql, exposed_names, find_map

    exposed = None
    absent: frozenset[str] = frozenset()
    if args.metrics_url:
        import urllib.error
        import urllib.request

        from servetune.watch.session import resolve_metrics_url

        url = resolve_metrics_url(args.metrics_url)
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                text = resp.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TargetError(
                f"cannot read {url}: {reason}",
                hint="is the server up with its metrics on (llama-server needs --metrics)?",
            ) from None
        exposed = exposed_names(text)
        emap = detect(exposed - {VLLM_CACHE_CONFIG_INFO})
        if emap is None:
            engines = ", ".join(dict.fromkeys(profile(m.engine).display_name for m in ENGINE_MAPS))
            raise ConfigError(f"{url} exposes no metric names of {engines}")
    else:
        emap, absent = find_map(args.engine or NEUTRAL)
    if not args.window > 0 or not args.resolution > 0 or not 0 <= args.for_s < math.inf:
        # NaN too: --for nan silently dropped every rule's `for:` (alerts fired at once)
        raise ConfigError(
            "--window and --resolution must be > 0 and --for ≥ 0 (got "
            f"{args.window:g}, {args.resolution:g} and {args.for_s:g} s)",
            hint="e.g. --window 5m --resolution 15s --for 1m",
        )
    for flag, v in (("--input-len", args.input_len), ("--output-len", args.output_len)):
        if not 1 <= v < math.inf:
            raise ConfigError(f"{flag} must be ≥ 1 token (got {v:g})", hint=f"e.g. {flag} 1024")
    if args.resolution * 2 > args.window:
        raise ConfigError(
            f"--window ({args.window:g} s) must hold at least two --resolution steps "
            f"({args.resolution:g} s)"
        )
    from servetune.diagnose.knobs import KnownConfig

    known = known_from_options(args.server_cmd, args.gpu, args.model) or KnownConfig()
    return Promql(
        emap,
        window_s=args.window,
        step_s=args.resolution,
        known=known,
        exposed=exposed,
        absent=absent,
        input_len=args.input_len,
        output_len=args.output_len,
    )


def run(args: argparse.Namespace) -> int:
    import json

    q = _promql(args)
    if args.what == "grafana":
        from servetune.watch.grafana import dashboard

        text = json.dumps(dashboard(q), indent=2, ensure_ascii=False) + "\n"
    else:
        from servetune.watch.alerts import alert_rules

        rules = alert_rules(q, for_s=args.for_s)
        header = [
            f"servetune export prometheus-rules — {q.emap.label} names; figures over {q.w} "
            f"(subquery step {q.s}); generated from diagnose's rule table",
            "thresholds, conditions and actions: `servetune diagnose --rules`",
        ]
        text = rules.yaml(header)
    if args.out:
        from servetune.errors import ResultError

        try:
            args.out.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ResultError(f"cannot write {args.out}: {exc.strerror or exc}") from None
        print(f"written: {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
