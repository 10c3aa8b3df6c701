"""``servetune diagnose``: name the bottleneck of a run or a sweep, or check a config before
launch.

``servetune diagnose RUN_OR_SWEEP_DIR [--json] [-v]``
    ranked findings (evidence, knob changes per engine, in the seed's cost order);
    on a sweep, per level and for the curve as a whole.
``servetune diagnose --server-cmd "vllm serve MODEL --max-num-seqs …" --gpu A100-80GB
[--model M] [--workload-input-len N --workload-output-len N | RUN_DIR]``
    the config doctor: will it start, preemption ahead, max-model-len vs the workload,
    max-num-batched-tokens vs the prompts — from the simulated engine's memory planner.
``servetune diagnose --rules [--json]``
    the rules table itself.
``servetune diagnose RUN_DIR --server-cmd "vllm serve …" --gpu GPU``
    both: the run judged with the knob values it was served with, and the config checked
    against the run's own lengths.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "path",
        nargs="?",
        type=Path,
        metavar="RUN_OR_SWEEP_DIR",
        help="a run directory (run.json) or a sweep directory (sweep.json)",
    )
    p.add_argument("--json", action="store_true", help="the Diagnosis as JSON, for machines")
    p.add_argument(
        "--rules", action="store_true", help="print the rules table (conditions, actions) and exit"
    )
    p.add_argument(
        "-v", "--verbose", action="store_true", help="every condition, action and engine"
    )
    p.add_argument(
        "--server-cmd",
        metavar="COMMAND",
        help='the command line that started the server, e.g. "vllm serve '
        'Qwen/Qwen2.5-7B-Instruct --max-num-seqs 256" (alone: the config doctor; with a '
        "directory: the knob values the run was served with; default: the one `sweep "
        "--server-cmd` recorded)",
    )
    # the flag's earlier name, still read
    p.add_argument("--config", dest="server_cmd", metavar="COMMAND", help=argparse.SUPPRESS)
    p.add_argument(
        "--gpu", help="GPU from `servetune sim gpus` (the config doctor needs it), e.g. A100-80GB"
    )
    p.add_argument(
        "--model",
        help="model from `servetune sim models` or a local config.json, when the command "
        "line's model is not in the catalog (or for a real server's compute estimate)",
    )
    p.add_argument(
        "--workload-input-len", type=int, default=None, help="mean prompt tokens (config doctor)"
    )
    p.add_argument(
        "--workload-output-len", type=int, default=None, help="mean output tokens (config doctor)"
    )


def run(args: argparse.Namespace) -> int:
    from servetune.errors import ConfigError

    if args.rules:
        import json

        from servetune.diagnose.render import render_rules, rules_table

        if args.json:
            sys.stdout.write(json.dumps(rules_table(), indent=2, ensure_ascii=False) + "\n")
        else:
            sys.stdout.write(render_rules())
        return 0
    if args.path is None and not args.server_cmd:
        raise ConfigError(
            "nothing to diagnose",
            hint='give a run or sweep directory, or --server-cmd "vllm serve MODEL …" --gpu GPU',
        )
    if args.server_cmd and args.path is None and not args.gpu:
        raise ConfigError(
            "the config doctor needs the GPU",
            hint="add --gpu (see `servetune sim gpus`), e.g. --gpu A100-80GB",
        )
    lengths = (args.workload_input_len, args.workload_output_len)
    if args.path is not None and any(v is not None for v in lengths):
        raise ConfigError(
            "--workload-input-len/--workload-output-len are for the config doctor alone",
            hint="with a run directory the lengths come from the run itself",
        )
    for flag, v in zip(("--workload-input-len", "--workload-output-len"), lengths, strict=True):
        if v is not None and v < 1:  # a negative length was taken as given (advice on it)
            raise ConfigError(
                f"{flag} must be ≥ 1 token (got {v})",
                hint="e.g. --workload-input-len 1024 --workload-output-len 128",
            )
    from servetune.diagnose import diagnose_config, diagnose_path
    from servetune.diagnose.render import render

    if args.path is None:
        diag = diagnose_config(
            args.server_cmd,
            args.gpu,
            args.model,
            args.workload_input_len,
            args.workload_output_len,
        )
    else:
        diag = diagnose_path(args.path, server_cmd=args.server_cmd, gpu=args.gpu, model=args.model)
    if args.json:
        sys.stdout.write(diag.model_dump_json(indent=2) + "\n")
    else:
        sys.stdout.write(render(diag, verbose=args.verbose))
    return 0
