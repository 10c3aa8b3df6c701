"""`servetune engine start|stop|cmd ENGINE ...`: run a real engine from engine-neutral knobs.

    servetune engine cmd vllm --model Qwen/Qwen2.5-7B-Instruct --max-num-seqs 64
    servetune engine start llama.cpp --model model.gguf --max-num-seqs 2   # prints its URL
    servetune sweep --base-url http://127.0.0.1:PORT/v1 ...
    servetune engine stop llama.cpp

Knob flags are vLLM's names whatever the engine; a knob the engine lacks is an error naming it.
`start` returns once the engine serves, leaving it running in its own process group (or, with
--foreground, stops it on Ctrl-C); `stop` ends exactly that group.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servetune.engines import LaunchSpec

from servetune.profiles import ENGINE_IDS as ENGINES
from servetune.profiles import profile


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, help_text in (
        ("cmd", "print the command line that start would run"),
        ("start", "start the engine and wait until it serves"),
    ):
        p = sub.add_parser(action, help=help_text, description=help_text)
        p.add_argument("engine", choices=ENGINES, metavar="ENGINE", help=", ".join(ENGINES))
        _add_launch_arguments(p, start=action == "start")
    p = sub.add_parser("stop", help="stop an engine that `start` left running")
    p.add_argument("name", metavar="NAME", help="the engine's --name (default: the engine)")
    p.add_argument("--grace", type=float, default=15.0, help="seconds before SIGKILL")


def _add_launch_arguments(p: argparse.ArgumentParser, start: bool) -> None:
    m = p.add_argument_group("model")
    m.add_argument("--model", help="HF folder or hub name (vLLM, SGLang, TGI), GGUF (llama.cpp)")
    m.add_argument(
        "--tiny",
        action="store_true",
        help=argparse.SUPPRESS,  # the test suite's own model (scripts/provision_engines.sh)
    )
    m.add_argument("--served-model-name", default=None)
    from servetune.knobs import KNOB_NAMES
    from servetune.knobs.cli import add_knob_arguments

    k = p.add_argument_group(
        "knobs (vLLM's names, mapped per engine by the knob registry; a knob the engine "
        "lacks is an error naming it)"
    )
    add_knob_arguments(k, KNOB_NAMES)
    o = p.add_argument_group("engine options")
    o.add_argument("--executable", help="the engine's binary or Python")
    o.add_argument("--cpu-kv-cache-gib", type=float, help="vllm-cpu: KV pool size")
    o.add_argument("--gpu", help="sim: the GPU to simulate, e.g. A100-80GB")
    o.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="pass ARG to the engine as is (repeat; write --engine-arg=--flag for a flag)",
    )
    o.add_argument("--host", default="127.0.0.1")
    o.add_argument("--port", type=int, default=None, help="default: a free port (cmd: 8000)")
    if start:
        s = p.add_argument_group("start")
        s.add_argument("--name", help="name to stop it by (default: the engine)")
        s.add_argument("--log", type=Path, help="engine log file (default: in the state dir)")
        s.add_argument("--ready-timeout", type=float, default=600.0, help="seconds")
        s.add_argument(
            "--foreground",
            action="store_true",
            help="stay attached; Ctrl-C stops the engine",
        )


def _spec(args: argparse.Namespace, port: int) -> LaunchSpec:
    from servetune.engines import EngineKnobs, EngineOptions, build_command, provisioned
    from servetune.errors import ConfigError
    from servetune.knobs import KNOB_NAMES
    from servetune.knobs.cli import knob_values

    model = args.model
    name = args.served_model_name
    if args.tiny:
        tiny = provisioned.tiny_model()
        if tiny is None:
            raise ConfigError(
                "the tiny test model is not provisioned",
                hint="run: bash scripts/provision_engines.sh assets",
            )
        gguf = profile(args.engine).provisioned_model == "gguf"
        model = str(tiny.gguf if gguf else tiny.hf_dir)
        name = name or tiny.served_model_name
    if not model:
        raise ConfigError("no model given", hint="pass --model PATH_OR_NAME")
    knobs = EngineKnobs(**knob_values(args, KNOB_NAMES))
    opts = EngineOptions(
        executable=args.executable,
        cpu_kv_cache_gib=args.cpu_kv_cache_gib,
        gpu=args.gpu,
        extra_args=list(args.engine_arg),
    )
    return build_command(
        args.engine, model, knobs, opts, port=port, host=args.host, served_model_name=name
    )


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from servetune.errors import ConfigError

    port = getattr(args, "port", None)
    if port is not None and not 1 <= port <= 65535:  # was printed / launched as given
        raise ConfigError(f"--port {port} is not a port (1-65535)", hint="e.g. --port 8000")
    try:
        if args.action == "cmd":
            print(_spec(args, args.port or 8000).script())
            return 0
        if args.action == "start":
            return _start(args)
        return _stop(args)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise ConfigError(f"invalid {where}: {first['msg']}") from exc


def _start(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from servetune.engines import free_port, launch, state
    from servetune.errors import EngineError

    name = args.name or args.engine
    previous = state.load(name)
    if previous is not None and state.is_running(previous):
        raise EngineError(
            f"an engine named {name!r} is already running at {previous.base_url}",
            hint=f"stop it first (servetune engine stop {name}) or pass --name",
        )
    spec = _spec(args, args.port or free_port(args.host))
    log = args.log or state.state_path(name).with_suffix(".log")
    print(f"starting {spec.engine}: {spec.shell()}", flush=True)
    print(f"log: {log}", flush=True)
    # Detached unless --foreground: the engine must outlive this command.
    eng = asyncio.run(launch(spec, log, args.ready_timeout, die_with_parent=args.foreground))
    st = state.record(name, eng)
    print(f"ready: {eng.base_url}  (model {spec.served_model_name!r}, process group {eng.pgid})")
    if not args.foreground:
        print(f"stop with: servetune engine stop {name}")
        return 0
    print("Ctrl-C stops it")
    try:
        # Wake on the engine's exit or on Ctrl-C, whichever comes first.
        signal.signal(signal.SIGTERM, _interrupt)
        code = eng.proc.wait()
        print(f"{spec.engine} exited with status {code}; log: {log}")
        state.state_path(st.name).unlink(missing_ok=True)
        return 1
    except KeyboardInterrupt:
        eng.stop()
        state.state_path(st.name).unlink(missing_ok=True)
        print(f"stopped {name}")
        return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _stop(args: argparse.Namespace) -> int:
    from servetune.engines import state

    was_running = state.stop(args.name, grace_s=args.grace)
    print(f"stopped {args.name}" if was_running else f"{args.name} was no longer running")
    return 0
