"""A matplotlib Figure as a PNG file and as an SVG element to inline in HTML."""

from __future__ import annotations

import io
import re
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

_ID = re.compile(r'\bid="([^"]+)"')
_REF = re.compile(r'(url\(#|xlink:href="#|href="#)([^")]+)')
_SIZE = re.compile(r'<svg([^>]*?)\swidth="[^"]*"\s+height="[^"]*"')


def svg_element(fig: Figure, slug: str) -> str:
    """The figure as one ``<svg>`` element whose ids cannot clash with another figure's."""
    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": slug}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue().decode("utf-8")
    text = text[text.index("<svg") :]
    text = _ID.sub(lambda m: f'id="{slug}-{m.group(1)}"', text)
    text = _REF.sub(lambda m: f"{m.group(1)}{slug}-{m.group(2)}", text)
    # Scale with the page: the viewBox keeps the aspect ratio.
    text = _SIZE.sub(r'<svg\1 class="plot" role="img"', text, count=1)
    return text


def save_png(fig: Figure, path: Path, dpi: int = 110) -> Path:
    fig.savefig(path, format="png", dpi=dpi, metadata={"Software": None})
    return path
