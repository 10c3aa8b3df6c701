"""The report of a `servetune plan` result (``plan.json``): the winner and its ``vllm serve``
line, the traffic and SLOs planned for, and every candidate, cheapest first, with why the
others cannot serve it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from servetune import __version__
from servetune.errors import ResultError
from servetune.report.html import _env
from servetune.results.plan_file import PLAN_FILE, read_plan_result

HTML_FILE = "report.html"


def build_plan_report(path: Path, out_dir: Path | None = None) -> Path:
    plan = read_plan_result(path)
    out = out_dir or (path if path.is_dir() else path.parent)
    out.mkdir(parents=True, exist_ok=True)
    html = (
        _env()
        .get_template("plan.html.j2")
        .render(
            title=f"Plan: {plan.model} for {plan.peak_rate:g} req/s",
            path=str(path / PLAN_FILE if path.is_dir() else path),
            plan=plan,
            version=__version__,
            generated=datetime.now(UTC).isoformat(timespec="seconds"),
        )
    )
    target = out / HTML_FILE
    try:
        target.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise ResultError(f"cannot write {target}: {exc.strerror or exc}") from exc
    return target
