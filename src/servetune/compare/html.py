"""``compare --html``: one self-contained page (inline CSS and SVG, no script, no network),
drawn by the report's machinery (``report.page``: its Jinja environment and stylesheet; the
template is ``report/templates/compare.html.j2``)."""

from __future__ import annotations

from pathlib import Path

from servetune.compare.figures import FIGURES
from servetune.compare.model import CompareReport, SweepComparison
from servetune.compare.render import estimate, interval, shift, signed, value
from servetune.report.figures import TTFT, Plot, new_figure, style_axes
from servetune.report.html import Figure
from servetune.report.page import figure_of, render_page, write_page

_ORDER = [f.key for f in FIGURES]
A_COLOUR, B_COLOUR = TTFT, "#d62728"


def curves_plot(sc: SweepComparison) -> Plot | None:
    """The two sweeps' throughput, P99 TTFT and P99 TPOT against the load, side by side."""
    rows = [r for r in sc.rows if not isinstance(r.load, str)]
    loads = [float(r.load) for r in rows]
    if len(loads) < 2:
        return None
    fig = new_figure(10, 3.4, left=0.07, right=0.98, bottom=0.16, top=0.88, wspace=0.28)
    axes = fig.subplots(1, 3)
    for ax, key, title in (
        (axes[0], "request_throughput", "throughput (req/s)"),
        (axes[1], "p99_ttft_ms", "P99 TTFT (ms)"),
        (axes[2], "p99_tpot_ms", "P99 TPOT (ms)"),
    ):
        for side, color in (("a", A_COLOUR), ("b", B_COLOUR)):
            ys = [getattr(r, side).get(key) for r in rows]
            pts = [(x, float(y)) for x, y in zip(loads, ys, strict=True) if y is not None]
            if pts:
                ax.plot(
                    [x for x, _ in pts],
                    [y for _, y in pts],
                    marker="o",
                    color=color,
                    label=side.upper(),
                )
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("offered load" if sc.mode == "rate" else "concurrency", fontsize=9)
        if key != "request_throughput" and all(
            (v or 0) > 0 for r in rows for v in (r.a.get(key), r.b.get(key))
        ):
            ax.set_yscale("log")
        style_axes(ax)
    axes[0].legend(fontsize=9)
    caption = f"A ({sc.a}) in blue, B ({sc.b}) in red, level by level."
    return Plot("curves", "The two sweeps side by side", caption, fig)


def render_html(report: CompareReport) -> str:
    def plot(sc: SweepComparison) -> Figure | None:
        p = curves_plot(sc)
        return figure_of(p, None) if p is not None else None

    return render_page(
        "compare.html.j2",
        report=report,
        inputs=" · ".join(report.inputs),
        rows=lambda pc: [(k, pc.figures[k]) for k in _ORDER if k in pc.figures],
        val=value,
        sgn=signed,
        ivl=interval,
        est=estimate,
        shf=shift,
        plot=plot,
        sigs=lambda r: ", ".join(k for k, v in r.significant.items() if v) or "–",
    )


def write_html(path: Path, report: CompareReport) -> Path:
    return write_page(path, render_html(report), flag="--html FILE")
