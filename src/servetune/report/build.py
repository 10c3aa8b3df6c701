"""``servetune report``: read a RUN_DIR or SWEEP_DIR, write report.html, PNGs and a CSV."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from markupsafe import Markup

from servetune.errors import ResultError
from servetune.report.csv_export import write_levels_csv
from servetune.report.data import ReportData, load
from servetune.report.extras import load_extras
from servetune.report.figures import Plot, run_plots, sweep_plots
from servetune.report.findings import diagnose_view
from servetune.report.html import Figure, render_html
from servetune.report.render import save_png, svg_element

HTML_FILE = "report.html"
CSV_FILE = "levels.csv"


@dataclass
class ReportFiles:
    html: Path
    csv: Path
    pngs: list[Path] = field(default_factory=list)
    data: ReportData | None = None


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name)


def build_report(
    path: str | Path, out_dir: str | Path | None = None, *, png: bool = True
) -> ReportFiles:
    """Write the report of ``path`` into ``out_dir`` (default: ``path`` itself)."""
    data = load(path)
    out = Path(out_dir) if out_dir is not None else data.path
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultError(f"cannot write the report to {out}: {exc.strerror or exc}") from exc
    plots: list[Plot] = sweep_plots(data) if data.kind == "sweep" else run_plots(data)
    figures: list[Figure] = []
    pngs: list[Path] = []
    for p in plots:
        png_name = None
        if png:
            pngs.append(save_png(p.fig, out / f"{p.name}.png"))
            png_name = f"{p.name}.png"
        # Our own matplotlib output, ids prefixed: safe to inline unescaped.
        svg = Markup(svg_element(p.fig, _slug(p.name)))
        figures.append(Figure(p.name, p.title, p.caption, svg, png_name))
    rows = data.sweep.measured_rows() if data.sweep else [data.levels[0].row]
    csv_path = write_levels_csv(rows, out / CSV_FILE)
    diagnosis = diagnose_view(data.path)
    if diagnosis is not None and diagnosis.error:
        data.notes.append(diagnosis.error)
    extras = load_extras(data.path)
    data.notes.extend(extras.notes)
    html = render_html(data, figures, diagnosis, CSV_FILE, extras)
    html_path = out / HTML_FILE
    html_path.write_text(html, encoding="utf-8")
    return ReportFiles(html=html_path, csv=csv_path, pngs=pngs, data=data)
