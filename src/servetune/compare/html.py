"""``compare --html``: one self-contained page (inline CSS and SVG, no script, no network)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from jinja2 import Environment, PackageLoader
from markupsafe import Markup
from matplotlib.figure import Figure

from servetune import __version__
from servetune.compare.figures import FIGURES
from servetune.compare.model import CompareReport, SweepComparison
from servetune.compare.render import estimate, interval, shift, signed, value
from servetune.report.render import svg_element

_ORDER = [f.key for f in FIGURES]


def _curves(sc: SweepComparison) -> Markup:
    loads = [r.load for r in sc.rows if not isinstance(r.load, str)]
    if len(loads) < 2:
        return Markup("")
    rows = [r for r in sc.rows if not isinstance(r.load, str)]
    fig = Figure(figsize=(10, 3.4), dpi=100)
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.16, top=0.88, wspace=0.28)
    axes = fig.subplots(1, 3)
    for ax, key, title in (
        (axes[0], "request_throughput", "throughput (req/s)"),
        (axes[1], "p99_ttft_ms", "P99 TTFT (ms)"),
        (axes[2], "p99_tpot_ms", "P99 TPOT (ms)"),
    ):
        for side, color in (("a", "#1f77b4"), ("b", "#d62728")):
            ys = [getattr(r, side).get(key) for r in rows]
            pts = [(x, y) for x, y in zip(loads, ys, strict=True) if y is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", color=color, label=side.upper())
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("offered load" if sc.mode == "rate" else "concurrency", fontsize=9)
        if key != "request_throughput" and all(
            (v or 0) > 0 for r in rows for v in (r.a.get(key), r.b.get(key))
        ):
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=9)
    return Markup(svg_element(fig, "curves"))


def render_html(report: CompareReport) -> str:
    env = Environment(
        loader=PackageLoader("servetune.compare", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    tpl = env.get_template("compare.html.j2")
    return tpl.render(
        report=report,
        inputs=" · ".join(report.inputs),
        version=__version__,
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        rows=lambda pc: [(k, pc.figures[k]) for k in _ORDER if k in pc.figures],
        val=value,
        sgn=signed,
        ivl=interval,
        est=estimate,
        shf=shift,
        plot=_curves,
        sigs=lambda r: ", ".join(k for k, v in r.significant.items() if v) or "–",
        isfinite=math.isfinite,
    )
