"""``servetune cost``: what a token costs on the deployment a run or a sweep measured.

``servetune cost RUN_OR_SWEEP_DIR [--price GPU=USD_PER_HOUR …] [--pricing spot] [--json]``
    $/Mtok for input, output and blended tokens at each level, at the knee and at saturation,
    the GPU/KV use there, and how far each point is from the cheapest on the curve; writes
    ``cost.json`` beside the result (the report reads it).
``servetune cost --prices [--pricing P] [--json]``
    the price catalog (list prices with source and date).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servetune.cost.prices import PriceBook
    from servetune.results.cost_file import CostPoint, CostReport


def add_price_arguments(p: argparse.ArgumentParser) -> None:
    """--price / --pricing / --provider / --r (shared with `servetune plan`)."""
    g = p.add_argument_group("prices")
    g.add_argument(
        "--price",
        action="append",
        metavar="GPU=USD_PER_HOUR",
        help="price of one GPU for an hour, overriding the catalog (repeatable), "
        "e.g. --price A100-80GB=1.80",
    )
    g.add_argument(
        "--pricing",
        default="on-demand",
        choices=["on-demand", "spot", "reserved-1y", "reserved-3y"],
        help="which catalog prices to use (default: %(default)s; the cheapest offer listed)",
    )
    g.add_argument("--provider", help="take catalog prices from this provider only (e.g. aws)")
    g.add_argument(
        "--r",
        type=float,
        default=4.0,
        help="an input token costs 1/r of an output token (default: %(default)g, GKE's)",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "path", nargs="?", type=Path, metavar="RUN_OR_SWEEP_DIR", help="a run or sweep directory"
    )
    p.add_argument("--gpu", help="GPU type that served it (a real server's run does not record it)")
    p.add_argument("--gpus", type=int, help="GPUs serving it (default: the recorded TP size, or 1)")
    p.add_argument(
        "--model", help="the model served (for the compute-load estimate of a real server's run)"
    )
    from servetune.commands._calibration_args import add_calibration_argument

    add_calibration_argument(
        p,
        "here: the deployment that served the result — its GPUs when neither the flags nor "
        "the result say, its model for the compute estimate, its measured compute efficiency "
        "as what the engine reaches",
    )
    add_price_arguments(p)
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument(
        "-o", "--out", type=Path, help="where to write cost.json (default: inside the directory)"
    )
    p.add_argument("--no-write", action="store_true", help="do not write cost.json")
    p.add_argument("--prices", action="store_true", help="list the price catalog and exit")


def price_book(args: argparse.Namespace) -> PriceBook:
    from servetune.cost.prices import PriceBook, parse_price_overrides

    return PriceBook(args.pricing, args.provider, parse_price_overrides(args.price))


def run(args: argparse.Namespace) -> int:
    from servetune.errors import ConfigError

    if args.prices:
        return _catalog(args)
    if args.path is None:
        raise ConfigError(
            "nothing to price", hint="give a run or sweep directory (or --prices for the catalog)"
        )
    from servetune.checks import validated
    from servetune.commands._calibration_args import calibration_of
    from servetune.commands._flags import flag_of
    from servetune.cost.analyze import cost_of
    from servetune.results.cost_file import COST_FILE, CostRequest, write_cost_report

    fields = {"path": str(args.path), "gpu": args.gpu, "gpus": args.gpus, "r": args.r}
    req: CostRequest = validated(CostRequest, {**fields, "model": args.model}, name=flag_of)
    profile = calibration_of(args)
    report = cost_of(
        req.path,
        price_book(args),
        gpu=req.gpu,
        gpus=req.gpus,
        r=req.r,
        model=req.model,
        calibration=profile[0] if profile is not None else None,
    )
    if profile is not None:
        report.calibration = profile[1]
    written = None
    if not args.no_write:
        written = write_cost_report(args.out or Path(report.source_path) / COST_FILE, report)
    if args.json:
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    else:
        _print(report)
        if written is not None:
            print(f"written: {written}")
    return 0


def _money(v: float | None) -> str:
    if v is None:
        return "—"
    return f"${v:,.3f}" if v < 10 else f"${v:,.2f}"


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v:.0%}"


def _print(report: CostReport) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)
    p = report.price
    where = (
        "--price override"
        if p.pricing == "override"
        else f"{p.provider} {p.pricing}, {p.product}; {p.source} (read {p.read_on})"
    )
    console.print(
        f"[bold]{report.gpu_count}× {report.gpu}[/bold] at ${p.usd_per_gpu_hour:g}/GPU-hour "
        f"({where}) = [bold]${report.usd_per_hour:,.2f}/hour[/bold]"
    )
    console.print(f"GPUs from {report.gpu_count_source}")
    if report.calibration is not None:
        ceiling = (
            f"; compute load as a share of its measured compute efficiency "
            f"{report.compute_ceiling:.0%}"
            if report.compute_ceiling is not None
            else ""
        )
        console.print(f"calibration {report.calibration.id} ({report.calibration.file}){ceiling}")
    console.print(f"[dim]{report.formula}; r = {report.r:g}[/dim]")
    t = Table(box=None, pad_edge=False, header_style="bold")
    show_gpu = any(x.gpu_utilization_mean is not None for x in report.levels)
    for col, just in (
        ("point", "left"),
        ("req/s", "right"),
        ("in tok/s", "right"),
        ("out tok/s", "right"),
        ("input $/Mtok", "right"),
        ("output $/Mtok", "right"),
        ("blended $/Mtok", "right"),
        ("$/1k req", "right"),
        ("KV use", "right"),
        ("compute", "right"),
        *((("GPU util", "right"),) if show_gpu else ()),
        ("P99 TTFT", "right"),
        ("vs cheapest", "right"),
    ):
        t.add_column(col, justify=just)  # type: ignore[arg-type]

    def add(x: CostPoint, style: str | None = None) -> None:
        t.add_row(
            x.label,
            "—" if x.request_throughput is None else f"{x.request_throughput:.2f}",
            f"{x.input_tok_s:,.0f}",
            f"{x.output_tok_s:,.0f}",
            _money(x.input_usd_per_mtok),
            _money(x.output_usd_per_mtok),
            _money(x.blended_usd_per_mtok),
            _money(x.usd_per_1k_requests),
            _pct(x.kv_cache_usage_mean),
            _pct(x.compute_use),
            *((_pct(x.gpu_utilization_mean),) if show_gpu else ()),
            "—" if x.ttft_p99_ms is None else f"{x.ttft_p99_ms:,.0f} ms",
            "—" if x.vs_cheapest is None else f"{x.vs_cheapest:.2f}×",
            style=style,
        )

    for x in report.levels:
        mark = None
        if report.cheapest is not None and x.label == report.cheapest.label:
            mark = "green"
        add(x, mark)
    if report.knee is not None:
        add(report.knee, "bold")
    console.print(t)
    if report.saturation is not None:
        s = report.saturation
        console.print(
            f"saturation: {s.label} ({s.output_tok_s:,.0f} output tok/s) — "
            f"{_money(s.output_usd_per_mtok)}/Mtok output, {_money(s.blended_usd_per_mtok)} "
            "blended"
        )
    if report.cheapest is not None:
        console.print(
            f"cheapest measured point: {report.cheapest.label} "
            f"({_money(report.cheapest.blended_usd_per_mtok)}/Mtok blended)"
        )
    if report.knee is not None and report.knee_vs_cheapest is not None:
        console.print(
            f"knee: {_money(report.knee.output_usd_per_mtok)}/Mtok output, "
            f"{report.knee_vs_cheapest:.2f}× the cheapest point"
        )
    gp = [x for x in report.levels if x.goodput_output_usd_per_mtok is not None]
    if gp:
        console.print(
            "counting only requests that met the SLOs (goodput): "
            + ", ".join(f"{x.label} {_money(x.goodput_output_usd_per_mtok)}" for x in gp)
            + " per Mtok output"
        )
    for line in report.advice:
        console.print(f"→ {line}")
    for line in report.warnings:
        console.print(f"[yellow]warning:[/yellow] {line}")


def _catalog(args: argparse.Namespace) -> int:
    import json

    from servetune.cost.prices import catalog_rows

    pricing = args.pricing if args.pricing != "on-demand" or "--pricing" in sys.argv else None
    rows = catalog_rows(pricing)
    if args.provider:  # was ignored: the whole catalog listed, an unknown provider unsaid
        price_book(args)  # refuses a provider the catalog does not have
        rows = [o for o in rows if o.provider == args.provider]
    if args.json:
        sys.stdout.write(json.dumps([o.model_dump() for o in rows], indent=2) + "\n")
        return 0
    print(f"{'GPU':<16}{'pricing':<13}{'provider':<12}{'USD/GPU-h':>10}  read on     source")
    for o in rows:
        print(
            f"{o.gpu:<16}{o.pricing:<13}{o.provider:<12}{o.usd_per_gpu_hour:>10.3f}  "
            f"{o.read_on:<11} {o.source}" + (f" (via {o.via})" if o.via else "")
        )
    return 0
