"""The quality gate of a rollout: the verdict of `servetune quality` on the candidate.

The gate reads a verdict — ``quality.json`` as `servetune quality` writes it
(:mod:`servetune.results.quality_file`; ``canary.quality_verdict_file`` may name the file or
its folder), the same document from the standard output of a command
(``canary.quality_command``, e.g. ``servetune quality ... --json``), or any JSON object whose
``verdict`` key (top level, or under ``quality``) is ``pass``, ``fail`` or ``inconclusive``.
``fail`` rolls the candidate back at once; the candidate takes all traffic only after ``pass``.
A missing, unreadable or malformed verdict counts as ``inconclusive`` and says why: a gate
that cannot be read never lets a candidate through.
"""

from __future__ import annotations

import asyncio
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import ValidationError

from servetune.errors import ResultError
from servetune.results.quality_file import QUALITY_FILE, QualityReport, read_quality_report

GateVerdict = Literal["pass", "fail", "inconclusive"]
_COMMAND_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class GateResult:
    verdict: GateVerdict
    source: str
    detail: str
    body: dict[str, Any] | None = None


def _read_verdict(data: bytes, source: str) -> GateResult:
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return GateResult("inconclusive", source, f"not JSON ({exc})")
    if not isinstance(body, dict):
        return GateResult("inconclusive", source, "not a JSON object")
    if body.get("kind") == "quality":  # servetune quality's own document
        try:
            report = QualityReport.model_validate(body)
        except ValidationError as exc:
            return GateResult("inconclusive", source, f"not a valid quality.json ({exc})")
        return GateResult(report.verdict, source, report.reason[:500], body)
    verdict = body.get("verdict")
    if verdict is None and isinstance(body.get("quality"), dict):
        verdict = body["quality"].get("verdict")
    if verdict not in ("pass", "fail", "inconclusive"):
        return GateResult(
            "inconclusive",
            source,
            f'no "verdict": "pass"|"fail"|"inconclusive" (got {verdict!r})',
            body,
        )
    reason = body.get("reason") or body.get("summary") or ""
    return GateResult(verdict, source, str(reason)[:500], body)


def read_file(path: str) -> GateResult:
    p = Path(path)
    if p.is_dir():
        try:
            report = read_quality_report(p)
        except ResultError as exc:
            return GateResult("inconclusive", path, exc.message)
        return GateResult(report.verdict, str(p / QUALITY_FILE), report.reason[:500])
    try:
        data = p.read_bytes()
    except OSError as exc:
        return GateResult("inconclusive", path, f"cannot read the verdict file: {exc.strerror}")
    return _read_verdict(data, path)


def run_command(argv: list[str], timeout_s: float = _COMMAND_TIMEOUT_S) -> GateResult:
    source = " ".join(argv)
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        return GateResult("inconclusive", source, f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return GateResult("inconclusive", source, f"no verdict within {timeout_s:g} s")
    if done.returncode not in (0, 1):
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        return GateResult("inconclusive", source, f"exit status {done.returncode}: {tail[0][:300]}")
    return _read_verdict(done.stdout, source)


class QualityGate:
    """Reads the verdict when asked (a file may be written while the rollout runs); a command
    runs once per rollout and its verdict is kept."""

    def __init__(self, verdict_file: str | None, command: list[str] | None) -> None:
        self.verdict_file = verdict_file
        self.command = command
        self._cached: GateResult | None = None

    @property
    def configured(self) -> bool:
        return bool(self.verdict_file or self.command)

    async def check(self) -> GateResult | None:
        if self.verdict_file:
            return await asyncio.to_thread(read_file, self.verdict_file)
        if self.command:
            if self._cached is None:
                self._cached = await asyncio.to_thread(run_command, self.command)
            return self._cached
        return None
