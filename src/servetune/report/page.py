"""What every page of the report shares: the Jinja environment (``html.template_env``: filters, the
one stylesheet ``style_axes.css.j2``), a plot turned into an inline SVG figure (and a PNG beside
the page), and writing the page. Runs, sweeps, plans, recordings, tune results and
``compare --html`` are all drawn by this one machinery."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from markupsafe import Markup

from servetune import __version__
from servetune.errors import ResultError
from servetune.report.figures import Plot
from servetune.report.html import Figure, template_env
from servetune.report.render import save_png, svg_element


def figure_of(plot: Plot, out_dir: Path | None) -> Figure:
    """``plot`` as an inline SVG figure; with ``out_dir`` also ``out_dir/<name>.png``."""
    png_name = None
    if out_dir is not None:
        save_png(plot.fig, out_dir / f"{plot.name}.png")
        png_name = f"{plot.name}.png"
    slug = "".join(c if c.isalnum() else "-" for c in plot.name)
    # Our own matplotlib output, ids prefixed: safe to inline unescaped.
    return Figure(
        plot.name, plot.title, plot.caption, Markup(svg_element(plot.fig, slug)), png_name
    )


def render_page(template: str, **context: Any) -> str:
    """One page of the report from ``template`` (the version and the time written added)."""
    return (
        template_env()
        .get_template(template)
        .render(
            version=__version__,
            generated=datetime.now(UTC).isoformat(timespec="seconds"),
            **context,
        )
    )


def write_page(target: Path, html: str, flag: str = "--out") -> Path:
    """Write the page; FLAG: the option that chose where (said in the hint)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise ResultError(
            f"cannot write {target}: {exc.strerror or exc}", hint=f"give another place ({flag})"
        ) from exc
    return target
