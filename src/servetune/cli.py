"""The `servetune` command line: parse, call one function, print.

Each subcommand lives in ``servetune.commands.<name>`` with two functions:
``add_arguments(parser)`` (cheap: argparse only) and ``run(args) -> int`` (imports the heavy
parts lazily). Any :class:`~servetune.errors.ServetuneError` becomes a two-line message and
exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn, Protocol

from servetune import __version__
from servetune.errors import ServetuneError

# name -> (module, one-line help). Order is the order of `servetune --help`.
COMMANDS: dict[str, tuple[str, str]] = {
    "bench": ("servetune.commands.bench", "one load test at a fixed request rate or concurrency"),
    "sweep": ("servetune.commands.sweep", "rising load levels -> throughput-latency curve, knee"),
    "diagnose": ("servetune.commands.diagnose", "name the bottleneck of a run, or check a config"),
    "report": ("servetune.commands.report", "HTML report and PNG plots of a run or a sweep"),
    "sim": ("servetune.commands.sim", "the embedded simulated engine (server, offline run)"),
    "engine": ("servetune.commands.engine", "start, stop or print the command of a real engine"),
    "demo": ("servetune.commands.demo", "the seed's whole procedure on the simulated engine"),
    "gateway": ("servetune.commands.gateway", "keys, caps, token quotas, fair queueing, canaries"),
    "rollout": ("servetune.commands.rollout", "move traffic to a candidate; promote or roll back"),
    "cost": ("servetune.commands.cost", "$/Mtok of a run or a sweep, from GPU list prices"),
    "plan": ("servetune.commands.plan", "cheapest deployment that holds a traffic at its SLOs"),
    "quality": (
        "servetune.commands.quality",
        "does a quantized endpoint still answer like its baseline",
    ),
    "watch": ("servetune.commands.watch", "a running server's metrics and the seed's rules, live"),
    "export": (
        "servetune.commands.export",
        "Grafana dashboard / Prometheus alert rules, per engine",
    ),
    "compare": ("servetune.commands.compare", "did a change help? runs or sweeps, with intervals"),
    "tune": ("servetune.commands.tune", "the engine config serving the most traffic in SLOs"),
}


class Command(Protocol):
    """What each ``servetune.commands.<name>`` module provides."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def _load(name: str) -> Command:
    module: Command = importlib.import_module(COMMANDS[name][0])  # type: ignore[assignment]
    return module


_SECRET_WORDS = ("key", "token", "password", "secret")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help that shows each option's default — unless the help already speaks of it, the
    default is nothing (None, False, empty), or the option holds a secret."""

    def _default_shown(self, action: argparse.Action) -> bool:
        default = action.default
        if default is None or default is False or default == [] or default == argparse.SUPPRESS:
            return False
        if not action.option_strings or isinstance(action, argparse._StoreConstAction):
            return False
        if any(w in action.dest.lower() for w in _SECRET_WORDS):
            return False
        return "default" not in (action.help or "").lower()

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if self._default_shown(action):
            text += " (default: %(default)s)" if text else "default: %(default)s"
        return text

    def _format_action(self, action: argparse.Action) -> str:
        if action.help is None and self._default_shown(action):
            action = copy.copy(action)
            action.help = ""  # the formatter only expands (and so adds defaults to) set help
            action.help = self._get_help_string(action)
        return super()._format_action(action)


class Parser(argparse.ArgumentParser):
    """The parser of ``servetune`` and every subcommand (subparsers inherit the class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """One line that says what was wrong and where to look, instead of the whole usage."""
        self.exit(2, f"{self.prog}: error: {message}\n  see: {self.prog} --help\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = Parser(
        prog="servetune",
        description="Load-test, understand and tune LLM inference servers.",
    )
    parser.add_argument("--version", action="version", version=f"servetune {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_mod, help_text) in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=help_text, add_help=False)
            continue
        module = _load(name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(p)
    return parser


def _innermost(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> argparse.ArgumentParser:
    """The parser of the (sub)subcommand ``args`` chose (``servetune sim run``)."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = getattr(args, subs[0].dest, None) if subs else None
        if not isinstance(chosen, str) or chosen not in subs[0].choices:
            return parser
        parser = subs[0].choices[chosen]


def _say_gpu_alias(prog: str, gpu: object) -> None:
    """Every ``--gpu`` names a GPU of the catalog; an alias that picks one of several (``a100``
    is the A100-80GB, not the 40 GB card) is said, never silently resolved."""
    if isinstance(gpu, str):
        from servetune.arch.gpus import gpu_alias_note

        note = gpu_alias_note(gpu)
        if note:
            print(f"{prog}: note: {note}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(only=first if first in COMMANDS else None)
    args, extra = parser.parse_known_args(args_list)
    if extra:  # said by the (sub)command's own parser, so the line names it
        _innermost(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    if not args.command:
        parser.print_help()
        return 0
    _say_gpu_alias(_innermost(parser, args).prog, getattr(args, "gpu", None))
    try:
        code: int = _load(args.command).run(args)
        return code
    except ServetuneError as exc:
        from servetune.commands._flags import flag_namer

        inner = _innermost(parser, args)
        message, hint = exc.shown(flag_namer(inner, args_list))  # fields as the flags set them
        print(f"{inner.prog}: error: {message}", file=sys.stderr)
        if hint:
            print(f"  hint: {hint}", file=sys.stderr)
        return 2
    except MemoryError:
        # A size asked for that no machine holds (--num-prompts 99999999999, a --duration
        # of years at a high rate): numpy refuses the allocation up front.
        print(
            f"{_innermost(parser, args).prog}: error: out of memory: what was asked for does "
            "not fit in this machine's memory",
            file=sys.stderr,
        )
        print(
            "  hint: ask for less: fewer --num-prompts, a shorter --duration or a lower rate, "
            "shorter lengths",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print(f"servetune {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Output piped into `head` and the like: stop quietly, as Unix tools do.
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
