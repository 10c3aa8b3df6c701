"""Command-line flags for knobs, made from the registry: every command that takes engine knobs
(``sim serve|run|plan``, ``bench``/``sweep`` without ``--base-url``, ``engine cmd|start``)
spells them the same way — vLLM's flag, the knob's name with ``-`` for ``_`` — with the
type, choices and default rule the registry gives.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from typing import Any

from servetune.knobs.model import Absent
from servetune.knobs.registry import default_rule, knob, spelling

_SHORT = {"tensor_parallel_size": "-tp", "quantization": "-q", "pipeline_parallel_size": "-pp"}
"""vLLM's short forms, accepted wherever the long flag is."""


def knob_flag_name(name: str) -> str:
    """The CLI flag of a knob: ``max_num_seqs`` → ``--max-num-seqs``."""
    return "--" + knob(name).name.replace("_", "-")


def add_knob_arguments(
    group: argparse._ActionsContainer,
    names: Iterable[str],
    engine: str = "vllm",
    help_extra: Mapping[str, str] | None = None,
) -> None:
    """Add a flag for each knob in NAMES to GROUP (an argparse parser or argument group).
    ENGINE decides the accepted choices and the default shown; every flag defaults to None
    (= the engine's default), so only what the user typed reaches the configuration."""
    extra = dict(help_extra or {})
    for name in names:
        k = knob(name)
        s = spelling(engine, k.name)
        flags = [knob_flag_name(k.name)]
        if k.name in _SHORT:
            flags.append(_SHORT[k.name])
        dflt = default_rule(engine, k.name)
        text = k.summary
        if isinstance(s, Absent):
            text += f" ({engine} has none: {s.reason})"
        else:
            text += f" (default: {dflt})"
        if k.name in extra:
            text += f"; {extra[k.name]}"
        kw: dict[str, Any] = {"dest": k.name, "default": None, "help": text}
        if k.type == "bool":
            kw["action"] = argparse.BooleanOptionalAction
        elif k.type == "int_list":
            kw.update(nargs="+", type=int, metavar="N")
        elif k.type == "int":
            kw.update(type=int, metavar="N")
        elif k.type == "float":
            kw.update(type=float, metavar="X")
        else:
            choices = s.choices if not isinstance(s, Absent) and s.choices else k.choices
            if choices:
                kw["choices"] = list(choices)
        group.add_argument(*flags, **kw)


def knob_values(args: argparse.Namespace, names: Iterable[str]) -> dict[str, Any]:
    """The knobs in NAMES that the parsed ARGS set (None = left to the engine)."""
    out: dict[str, Any] = {}
    for name in names:
        value = getattr(args, knob(name).name, None)
        if value is not None:
            out[knob(name).name] = value
    return out
