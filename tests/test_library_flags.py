"""Library layers never name a CLI flag: an error raised outside ``commands/`` and ``cli.py``
names the field or parameter it was given (``{max_num_seqs}`` in a message over fields,
:meth:`servetune.errors.ServetuneError.over_fields`), and the CLI shows the flag that set it
(``commands/_flags.py``).

The check reads every error built in a library module (a call of ``…Error(…)``, ``Invalid(…)``
or ``….over_fields(…)``) and fails on a string in it that names one of servetune's own flags
(read from the CLI's parser). A quoted example of an engine's command line (``'vllm serve M
--max-num-seqs 1'``) is the engine's, not ours, and is skipped.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "servetune"
CLI_FACING = ("commands/", "cli.py")

PENDING: dict[str, str] = {}
"""Library modules that still name flags in their errors, each with why it is not done yet."""

_FLAG = re.compile(r"--[a-z][a-z0-9-]*")
_QUOTED = re.compile(r"'[^']*'")


def servetune_flags() -> set[str]:
    from servetune.cli import build_parser

    def walk(p: argparse.ArgumentParser) -> set[str]:
        out: set[str] = set()
        for a in p._actions:
            out |= {s for s in a.option_strings if s.startswith("--")}
            if isinstance(a, argparse._SubParsersAction):
                for sub in a.choices.values():
                    out |= walk(sub)
        return out

    return walk(build_parser()) - {"--help", "--version"}


def _is_error_call(node: ast.Call) -> bool:
    f = node.func
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
    return name.endswith("Error") or name in ("Invalid", "over_fields")


def flags_in_errors(path: Path, flags: set[str]) -> list[str]:
    """``line: flag`` for each of FLAGS named in an error built in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _is_error_call(node)):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                text = _QUOTED.sub("", sub.value)
                found += [f"{sub.lineno}: {f}" for f in _FLAG.findall(text) if f in flags]
    return sorted(set(found))


def test_no_library_error_names_a_cli_flag() -> None:
    flags = servetune_flags()
    bad: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(CLI_FACING) or rel in PENDING:
            continue
        bad += [f"{rel}:{hit}" for hit in flags_in_errors(path, flags)]
    assert not bad, (
        "library errors naming a CLI flag; name the field ({field} with "
        "ServetuneError.over_fields) and let the CLI show its flag:\n" + "\n".join(bad)
    )


def test_pending_modules_still_exist_and_still_need_it() -> None:
    flags = servetune_flags()
    for rel in PENDING:
        assert flags_in_errors(SRC / rel, flags), f"{rel} names no flag now: drop it from PENDING"


def test_the_check_sees_a_flag_and_skips_a_quoted_engine_line(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "raise ConfigError('x', hint=\"pass --num-prompts 5\")\n"
        "raise SimError.over_fields('{max_num_seqs} must be ≥ 1')\n"
        "raise ConfigError(\"e.g. 'vllm serve M --max-num-seqs 1'\")\n"
        "print('--num-prompts is not an error')\n"
    )
    assert flags_in_errors(probe, {"--num-prompts", "--max-num-seqs"}) == ["1: --num-prompts"]
