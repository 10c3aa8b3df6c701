"""How the CLI names a field: the flag that set it.

A library error names what it was given by field (``{max_num_seqs} must be ≥ 1``,
:meth:`servetune.errors.ServetuneError.over_fields`; a model's refusal, :mod:`servetune.checks`);
the CLI shows each field as the flag the user gave for it. This is the one mapping, read from
the command's own parser: the options that store into the field (its own flag, and another
engine's spelling of it stored as ``<engine>__<field>``), the one on the command line first.
A field whose name is not the flag's (a nested model's, a library function's parameter) is
mapped to the flag's destination by :data:`FIELD_DESTS`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

Namer = Callable[[str], str]

FIELD_DESTS: dict[str, str] = {
    # MultiturnConfig (BenchConfig.multiturn): the --multiturn-* flags
    "turns_min": "multiturn_turns",
    "turns_max": "multiturn_turns",
    "system_prompt_len": "multiturn_system_len",
    "system_prompts": "multiturn_system_prompts",
    "think_time_s": "multiturn_think_time",
    "think_dist": "multiturn_think_dist",
    "max_context": "multiturn_max_context",
    "on_overflow": "multiturn_on_overflow",
    "rate_unit": "request_rate_unit",
    # TraceConfig (BenchConfig.trace): the --trace-* flags
    "time_scale": "trace_time_scale",
    "window_start_s": "trace_window",
    "window_end_s": "trace_window",
    # the config doctor's workload (diagnose_config's input_len, output_len)
    "input_len": "workload_input_len",
    "output_len": "workload_output_len",
}
"""Fields named otherwise than the parser destination of the flag that sets them; used only
where the command's parser has no destination of the field's own name."""


def flag_of(field: str) -> str:
    """The flag that sets a model's FIELD: its name with ``-`` for ``_``, a unit suffix
    dropped (``duration_s`` → ``--duration``)."""
    return "--" + field.removesuffix("_s").replace("_", "-")


def _given(option: str, argv: Sequence[str]) -> bool:
    return any(a == option or a.startswith(option + "=") for a in argv)


def flag_namer(parser: argparse.ArgumentParser, argv: Sequence[str]) -> Namer:
    """Each field named by the flag of PARSER that set it on ARGV; a field no flag of PARSER
    stores keeps its own name (the parser never invents a flag)."""
    by_field: dict[str, list[str]] = {}
    for action in parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if not longs:
            continue
        field = action.dest.rpartition("__")[2]
        own = action.dest == field
        # the field's own flag first, then other spellings, each in the parser's order
        by_field.setdefault(field, [])
        by_field[field] = [*longs, *by_field[field]] if own else [*by_field[field], *longs]
    options = {o for a in parser._actions for o in a.option_strings}

    def name(field: str) -> str:
        if field not in by_field and FIELD_DESTS.get(field) in by_field:
            field = FIELD_DESTS[field]
        flags = by_field.get(field, [])
        for option in flags:
            if _given(option, argv):
                return option
        if flag_of(field) in options:
            return flag_of(field)
        return flags[0] if flags else field

    return name
