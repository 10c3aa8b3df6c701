"""``servetune report``: read a RUN_DIR or SWEEP_DIR, write report.html, PNGs and a CSV."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from servetune.errors import ResultError
from servetune.report.cache_plots import cache_plot
from servetune.report.csv_export import write_levels_csv
from servetune.report.curve_plots import latency_plot, throughput_plot
from servetune.report.data import ReportData, load
from servetune.report.extras import load_extras
from servetune.report.figures import Plot
from servetune.report.findings import diagnose_view
from servetune.report.html import Figure, render_html
from servetune.report.page import figure_of, write_page
from servetune.report.request_plots import cdf_plot, send_lag_plot, timeline_plot
from servetune.report.server_plot import server_plot

HTML_FILE = "report.html"
CSV_FILE = "levels.csv"


@dataclass
class ReportFiles:
    html: Path
    csv: Path
    pngs: list[Path] = field(default_factory=list)
    data: ReportData | None = None


def sweep_plots(data: ReportData) -> list[Plot]:
    assert data.sweep is not None
    plots = [
        throughput_plot(data.sweep),
        latency_plot(data.sweep),
        cdf_plot(data.levels),
        send_lag_plot(data),
    ]
    plots.append(server_plot(data.levels))
    plots.append(cache_plot(data.levels))
    return [p for p in plots if p is not None]


def run_plots(data: ReportData) -> list[Plot]:
    lv = data.levels[0]
    plots = [
        cdf_plot([lv]),
        timeline_plot(lv),
        server_plot([lv]),
        send_lag_plot(data),
        cache_plot([lv]),
    ]
    return [p for p in plots if p is not None]


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
    figures: list[Figure] = [figure_of(p, out if png else None) for p in plots]
    pngs = [out / f.png for f in figures if f.png]
    rows = data.sweep.measured_rows() if data.sweep else [data.levels[0].row]
    csv_path = write_levels_csv(rows, out / CSV_FILE)
    diagnosis = diagnose_view(data.path)
    if diagnosis is not None and diagnosis.error:
        data.notes.append(diagnosis.error)
    extras = load_extras(data.path)
    data.notes.extend(extras.notes)
    html = render_html(data, figures, diagnosis, CSV_FILE, extras)
    html_path = write_page(out / HTML_FILE, html)
    return ReportFiles(html=html_path, csv=csv_path, pngs=pngs, data=data)
