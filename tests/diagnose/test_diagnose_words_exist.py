"""Issue 11 item 8: every command and flag named in advice, in the docs and in the report
exists. ``servetune …`` command lines are checked against the real CLI parser (the command,
its subcommand, each ``--flag``); an engine flag in advice must be one the knob registry knows
(which tests/knobs checks against vLLM's and llama.cpp's own parsers) or a servetune flag."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from servetune.cli import build_parser
from servetune.diagnose import engine_flags, evaluate, latency_tail, limiter, rules, run
from servetune.diagnose.actions import build as action_build
from servetune.diagnose.actions import table as actions
from servetune.diagnose.actions import targets as action_targets
from servetune.diagnose.actions.table import ACTIONS, PROCEDURE
from servetune.diagnose.doctor import check as doctor
from servetune.diagnose.doctor.rules import DOCTOR_RULES
from servetune.diagnose.figures import client as figures
from servetune.diagnose.rules import RULES
from servetune.diagnose.sweep import diagnose as sweep
from servetune.diagnose.sweep import knee as sweep_knee
from servetune.diagnose.sweep import levels as sweep_levels
from servetune.diagnose.sweep import limit as sweep_limit
from servetune.knobs import ENGINES, KNOBS, Absent

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
REPORT = [
    *sorted((REPO / "src/servetune/report/templates").glob("*")),
    *sorted((REPO / "src/servetune/report").glob("*.py")),
]
ADVICE_MODULES = (
    actions,
    action_build,
    action_targets,
    engine_flags,
    doctor,
    evaluate,
    figures,
    latency_tail,
    limiter,
    rules,
    run,
    sweep,
    sweep_knee,
    sweep_levels,
    sweep_limit,
)

_STOP = re.compile(r"[`\"'()\[\]{};|<>]|\s—|\s-\s|, |\. |$")


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


def _flags(p: argparse.ArgumentParser) -> set[str]:
    return {o for a in p._actions for o in a.option_strings}


PARSER = build_parser()
ALL_SERVETUNE_FLAGS: set[str] = set()
for _p in _subparsers(PARSER).values():
    ALL_SERVETUNE_FLAGS |= _flags(_p)
    for _q in _subparsers(_p).values():
        ALL_SERVETUNE_FLAGS |= _flags(_q)


def _engine_flags() -> set[str]:
    out: set[str] = set()
    for k in KNOBS:
        for spellings in k.spellings.values():
            for s in spellings:
                if isinstance(s, Absent):
                    continue
                for f in (s.flag, *s.aliases, *s.also):
                    out.add(f)
                    if f.startswith("--"):
                        out.add("--no-" + f[2:])
    return out


ENGINE_FLAGS = _engine_flags()
PLACEHOLDERS = {"--flag"}
"""Flags that stand for any flag in a hint ("vllm serve MODEL --flag …")."""
PROSE = {
    "is",
    "was",
    "from",
    "that",
    "against",
    "start",
    "starts",
    "result",
    "import",
    "itself",
    "and",
    "the",
    "does",
    "will",
    "has",
    "can",
    "reads",
    "writes",
    "uses",
    "runs",
    "sends",
    "keeps",
    "needs",
    "gives",
    "package",
    "project",
    "repository",
    "command",
    "commands",
    "process",
    "measures",
    "records",
    "prints",
    "checks",
    "knows",
    "takes",
    "sees",
    "never",
    "only",
    "also",
    "then",
    "with",
    "on",
    "in",
    "to",
    "for",
    "of",
    "or",
    "as",
    "stops",
    "created",
}
"""Words after "servetune" in prose ("servetune is …"), not commands."""


def servetune_lines(text: str) -> Iterator[str]:
    """Each ``servetune …`` command line in TEXT, up to where the command ends."""
    for m in re.finditer(r"\bservetune ([a-z][\w .=/…<>:*,+-]*)", text):
        rest = m.group(1)
        end = _STOP.search(rest)
        yield rest[: end.start()] if end else rest


def check_servetune_line(line: str) -> list[str]:
    """What in LINE does not exist in the CLI (empty: all of it exists)."""
    words = line.split()
    if not words or words[0].startswith("-"):
        return []
    subs = _subparsers(PARSER)
    name = words[0]
    if name not in subs:
        if name in PROSE or not name.isidentifier():
            return []  # "servetune is …", "servetune's own …"
        return [f"servetune {name}: no such command"]
    parser = subs[name]
    nested = _subparsers(parser)
    if nested and len(words) > 1 and not words[1].startswith("-") and words[1].isidentifier():
        if words[1] not in nested:
            return [f"servetune {name} {words[1]}: no such subcommand"]
        parser = nested[words[1]]
    known = _flags(parser)
    bad = []
    for w in words:
        if w.startswith("--"):
            flag = w.split("=", 1)[0].rstrip(",.:")
            if flag not in known:
                bad.append(f"servetune {name}: no flag {flag}")
    return bad


def _advice_texts() -> list[tuple[str, str]]:
    texts: list[tuple[str, str]] = [("PROCEDURE", t) for t in PROCEDURE]
    for a in ACTIONS.values():
        for t in (a.title, a.expected, a.risk, a.verify):
            texts.append((f"action {a.id}", t))
    for r in (*RULES, *DOCTOR_RULES):
        for t in (r.verdict, r.seed, r.cannot_tell, *r.evidence):
            texts.append((f"rule {r.id}", t))
        for c in (*r.when, *r.unless):
            texts.append((f"rule {r.id}", c.text))
    for mod in ADVICE_MODULES:
        src = Path(mod.__file__ or "").read_text()
        for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', src):
            texts.append((mod.__name__, lit))
    return texts


def test_the_checker_catches_what_does_not_exist() -> None:
    assert check_servetune_line("frobnicate A B") == ["servetune frobnicate: no such command"]
    assert check_servetune_line("frobnicate") == ["servetune frobnicate: no such command"]
    assert check_servetune_line("compare A B") == []
    assert check_servetune_line("is a toolkit") == []
    assert check_servetune_line("sweep --request-rates auto") == []
    assert check_servetune_line("sweep --rates auto") == ["servetune sweep: no flag --rates"]
    assert check_servetune_line("sim serve --gpu A100-80GB") == []
    assert check_servetune_line("sim start") == ["servetune sim start: no such subcommand"]


def test_every_servetune_command_in_the_advice_exists() -> None:
    bad = [
        f"{where}: {problem}"
        for where, text in _advice_texts()
        for line in servetune_lines(text)
        for problem in check_servetune_line(line)
    ]
    assert not bad, bad


def test_every_flag_in_the_advice_exists() -> None:
    bad = []
    for where, text in _advice_texts():
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text):
            if flag not in ALL_SERVETUNE_FLAGS | ENGINE_FLAGS | PLACEHOLDERS:
                bad.append(f"{where}: {flag}")
    assert not sorted(set(bad)), sorted(set(bad))


PENDING_IN_DOCS: dict[str, str] = {}
"""Commands a doc already names while the helper building them has not landed them: the docs
may say them, advice may not. When one lands, the test below says to drop it from here."""


@pytest.mark.parametrize("path", DOCS + REPORT, ids=lambda p: p.name)
def test_every_servetune_command_in_the_docs_and_report_exists(path: Path) -> None:
    bad = [
        problem
        for line in servetune_lines(path.read_text())
        for problem in check_servetune_line(line)
        if problem.split(":")[0].split()[-1] not in PENDING_IN_DOCS
    ]
    assert not bad, bad


def test_pending_commands_are_still_pending() -> None:
    landed = set(PENDING_IN_DOCS) & set(_subparsers(PARSER))
    assert not landed, f"{landed} landed: remove from PENDING_IN_DOCS"


def test_the_registry_flags_named_in_advice_are_each_engines() -> None:
    # the per-engine equivalents diagnose prints come from the registry, engine by engine
    flags = engine_flags.engine_flags("max_num_seqs", 64, 128)
    assert set(flags) <= set(ENGINES)
    assert flags["llama.cpp"].startswith("-np 128")
