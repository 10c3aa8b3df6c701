"""The report of a `servetune plan` result (``plan.json``): the winner and its ``vllm serve``
line, the traffic and SLOs planned for, and every candidate, cheapest first, with why the
others cannot serve it."""

from __future__ import annotations

from pathlib import Path

from servetune.report.page import render_page, write_page
from servetune.results.plan_file import PLAN_FILE, read_plan_result

HTML_FILE = "report.html"


def build_plan_report(path: Path, out_dir: Path | None = None) -> Path:
    plan = read_plan_result(path)
    out = out_dir or (path if path.is_dir() else path.parent)
    out.mkdir(parents=True, exist_ok=True)
    html = render_page(
        "plan.html.j2",
        title=f"Plan: {plan.model} for {plan.peak_rate:g} req/s",
        path=str(path / PLAN_FILE if path.is_dir() else path),
        plan=plan,
    )
    target = write_page(out / HTML_FILE, html)
    return target
