"""``RESULT_DIR/report.html``: the tune section as a self-contained page (inline CSS and SVG)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from jinja2 import Environment, PackageLoader
from markupsafe import Markup
from matplotlib.figure import Figure

from servetune import __version__
from servetune.report.render import svg_element
from servetune.sweep import fmt
from servetune.tune.model import TuneResult

REPORT_FILE = "report.html"


def pareto_plot(result: TuneResult) -> Markup:
    pts = [
        (float(t.throughput), float(t.p99_latency_ms))
        for t in result.trials
        if t.throughput and t.p99_latency_ms is not None
    ]
    if not pts:
        return Markup("")
    fig = Figure(figsize=(7.5, 4.0), dpi=100)
    fig.subplots_adjust(left=0.12, right=0.97, bottom=0.14, top=0.9)
    ax = fig.add_subplot(1, 1, 1)
    ax.scatter([x for x, _ in pts], [y for _, y in pts], s=18, color="#9aa5b1", label="trials")
    front = [(float(t.throughput or 0.0), float(t.p99_latency_ms or 0.0)) for t in result.pareto]
    if front:
        ax.plot(
            [x for x, _ in front],
            [y for _, y in front],
            "o-",
            color="#d62728",
            label="Pareto front",
        )
    best = result.best
    if best is not None and best.throughput and best.p99_latency_ms is not None:
        ax.scatter(
            [float(best.throughput)],
            [float(best.p99_latency_ms)],
            s=90,
            marker="*",
            color="#2ca02c",
            label="best",
            zorder=5,
        )
    ax.set_xlabel("throughput at the configuration's SLO-max rate (req/s)", fontsize=9)
    ax.set_ylabel("P99 E2E latency there (ms)", fontsize=9)
    ax.set_title("trials: throughput vs P99 latency", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return Markup(svg_element(fig, "pareto"))


def render_html(result: TuneResult) -> str:
    env = Environment(
        loader=PackageLoader("servetune.tune", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = fmt.num
    env.filters["ms"] = fmt.ms
    return env.get_template("tune.html.j2").render(
        r=result,
        plot=pareto_plot(result),
        version=__version__,
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )


def write_html(out_dir: Path, result: TuneResult) -> Path:
    path = out_dir / REPORT_FILE
    path.write_text(render_html(result), encoding="utf-8")
    return path
