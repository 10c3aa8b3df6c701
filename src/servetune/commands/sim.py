"""``servetune sim``: the embedded simulated engine.

``sim serve``  a real-time OpenAI-compatible server on loopback (tokens leave on the
               simulated clock; /metrics with vLLM's names)
``sim run``    the same engine on a virtual clock over a workload → a run directory that every
               later command reads like a bench result
``sim plan``   the start-up memory plan only (what vLLM would print, or why it refuses)
``sim gpus``   the GPU catalog
``sim models`` the model catalog
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from servetune.commands._result_dir import add_result_dir_argument, result_dir

if TYPE_CHECKING:
    from servetune.arch.architecture import Architecture

OFFLINE_NO_EFFECT: dict[str, str] = {
    "workers": "--workers",
    "http_client": "--http-client",
    "request_timeout_s": "--request-timeout",
    "temperature": "--temperature",
    "ignore_eos": "--ignore-eos",
}
"""Load-generator flags that a virtual-clock run has no use for: its client is modelled (it
sends on schedule and never times out) and its engine generates exactly the planned lengths.
``sim run`` does not list them, and says so when one is given."""


def _engine_group(p: argparse.ArgumentParser) -> None:
    from servetune.commands._engine_args import add_engine_arguments

    add_engine_arguments(
        p.add_argument_group(
            "engine (vLLM's flag names, SGLang's too with --engine sglang; unset = the "
            "engine's default)"
        )
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="sim_command", metavar="SUBCOMMAND")
    serve = sub.add_parser("serve", help="real-time OpenAI-compatible server on loopback")
    _engine_group(serve)
    serve.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default)")
    serve.add_argument("--port", type=int, default=8000, help="port (0 = any free port)")
    serve.add_argument(
        "--writer",
        default="plain",
        choices=["plain", "fanout"],
        help="how a step's tokens are written: plain (the loop thread) or fanout (two threads "
        "with Linux AIO at real-time priority where permitted: lower wall-clock lag, a "
        "process-wide GIL switch interval of 0.5 ms; docs/sim.md)",
    )

    run = sub.add_parser("run", help="simulate a whole workload on a virtual clock")
    from servetune.commands._workload_args import add_workload_arguments

    add_workload_arguments(run)
    for action in run._actions:
        if action.dest in OFFLINE_NO_EFFECT:  # refused by _run when given
            action.help, action.default = argparse.SUPPRESS, None
    _engine_group(run)
    add_result_dir_argument(run, "sim")
    run.add_argument(
        "--overwrite", action="store_true", help="replace a run already in --result-dir"
    )
    run.add_argument("--no-progress", action="store_true")
    run.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="simulated engines behind one router, on one virtual clock (default: %(default)s)",
    )
    run.add_argument(
        "--router",
        default=None,
        choices=["least-loaded", "round-robin", "session", "prefix", "score"],
        help="the routing policy in front of the replicas, the gateway's own code "
        "(default: least-loaded with --replicas > 1; docs/gateway.md)",
    )

    plan = sub.add_parser("plan", help="the start-up memory plan (or why vLLM would refuse)")
    _engine_group(plan)
    plan.add_argument("--json", action="store_true")

    cal = sub.add_parser(
        "calibrate",
        help="fit the simulator to a deployment's own runs; measure it on runs it did not fit",
        description="Fit the simulator's step-time and host constants to the runs and sweeps "
        "of one deployment (docs/sim.md, 'Calibrating on your own runs'), hold part of them "
        "out, and write a profile that --calibration takes.",
    )
    cal.add_argument("runs", nargs="+", metavar="RUN_OR_SWEEP", help="run or sweep directories")
    cal.add_argument(
        "--out",
        type=Path,
        default=Path("calibration.json"),
        help="the profile to write (default: %(default)s)",
    )
    cal.add_argument(
        "--server-cmd",
        default=None,
        help="the command the server ran (default: the one the sweep recorded)",
    )
    cal.add_argument(
        "--gpu", default=None, help="the GPU it ran on (`servetune sim gpus`), or cpu / cpu:N"
    )
    cal.add_argument(
        "--model", default=None, help="the model (catalog name or config.json) if not the command's"
    )
    cal.add_argument("--engine-version", default=None, help="the engine's release, for the record")
    cal.add_argument(
        "--hold-out",
        default="auto",
        metavar="auto|none|LABEL,...",
        help="which runs to hold out to measure the error (default: auto — other knobs, "
        "other length mixes, repeats and an interior level)",
    )
    cal.add_argument(
        "--name", default="calibration", help="the profile's name (default: %(default)s)"
    )
    cal.add_argument("--json", action="store_true", help="print the profile as JSON")
    cal.add_argument("--no-progress", action="store_true")

    gpus = sub.add_parser("gpus", help="list the GPU catalog")
    gpus.add_argument("--json", action="store_true")
    models = sub.add_parser("models", help="list the model catalog")
    models.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    cmd = getattr(args, "sim_command", None)
    if cmd == "gpus":
        return _gpus(args.json)
    if cmd == "models":
        return _models(args.json)
    if cmd == "plan":
        return _plan(args)
    if cmd == "serve":
        return _serve(args)
    if cmd == "run":
        return _run(args)
    if cmd == "calibrate":
        from servetune.commands.sim_calibrate import run_calibrate

        return run_calibrate(args)
    print(
        "usage: servetune sim {serve,run,plan,calibrate,gpus,models} ... (see --help)",
        file=sys.stderr,
    )
    return 2


def _gpus(as_json: bool) -> int:
    import json

    from servetune.arch.gpus import gpus
    from servetune.sim.efficiency import efficiency

    rows = list(gpus())
    if as_json:
        print(
            json.dumps(
                [g.model_dump() | {"efficiency": efficiency(g).model_dump()} for g in rows],
                indent=2,
            )
        )
        return 0
    print(
        f"{'GPU':<16}{'memory':>8}{'usable':>9}{'BF16':>8}{'FP8':>8}{'HBM':>8}  "
        f"{'interconnect':<28}calibrated"
    )
    print(f"{'':<16}{'GB':>8}{'GiB':>9}{'TFLOP/s':>8}{'TFLOP/s':>8}{'GB/s':>8}")
    from servetune.sim.efficiency import efficiency_table

    calibrated = set(efficiency_table()["gpus"])
    for g in rows:
        fp8 = f"{g.fp8_tflops:g}" if g.fp8_tflops else "-"
        mark = "yes" if g.name in calibrated else "no (default constants)"
        print(
            f"{g.name:<16}{g.memory_gb:>8g}{g.usable_gib:>9g}{g.bf16_tflops:>8g}{fp8:>8}"
            f"{g.hbm_gb_s:>8g}  {g.interconnect[:27]:<28}{mark}"
        )
    print("\nsources: servetune sim gpus --json")
    return 0


def _shape(m: Architecture) -> str:
    """One line of what the architecture is: attention, windows, experts, MTP, format."""
    parts = [
        f"MLA {m.mla.latent_dim}/layer"
        if m.mla
        else f"GQA {m.num_attention_heads}/{m.num_key_value_heads}"
    ]
    counts = m.attention_counts
    if counts["sliding"]:
        parts.append(f"{counts['sliding']} sliding-{m.sliding_window} layers")
    if counts["chunked"]:
        parts.append(f"{counts['chunked']} chunked-{m.attention_chunk_size} layers")
    if m.moe is not None:
        moe = f"MoE {m.moe.experts_per_token}/{m.moe.num_experts}"
        if m.moe.shared_intermediate_size:
            moe += " + shared"
        if m.moe.dense_layers:
            moe += f", {len(m.moe.dense_layers)} dense layers"
        parts.append(moe)
    else:
        parts.append("dense")
    if m.mtp_layers:
        parts.append(f"{m.mtp_layers} MTP")
    if m.checkpoint_quantization:
        parts.append(m.checkpoint_quantization)
    return ", ".join(parts)


def _models(as_json: bool) -> int:
    import json

    from servetune.arch.models import models

    rows = list(models())
    if as_json:
        print(json.dumps([m.model_dump() | {"param_count": m.param_count} for m in rows], indent=2))
        return 0
    width = max(len(m.name) for m in rows) + 2
    print(
        f"{'model':<{width}}{'params':>9}{'active':>8}{'layers':>7}{'hidden':>7}"
        f"{'KV/token':>10}{'max len':>9}  architecture"
    )
    for m in rows:
        kv = m.kv_bytes_per_token(2.0) / 1024
        print(
            f"{m.name:<{width}}{m.param_count_of(mtp=False) / 1e9:>8.2f}B"
            f"{m.active_param_count / 1e9:>7.2f}B"
            f"{m.num_hidden_layers:>7}{m.hidden_size:>7}{kv:>8.0f}KiB"
            f"{m.max_position_embeddings:>9}  {_shape(m)}"
        )
    print("\nalso: --model path/to/config.json (a local Hugging Face config)")
    return 0


def _plan(args: argparse.Namespace) -> int:
    from servetune.commands._engine_args import engine_config_from_args
    from servetune.sim.memory import plan_memory

    cfg = engine_config_from_args(args)
    r = cfg.resolve()
    mem = plan_memory(r)
    if args.json:
        print(mem.model_dump_json(indent=2))
        return 0
    print(shlex.join(cfg.launch_command()))
    for k, v in r.defaults_applied.items():
        print(f"  default {k} = {v}")
    print(f"  memory planner: rules {mem.vllm_rules}")
    for line in mem.log_lines():
        print("  " + line)
    return 0


def _serve(args: argparse.Namespace) -> int:
    from servetune.commands._engine_args import engine_config_from_args
    from servetune.sim.server import serve_forever

    cfg = engine_config_from_args(args)
    serve_forever(cfg, host=args.host, port=args.port, announce=True, writer=args.writer)
    return 0


def _run(args: argparse.Namespace) -> int:
    from servetune.commands._engine_args import engine_config_from_args
    from servetune.commands._workload_args import workload_config_from_args
    from servetune.errors import ConfigError
    from servetune.results.io import free_run_dir
    from servetune.sim.memory import plan_memory
    from servetune.sim.offline import run_offline

    given = [flag for dest, flag in OFFLINE_NO_EFFECT.items() if getattr(args, dest) is not None]
    if given:
        raise ConfigError(
            f"{', '.join(given)}: nothing to set in `sim run`, whose client is modelled (it sends "
            "on schedule, never times out) and whose engine generates the planned lengths",
            hint="drop it; to measure a real client against the simulated engine, use "
            "`servetune bench` without --base-url",
        )
    bench_cfg = workload_config_from_args(args, fresh_seed_by_default=False)
    bench_cfg = bench_cfg.model_copy(update={"model": None})
    engine_cfg = engine_config_from_args(args)
    mem = plan_memory(engine_cfg)
    out = result_dir(args, "sim")
    free_run_dir(out, args.overwrite)
    say = print if not args.no_progress else (lambda *a, **k: None)
    say(shlex.join(engine_cfg.launch_command()), file=sys.stderr)
    for line in mem.log_lines()[1:5]:
        say("  " + line, file=sys.stderr)
    routing = None
    if args.router is not None or args.replicas != 1:
        from servetune.routing.config import RoutingConfig
        from servetune.sim.replicas import check_replicas

        check_replicas(bench_cfg, args.replicas)
        routing = RoutingConfig(policy=args.router or "least-loaded")
    result = run_offline(
        bench_cfg,
        engine_cfg,
        out,
        progress=not args.no_progress,
        command=["servetune", *sys.argv[1:]],
        replicas=args.replicas,
        routing=routing,
    )
    s = result.summary
    info = result.target.simulated or {}
    print(
        f"simulated {info.get('virtual_duration_s', 0.0):.1f} s of {engine_cfg.model} on "
        f"{engine_cfg.gpu}: {s.completed} completed, {s.failed} failed"
    )
    print(
        f"  throughput   {s.request_throughput:8.2f} req/s  {s.output_throughput:10.1f} "
        f"output tok/s  {s.total_token_throughput:10.1f} total tok/s"
    )
    for name, st in (("TTFT", s.ttft), ("TPOT", s.tpot), ("ITL", s.itl), ("E2E", s.e2el)):
        if st.count:
            print(f"  {name:<5} ms    mean {st.mean:9.1f}  p50 {st.p50:9.1f}  p99 {st.p99:9.1f}")
    if result.server is not None:
        whole_run = result.server.summary.get("sim") or {}
        print(f"  preemptions  {whole_run.get('preemptions_total', 0)}")
        cache = s.cache
        if cache is not None and cache.hit_rate is not None and cache.cached_tokens:
            implied = result.workload.implied_prefix_hit_rate if result.workload else None
            line = f"  prefix cache {cache.hit_rate:.1%} of prompt tokens"
            if implied is not None:
                line += f" (an unbounded cache: {implied:.1%})"
            evicted = whole_run.get("prefix_cache_evicted_blocks")
            if evicted is not None:
                line += f", {evicted} blocks evicted"
            print(line)
    ss = s.sessions
    if ss is not None:
        first, later = ss.first_turn, ss.later_turns
        line = (
            f"  sessions     {ss.sessions} ({ss.completed} completed, {ss.ended_early} ended early)"
        )
        if first is not None and later is not None and first.ttft_p50 and later.ttft_p50:
            line += f"; P50 TTFT first turns {first.ttft_p50:.1f} ms, later {later.ttft_p50:.1f} ms"
        print(line)
    spec = info.get("speculative")
    if spec:
        from servetune.sim.speculative import expected_tokens

        print(
            f"  speculative  {spec['method']}, {spec['k']} drafts a step, acceptance "
            f"{spec['acceptance']:.2f} a token ({spec['acceptance_source']}): "
            f"{expected_tokens(spec['acceptance'], spec['k']):.2f} tokens a step on average; "
            "TPOT as vLLM reports it (per token), ITL per chunk (one a step)"
        )
    routed = info.get("routing")
    if routed:
        hit = routed.get("prefix_cache_hit_rate")
        print(
            f"  routing      {routed['replicas']} replicas, {routed['policy']}: prefix-cache hit "
            f"rate {'-' if hit is None else f'{hit:.1%}'}; requests per replica "
            + ", ".join(str(p["requests"]) for p in routed["per_replica"])
        )
    if s.request_goodput is not None:
        print(f"  goodput      {s.request_goodput:8.2f} req/s")
    print(f"results in {out}")
    from servetune.commands.bench import exit_code

    if result.failures is not None and result.failures.failed:
        print(f"{result.status}: {result.failures.verdict}")
    elif result.failures is not None:
        from servetune.metrics.summary import empty_window

        why = empty_window(bench_cfg, s, result.failures)  # exit 1: say why
        if why:
            print(f"{result.status}: {why}")
    return exit_code(result.status)
