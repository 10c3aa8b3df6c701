"""``servetune plan``: the cheapest deployment that holds a traffic at its SLOs, found on the
simulated engine.

``servetune plan --peak-rate 40 --slo ttft:500 tpot:50 [--rate 25] [--input-len 1024
--output-len 128 | --dataset FILE | --from-run RUN] [--model M] [--gpus A100-80GB,H100-SXM]
[--tp 1,2] [--quantizations auto,fp8,awq] [--knob-set default --knob-set max_num_seqs=64]``

For each GPU type × tensor-parallel size × quantization × knob set: whether it starts (vLLM's
memory planner), its SLO-max rate per replica, the replicas the peak needs, $/hour, $/Mtok,
headroom; ranked by $/hour, with the exact ``vllm serve`` line of the winner. Writes
``plan.json`` (``-o``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table

    from servetune.plan.request import PlanRequest
    from servetune.results.plan_file import PlannedCandidate, PlanResult


def _list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in _list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    from servetune.commands._workload_args import parse_rate
    from servetune.commands.cost import add_price_arguments
    from servetune.plan.request import CONFIRM_ROWS
    from servetune.plan.space import (
        DEFAULT_ENGINES,
        DEFAULT_GPUS,
        DEFAULT_KNOB_SETS,
        DEFAULT_MOE_TP,
        DEFAULT_QUANTIZATIONS,
        DEFAULT_TP,
        ENGINES,
    )

    t = p.add_argument_group("traffic and SLOs")
    t.add_argument(
        "--peak-rate", type=parse_rate, help="req/s the deployment must hold at the SLOs"
    )
    t.add_argument(
        "--rate",
        type=parse_rate,
        help="average req/s (costs are computed at it; also the peak when --peak-rate is not "
        "given)",
    )
    t.add_argument(
        "--slo",
        nargs="+",
        action="extend",
        metavar="METRIC:p99<=MS",
        help="P99 latency SLOs in ms, as tune takes them: ttft:p99<=500 tpot:p99<=50 "
        "(or ttft:500 tpot:50 e2el:10000)",
    )
    w = p.add_argument_group("request lengths")
    w.add_argument("--input-len", type=int, default=1024, help="prompt tokens (random lengths)")
    w.add_argument("--output-len", type=int, default=128, help="output tokens (random lengths)")
    w.add_argument("--range-ratio", type=float, default=0.0, help="lengths uniform in L·(1±r)")
    w.add_argument("--dataset", help="ShareGPT .json or .jsonl file to take lengths from")
    w.add_argument("--tokenizer", help="local tokenizer for --dataset (default: approximate)")
    w.add_argument(
        "--from-run",
        metavar="RUN_DIR",
        help="take the lengths (and, unless given, the SLOs, the rate and the model) from a run",
    )
    w.add_argument("--burstiness", type=float, default=1.0, help="1 = Poisson arrivals")
    w.add_argument("--seed", type=int, default=0)
    from servetune.commands._workload_args import turn_range

    m = p.add_argument_group(
        "multi-turn sessions (planned as fleets behind --router: a user message is "
        "--input-len tokens, an answer --output-len; the rates count requests/s)"
    )
    m.add_argument(
        "--multiturn-turns",
        type=turn_range,
        default=None,
        metavar="N|MIN:MAX",
        help="turns per session, fixed or uniform in MIN:MAX (gives the traffic sessions)",
    )
    m.add_argument("--multiturn-system-len", type=int, default=0, help="system prompt tokens")
    m.add_argument(
        "--multiturn-system-prompts", type=int, default=1, help="distinct system prompts shared"
    )
    m.add_argument(
        "--multiturn-think-time", type=float, default=0.0, metavar="S", help="mean think time"
    )
    m.add_argument(
        "--multiturn-think-dist", choices=["exponential", "constant"], default="exponential"
    )
    r = p.add_argument_group("replicas behind a router")
    r.add_argument(
        "--router",
        type=_list,
        default=None,
        metavar="POLICY[,POLICY]",
        help="plan fleets behind these routing policies (least-loaded, round-robin, session, "
        "prefix, score; the gateway's own code): each candidate × policy is a row, its "
        "replicas the fewest whose whole fleet, simulated, holds the peak",
    )
    r.add_argument(
        "--replicas",
        type=int,
        default=None,
        help="with --router: fleets of exactly this many replicas (default: the fewest)",
    )
    s = p.add_argument_group("candidates")
    s.add_argument(
        "--model", help="model (`servetune sim models` or a config.json); default Qwen2.5-7B"
    )
    s.add_argument(
        "--gpus",
        type=_list,
        default=None,
        help=f"GPU types (default: {','.join(DEFAULT_GPUS)}; with --calibration, the "
        "profile's device)",
    )
    s.add_argument(
        "--tp",
        type=_ints,
        default=None,
        help="GPUs per replica, tensor parallel (default: "
        f"{','.join(map(str, DEFAULT_TP))}; {','.join(map(str, DEFAULT_MOE_TP))} for a "
        "mixture-of-experts model, each also as tpN-ep and dpN-ep)",
    )
    s.add_argument(
        "--layouts",
        type=_list,
        default=None,
        help="replica layouts instead of --tp: tpN, tpN-ep (experts spread), dpN-ep "
        "(data-parallel attention), tpT-dpD[-ep]; e.g. tp8,tp8-ep,dp8-ep",
    )
    s.add_argument(
        "--quantizations",
        type=_list,
        default=None,
        help="auto (the checkpoint's own), fp8, awq, gptq, nvfp4 (default: "
        f"{','.join(DEFAULT_QUANTIZATIONS)}; for a MoE model or a quantized checkpoint: "
        "auto, and fp8 of a 16-bit one)",
    )
    s.add_argument(
        "--engines",
        type=_list,
        default=list(DEFAULT_ENGINES),
        help=f"engines to plan: {', '.join(ENGINES)}, each by its own scheduler and memory "
        f"planner (default: {','.join(DEFAULT_ENGINES)})",
    )
    from servetune.commands._engine_args import add_installation_arguments

    add_installation_arguments(s)
    s.add_argument(
        "--knob-set",
        action="append",
        dest="knob_sets",
        metavar="SPEC",
        help="'default' or KNOB=V,KNOB=V (repeatable; default: "
        + "; ".join(DEFAULT_KNOB_SETS)
        + ")",
    )
    from servetune.commands._calibration_args import add_calibration_argument

    add_calibration_argument(
        s,
        "every candidate carries it (one on another GPU or model than the profile's is "
        "noted: its constants transferred); unset --model and --gpus take the deployment's",
    )
    s.add_argument("--max-replicas", type=int, default=64)
    s.add_argument(
        "--requests-per-point",
        type=int,
        default=1000,
        help="requests simulated per operating point (default: %(default)s)",
    )
    s.add_argument("--workers", type=int, help="processes (default: one per core, at most 4)")
    add_price_arguments(p)
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="one JSON document on stdout")
    o.add_argument("-o", "--out", type=Path, help="plan.json path (default: servetune-results/…)")
    o.add_argument(
        "--top",
        type=int,
        default=CONFIRM_ROWS,
        help="rows of the ranked table, each confirmed on independent draws (default "
        "%(default)s; each row confirmed is 8-48 more simulations)",
    )
    o.add_argument(
        "--all",
        action="store_true",
        help="every candidate in the table (those past the --top rows marked: not confirmed)",
    )
    o.add_argument("--no-progress", action="store_true")


def _check_numbers(args: argparse.Namespace) -> None:
    """The workload's flags that were taken as given (--seed -1 was a numpy traceback); the
    request's own (--r, --top, --workers, the rates) are PlanRequest's to check."""
    import math

    from servetune.errors import ConfigError

    if args.seed < 0:
        raise ConfigError(f"--seed must be ≥ 0 (got {args.seed})", hint="e.g. --seed 0")
    if not 0 < args.burstiness < math.inf:  # inf: every gap NaN, a ValueError traceback
        raise ConfigError(
            f"--burstiness must be a finite number > 0 (got {args.burstiness:g})",
            hint="e.g. --burstiness 0.5 (burstier than Poisson), 1 for Poisson arrivals",
        )


def _request(args: argparse.Namespace) -> PlanRequest:
    from servetune.arch.models import find_model
    from servetune.checks import validated
    from servetune.commands._calibration_args import calibration_of
    from servetune.commands._flags import flag_of
    from servetune.errors import ConfigError
    from servetune.metrics.slo_spec import p99_slo, parse_slos
    from servetune.plan import workload as wl
    from servetune.plan.request import PlanRequest
    from servetune.plan.space import (
        DEFAULT_KNOB_SETS,
        DEFAULT_MOE_TP,
        DEFAULT_QUANTIZATIONS,
        DEFAULT_TP,
        candidates,
        parse_layout,
        parse_quantizations,
    )

    _check_numbers(args)
    profile = calibration_of(args)
    cal, cal_ref = profile if profile is not None else (None, None)
    n_specs = max(4 * args.requests_per_point, 4000)
    sessions = None
    model = args.model
    slo = p99_slo(parse_slos(args.slo))
    peak, avg = args.peak_rate, args.rate
    if args.from_run:
        if args.dataset:
            raise ConfigError("--dataset and --from-run both give request lengths: pick one")
        workload, run_cfg = wl.from_run(args.from_run, n_specs, args.seed, args.burstiness)
        if slo.is_empty():
            slo = run_cfg.goodput
        if peak is None and avg is None and run_cfg.request_rate != float("inf"):
            peak = run_cfg.request_rate
    elif args.dataset:
        workload = wl.from_dataset(
            args.dataset, args.tokenizer, None, n_specs, args.seed, args.burstiness
        )
    elif args.multiturn_turns is not None:
        sessions, workload = _sessions(args, n_specs)
    else:
        workload = wl.synthetic(
            args.input_len, args.output_len, args.range_ratio, n_specs, args.seed, args.burstiness
        )
    if args.multiturn_turns is not None and (args.from_run or args.dataset):
        raise ConfigError(
            "--multiturn-turns draws synthetic sessions: --from-run / --dataset give other "
            "request lengths",
            hint="drop one of them",
        )
    if peak is None and avg is None:
        raise ConfigError(
            "a plan needs the traffic to hold", hint="give --peak-rate R and/or --rate R (req/s)"
        )
    if peak is None:
        peak = avg
    if model is None:
        model = cal.deployment.model if cal is not None else "Qwen/Qwen2.5-7B-Instruct"
    arch = find_model(model)
    if not model.endswith(".json") and not ("/" in model and model in arch.aliases):
        model = arch.name  # an alias's Hugging Face id is served as asked (DeepSeek-R1)
    moe = arch.moe is not None
    if args.quantizations is not None:
        quants = parse_quantizations(args.quantizations)
    elif moe or arch.checkpoint_quantization is not None:
        # the checkpoint as published, and FP8 where that is a 16-bit one (vLLM refuses to
        # load a quantized checkpoint as another format)
        quants = ["auto"] if arch.checkpoint_quantization else ["auto", "fp8"]
    else:
        quants = list(DEFAULT_QUANTIZATIONS)
    tps = args.tp if args.tp is not None else list(DEFAULT_MOE_TP if moe else DEFAULT_TP)
    if any(tp < 1 for tp in tps):
        raise ConfigError("--tp sizes must be ≥ 1", hint="e.g. --tp 1,2,4")
    layouts = [parse_layout(x) for x in args.layouts] if args.layouts else None
    from servetune.commands._engine_args import installation_fields
    from servetune.cost.prices import canonical_gpu
    from servetune.plan.space import DEFAULT_GPUS

    given = args.gpus or ([cal.deployment.device.name] if cal is not None else DEFAULT_GPUS)
    gpus = [canonical_gpu(g) for g in given]
    cands = candidates(
        model,
        gpus,
        tps,
        quants,
        args.knob_sets or list(DEFAULT_KNOB_SETS),
        layouts=layouts,
        engines=args.engines,
        calibration=cal,
        installation=installation_fields(args),
    )
    if args.router:
        from servetune.routing.config import POLICIES

        for policy in args.router:
            if policy not in POLICIES:
                raise ConfigError(
                    f"--router {policy!r} is not a routing policy",
                    hint=f"use some of: {', '.join(POLICIES)}",
                )
        routers = list(dict.fromkeys(args.router))
        cands = [c.model_copy(update={"router": p}) for c in cands for p in routers]
    fields: dict[str, Any] = dict(
        model=model,
        peak_rate=peak,
        average_rate=avg if args.peak_rate is not None else None,
        slo=slo,
        candidates=cands,
        workload=workload,
        requests_per_point=args.requests_per_point,
        max_replicas=args.max_replicas,
        r=args.r,
        workers=args.workers,
        confirm_rows=args.top,
        sessions=sessions,
        replicas=args.replicas,
        calibration=cal_ref,
    )
    flags = {"average_rate": "--rate", "confirm_rows": "--top"}
    out: PlanRequest = validated(PlanRequest, fields, name=lambda f: flags.get(f) or flag_of(f))
    return out


def _sessions(args: argparse.Namespace, n: int) -> tuple[Any, Any]:
    """The multi-turn traffic (a ``multiturn`` BenchConfig, rates in requests/s) and the
    Workload of its turns at their nominal lengths (what the costs per token read)."""

    from servetune.checks import validated
    from servetune.plan.workload import Workload
    from servetune.results.conversation import MultiturnConfig
    from servetune.results.schema import BenchConfig
    from servetune.sim.offline_plan import workload_plan

    lo, hi = args.multiturn_turns
    mt = validated(
        MultiturnConfig,
        dict(
            turns_min=lo,
            turns_max=hi,
            system_prompt_len=args.multiturn_system_len,
            system_prompts=args.multiturn_system_prompts,
            think_time_s=args.multiturn_think_time,
            think_dist=args.multiturn_think_dist,
            rate_unit="requests",
        ),
    )
    cfg = validated(
        BenchConfig,
        dict(
            dataset_name="multiturn",
            random_input_len=args.input_len,
            random_output_len=args.output_len,
            random_range_ratio=args.range_ratio,
            multiturn=mt,
            num_prompts=max(2, int(n / mt.mean_turns)),
            request_rate=1.0,
            burstiness=args.burstiness,
            seed=args.seed,
        ),
    )
    plan, _name, _exact = workload_plan(cfg)
    turns = f"{lo}" if lo == hi else f"{lo}–{hi}"
    system = (
        f", {args.multiturn_system_prompts} shared system prompts of "
        f"{args.multiturn_system_len} tokens"
        if args.multiturn_system_len
        else ""
    )
    source = (
        f"sessions of {turns} turns{system}, {args.input_len}-token user messages, "
        f"{args.output_len}-token answers, think time {args.multiturn_think_time:g} s "
        f"({args.multiturn_think_dist})"
    )
    w = Workload(
        specs=plan.requests,
        unit_offsets=[x / 1e9 for x in plan.offsets_ns],
        source=source,
        burstiness=args.burstiness,
        seed=args.seed,
    )
    return cfg, w


def run(args: argparse.Namespace) -> int:
    from datetime import datetime

    from servetune.commands.cost import price_book
    from servetune.plan.search import make_plan
    from servetune.results.plan_file import PLAN_FILE, write_plan_result

    req = _request(args)
    prices = price_book(args)
    quiet = args.no_progress or args.json

    def progress(line: str) -> None:
        if not quiet:
            print(line, file=sys.stderr, flush=True)

    if not quiet:
        print(
            f"planning {len(req.candidates)} candidate deployments of {req.model} for "
            f"{req.peak_rate:g} req/s on the simulated engine …",
            file=sys.stderr,
        )
    result = make_plan(req, prices, progress)
    out = args.out or Path("servetune-results") / f"{datetime.now():%Y%m%d-%H%M%S}-plan" / PLAN_FILE
    written = write_plan_result(out, result)
    if args.json:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    else:
        _print(result, None if args.all else args.top)
        print(f"written: {written}")
    return 0 if result.winner is not None else 1


def _m(v: float | None) -> str:
    if v is None:
        return "—"
    return f"${v:,.3f}" if v < 10 else f"${v:,.2f}"


def _table(rows: list[PlannedCandidate], first: int | None) -> Table:
    """The rows, numbered from ``first`` (the settled ranking), or not numbered (``None``)."""
    from rich.table import Table

    t = Table(box=None, pad_edge=False, header_style="bold")
    for col in (
        "#",
        "deployment",
        "replicas",
        "GPUs",
        "$/hour",
        "SLO-max/replica",
        "held on",
        "headroom",
        "conc@SLO",
        "out $/Mtok",
        "blend $/Mtok",
        "saturated out $/Mtok",
        "cache hits",
        "limit",
    ):
        t.add_column(col, justify="left" if col in ("deployment", "limit") else "right")
    for i, c in enumerate(rows):
        t.add_row(
            "·" if first is None else str(first + i),
            c.label,
            str(c.replicas),
            str(c.gpus_total),
            f"${c.usd_per_hour:,.2f}",
            f"{c.slo_max_rate_per_replica:.3g} req/s",
            f"{c.confirm_draws} draws" if c.confirm_draws else "1 draw",
            "—" if c.headroom is None else f"{c.headroom:+.0%}",
            "—" if c.concurrency_at_slo is None else f"{c.concurrency_at_slo:.0f}",
            _m(c.output_usd_per_mtok),
            _m(c.blended_usd_per_mtok),
            _m(c.saturation_output_usd_per_mtok),
            _hits(c),
            (c.limiting_metric or "").upper(),
            style="bold green" if first == 1 and i == 0 else None,
        )
    return t


def _hits(c: PlannedCandidate) -> str:
    """The prefix-cache hit rate at the SLO point (a fleet's: all its engines')."""
    at = c.at_slo
    if at is None or at.prefix_cache_hit_rate is None:
        return "—"
    return f"{at.prefix_cache_hit_rate:.0%}"


def _footnote(res: PlanResult) -> str:
    """What the SLO-max figure means, without claiming more than was measured."""
    from servetune.plan.capacity import FRESH_DRAWS, FRESH_MISSED, FRESH_SCENARIOS

    return (
        f"[dim]SLO-max/replica: the highest rate at which the P99s held on every draw of "
        f"{res.requests_per_point:,} requests simulated — {res.confirm_draws} independent draws "
        "(other arrivals and request order) where it says so, else the search's one draw. "
        f"Held on {res.confirm_draws} draws is not a guarantee: on fresh draws at the confirmed "
        f"rates {FRESH_MISSED} of {FRESH_DRAWS} ({FRESH_MISSED / FRESH_DRAWS:.0%}) still missed "
        f"a P99 ({FRESH_SCENARIOS} scenarios, docs/plan.md); a longer or burstier traffic than "
        "the one planned has a higher P99[/dim]"
    )


def _print(res: PlanResult, top: int | None) -> None:
    from rich.console import Console

    con = Console(highlight=False, width=None if sys.stdout.isatty() else 170)
    slo = ", ".join(
        f"P99 {k.upper() if k != 'e2el' else 'E2E'} ≤ {v:g} ms"
        for k, v in res.slo.model_dump().items()
        if v is not None
    )
    rate = f"peak {res.peak_rate:g} req/s"
    if res.average_rate != res.peak_rate:
        rate += f", average {res.average_rate:g} req/s (costs at the average)"
    con.print(f"[bold]{res.model}[/bold]: {rate}; {slo}")
    con.print(
        f"requests: {res.workload} (mean {res.mean_input_tokens:.0f} in / "
        f"{res.mean_output_tokens:.0f} out tokens); {res.requests_per_point} simulated per point"
    )
    if res.routers:
        size = f"{res.replicas} replicas" if res.replicas else "the fewest replicas"
        con.print(
            f"fleets behind {', '.join(res.routers)}: {size} whose whole fleet, simulated "
            "behind the router at the peak, holds the SLOs (SLO-max/replica = peak ÷ replicas)"
        )
    if res.calibration is not None:
        con.print(res.calibration.describe())
    ok = [c for c in res.candidates if c.status == "ok"]
    shown = ok if top is None else ok[:top]
    settled = min(res.settled_rows, len(shown))
    con.print(_table(shown[:settled], 1))
    if settled < len(shown):
        why = (
            "their SLO-max/replica is the search's one draw where it says 1 draw — optimistic "
            "by the draw-to-draw spread — and a confirmation only lowers a figure"
        )
        if settled:
            con.print(
                f"\n[bold]not confirmed, not ranked against rows 1–{settled}[/bold] [dim]({why}: "
                f"none of them would rank above row {settled})[/dim]"
            )
        else:
            con.print(f"\n[bold]not confirmed[/bold] [dim]({why})[/dim]")
        con.print(_table(shown[settled:], None))
    if ok:
        con.print(_footnote(res))
    if top is not None and len(ok) > top:
        con.print(f"… {len(ok) - top} more that hold the traffic (--all shows them)")
    others = [c for c in res.candidates if c.status != "ok"]
    if others:
        con.print(f"\n[bold]{len(others)} candidates that cannot serve it:[/bold]")
        limit = len(others) if top is None else min(len(others), top)
        for c in others[:limit]:
            con.print(f"  {c.label}: [yellow]{c.status.replace('_', ' ')}[/yellow] — {c.reason}")
        if limit < len(others):
            con.print(f"  … {len(others) - limit} more (--all, or plan.json)")
    w = res.winner
    if w is None:
        if res.candidates and all(c.status == "cannot_start" for c in res.candidates):
            # not an SLO verdict: nothing was simulated (e.g. --tp that divides no model's heads)
            con.print("\n[red]no candidate can start: every one was refused (reasons above)[/red]")
        else:
            con.print("\n[red]no candidate holds this traffic at these SLOs[/red]")
    else:
        con.print(
            f"\n[bold]winner:[/bold] {w.replicas} × ({w.label}) = {w.gpus_total} GPUs, "
            f"${w.usd_per_hour:,.2f}/hour; {_m(w.output_usd_per_mtok)}/Mtok output, "
            f"{_m(w.input_usd_per_mtok)}/Mtok input (r = {res.r:g})"
        )
        con.print(f"  [bold]{w.vllm_serve}[/bold]", soft_wrap=True)
        if res.confirmed_meets_slo and w.draws:
            from servetune.plan.capacity import spread

            p = res.confirmed
            assert p is not None
            held = (
                f"{w.replicas} replicas behind {w.router} held {res.peak_rate:g} req/s"
                if w.router is not None
                else f"SLO-max {w.slo_max_rate_per_replica:.3g} req/s per replica held"
            )
            hits = (
                f", prefix-cache hit rate {p.prefix_cache_hit_rate:.0%}"
                if p.prefix_cache_hit_rate is not None
                else ""
            )
            con.print(
                f"  {held} on all "
                f"{len(w.draws)} independent draws of {p.requests or 0:,} requests: "
                f"{spread(w.draws, res.slo)}; the worst draw's KV use "
                f"{p.kv_cache_usage_mean or 0:.0%}, {p.running_mean or 0:.0f} running{hits}"
            )
        else:
            con.print("  [yellow]its SLO-max rate was not confirmed on independent draws[/yellow]")
        for n in w.notes:
            con.print(f"  note: {n}")
    for line in res.warnings[:5]:
        con.print(f"[dim]{line}[/dim]")
    if len(res.warnings) > 5:
        con.print(f"[dim]… {len(res.warnings) - 5} more notes in plan.json[/dim]")
    con.print(
        f"[dim]{len(res.candidates)} candidates, {res.simulations} simulations in "
        f"{res.elapsed_s:.1f} s[/dim]"
    )
