"""``servetune quality``: does a candidate endpoint (quantized, another dtype, another build)
still answer like its baseline — beyond the baseline's own run-to-run noise?

``servetune quality --baseline URL --candidate URL [--model M] [--samples FILE.jsonl]
[--texts FILE] [--prompts N] [--json]``

Perplexity of both on the same texts (prompt logprobs: ``echo`` + ``logprobs``, or token by
token where the server ignores ``echo``, as llama.cpp's does), KL divergence and top-1
agreement of the next-token distributions (top-k), greedy outputs side by side, the business
samples; the baseline against itself gives the noise floor. Verdict pass / fail /
inconclusive (exit status 0 / 1 / 1), written to ``quality.json`` (``--out``), which the
report shows and the gateway's canary gate reads.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    e = p.add_argument_group("endpoints")
    e.add_argument("--baseline", required=True, metavar="URL", help="the reference, e.g. fp16")
    e.add_argument("--candidate", required=True, metavar="URL", help="the one to check")
    e.add_argument("--model", help="served model name on both (default: the only one listed)")
    e.add_argument("--baseline-model", help="served model name on the baseline")
    e.add_argument("--candidate-model", help="served model name on the candidate")
    e.add_argument(
        "--api-key",
        default=os.environ.get("OPENAI_API_KEY"),
        help="bearer token (default: $OPENAI_API_KEY)",
    )
    i = p.add_argument_group("inputs")
    i.add_argument("--texts", help='texts for perplexity/KL: .jsonl {"text"} or plain text')
    i.add_argument("--prompts", type=int, default=32, help="texts (and greedy prompts) to use")
    i.add_argument("--samples", help="business samples, .jsonl (prompt, expected, check)")
    i.add_argument("--greedy-tokens", type=int, default=32, help="tokens per greedy output")
    i.add_argument("--top-k", type=int, default=20, help="logprobs per position (vLLM: ≤ 20)")
    i.add_argument(
        "--max-k",
        type=int,
        default=1000,
        help="token by token: logprobs asked again when the actual token is beyond the top-k",
    )
    i.add_argument("--concurrency", type=int, default=4, help="requests in flight per endpoint")
    t = p.add_argument_group("thresholds (beyond the noise floor)")
    t.add_argument("--max-ppl-increase", type=float, default=0.02, help="relative (0.02 = 2%%)")
    t.add_argument("--max-kl", type=float, default=0.01, help="mean KL per token, nats")
    t.add_argument("--min-top1", type=float, default=0.95, help="top-1 agreement")
    t.add_argument(
        "--min-greedy-match",
        type=float,
        help="share of identical greedy outputs (default: not judged)",
    )
    t.add_argument("--max-sample-regressions", type=int, default=0)
    o = p.add_argument_group("output")
    o.add_argument(
        "--out", type=Path, help="directory for quality.json (default: servetune-results/…)"
    )
    o.add_argument("--json", action="store_true", help="one JSON document on stdout")


def run(args: argparse.Namespace) -> int:
    import asyncio
    from datetime import datetime

    from servetune.errors import ConfigError
    from servetune.quality.endpoint import Endpoint
    from servetune.quality.inputs import load_samples, load_texts
    from servetune.quality.run import check
    from servetune.quality.verdict import Thresholds
    from servetune.results.quality_file import QUALITY_FILE, write_quality_report

    for name in ("top_k", "max_k", "concurrency", "greedy_tokens"):
        if getattr(args, name) < 1:
            flag = f"--{name.replace('_', '-')}"
            raise ConfigError(
                f"{flag} must be ≥ 1 (got {getattr(args, name)})",
                hint=f"leave {flag} out for its default (see servetune quality --help)",
            )
    if not 0 <= args.min_top1 <= 1 or (
        args.min_greedy_match is not None and not 0 <= args.min_greedy_match <= 1
    ):
        raise ConfigError(
            "--min-top1 and --min-greedy-match are shares between 0 and 1 "
            f"(got {args.min_top1:g} and {args.min_greedy_match})",
            hint="e.g. --min-top1 0.95 --min-greedy-match 0.9",
        )
    # not "< 0": a NaN threshold is never exceeded, so every candidate would have passed
    if not (args.max_ppl_increase >= 0 and args.max_kl >= 0 and args.max_sample_regressions >= 0):
        raise ConfigError(
            "thresholds must be numbers ≥ 0 (--max-ppl-increase, --max-kl, "
            "--max-sample-regressions)",
            hint="e.g. --max-ppl-increase 0.02 --max-kl 0.01",
        )
    texts, source = load_texts(args.texts, args.prompts)
    samples = load_samples(args.samples) if args.samples else []
    th = Thresholds(
        max_ppl_increase=args.max_ppl_increase,
        max_kl=args.max_kl,
        min_top1=args.min_top1,
        min_greedy_match=args.min_greedy_match,
        max_sample_regressions=args.max_sample_regressions,
    )

    def ep(url: str, model: str | None, name: str) -> Endpoint:
        return Endpoint(
            url,
            model or args.model,
            args.api_key,
            k=args.top_k,
            max_k=max(args.max_k, args.top_k),
            concurrency=args.concurrency,
            name=name,
        )

    say = None if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    report = asyncio.run(
        check(
            ep(args.baseline, args.baseline_model, "baseline"),
            ep(args.candidate, args.candidate_model, "candidate"),
            texts,
            source,
            samples,
            th,
            greedy_tokens=args.greedy_tokens,
            say=say,
        )
    )
    out = args.out or Path("servetune-results") / f"{datetime.now():%Y%m%d-%H%M%S}-quality"
    written = write_quality_report(Path(out) / QUALITY_FILE, report)
    if args.json:
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    else:
        _print(report)
        print(f"written: {written}")
    return 0 if report.verdict == "pass" else 1


def _print(r: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(highlight=False, width=None if sys.stdout.isatty() else 140)
    color = {"pass": "bold green", "fail": "bold red", "inconclusive": "bold yellow"}[r.verdict]
    con.print(f"[{color}]{r.verdict.upper()}[/{color}]: {r.reason}")
    for side, e in (("baseline", r.baseline), ("candidate", r.candidate)):
        how = e.logprobs or f"no logprobs ({e.why_no_logprobs})"
        con.print(f"  {side:<9} {e.url}  model {e.model}  logprobs: {how}")
    con.print(f"  texts: {r.texts}")
    if r.perplexity:
        p = r.perplexity
        con.print(
            f"  perplexity: baseline {p['baseline']:.4g}, baseline again "
            f"{p['baseline_again']:.4g}, candidate {p['candidate']:.4g}"
        )
    t = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("check", "candidate", "noise floor", "excess (95% CI)", "threshold", "status"):
        t.add_column(col, justify="left" if col in ("check", "status") else "right")
    for m in r.metrics:
        unit = m["unit"]

        def f(v: Any, unit: str = unit) -> str:
            if v is None:
                return "—"
            if unit == "share":
                return f"{v:.2%}"
            if unit == "nats":
                return f"{v:.4f}"
            return f"{v:g}"

        ci = m.get("ci95")
        exc = "—" if m.get("excess") is None else f(m["excess"])
        if ci:
            exc += f" ({f(ci[0])} … {f(ci[1])})"
        status = m["status"] if m.get("gated", True) else "reported"
        style = {"pass": "green", "fail": "red", "inconclusive": "yellow"}.get(status, "dim")
        t.add_row(
            m["label"],
            f(m.get("candidate")),
            f(m.get("floor")),
            exc,
            f(m.get("threshold")),
            f"[{style}]{status}[/{style}]" + (f" — {m['why']}" if m.get("why") else ""),
        )
    con.print(t)
    diff = [g for g in r.greedy if not g.exact]
    if r.greedy:
        con.print(
            f"greedy: {len(r.greedy) - len(diff)} of {len(r.greedy)} outputs identical; mean "
            f"shared prefix {sum(g.prefix_share for g in r.greedy) / len(r.greedy):.0%}"
        )
        for g in diff[:3]:
            con.print(f"  prompt    {g.prompt[:90]!r}")
            con.print(f"  baseline  {g.baseline[:90]!r}")
            con.print(f"  candidate {g.candidate[:90]!r}")
    regs = [s for s in r.samples if s.outcome == "regression"]
    for s in regs[:5]:
        con.print(f"[red]regression[/red] {s.name} ({s.check}): {s.candidate_output[:80]!r}")
    for check, why in r.not_run.items():
        con.print(f"[yellow]{check} could not run:[/yellow] {why}")
    for n in r.notes:
        con.print(f"[dim]{n}[/dim]")
