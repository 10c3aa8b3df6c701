"""The HTML report in headless Chromium: no console errors, no network, plots drawn."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
from cdp_browser import PageLoad, load_page, pixels_near

from servetune.report.build import build_report

pytestmark = pytest.mark.browser

WIDTH = 1280
TTFT_BLUE = (0x1F, 0x77, 0xB4)
E2E_GREEN = (0x2C, 0xA0, 0x2C)
KNEE_RED = (0xD6, 0x27, 0x28)


def _check_clean(page: PageLoad) -> None:
    assert page.console_errors == []
    assert page.exceptions == []
    assert page.log_errors == []
    foreign = [u for u in page.requests if not u.startswith(("file:", "data:"))]
    assert foreign == [], "the report must not touch the network"
    assert page.facts["scripts"] == 0


def _screenshot(page: PageLoad) -> np.ndarray:
    img = mpimg.imread(io.BytesIO(page.screenshot), format="png")
    return np.asarray(img[:, :, :3] * 255, dtype=float)


def test_sweep_report_renders_in_chromium(chromium: str, sweep_dir: Path, tmp_path: Path) -> None:
    html = build_report(sweep_dir, tmp_path, png=False).html
    page = load_page(chromium, html, WIDTH)
    _check_clean(page)
    facts = page.facts
    assert facts["svgs"] == 5
    for w, h in facts["svg_sizes"]:
        assert w > 600 and h > 200, facts["svg_sizes"]
    assert facts["width"] <= WIDTH  # nothing overflows sideways
    assert facts["verdict"].startswith("The knee is at")
    img = _screenshot(page)
    assert img.shape[1] == WIDTH and img.shape[0] >= 2500
    # Not blank, and the plot colours are on the page: TTFT blue, E2E green, the knee red.
    assert np.mean(np.any(img < 235, axis=2)) > 0.03
    assert pixels_near(img, TTFT_BLUE) > 500
    assert pixels_near(img, E2E_GREEN) > 300
    assert pixels_near(img, KNEE_RED) > 300
    # The top of the page carries the verdict box (its red left border).
    assert pixels_near(img[:300], KNEE_RED) > 100


def test_run_report_renders_in_chromium(chromium: str, sweep_dir: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(sweep_dir / "levels" / "rate-12", run_dir)
    html = build_report(run_dir, png=False).html
    page = load_page(chromium, html, WIDTH)
    _check_clean(page)
    assert page.facts["svgs"] == 4
    assert page.facts["verdict"].startswith("One run at 12 req/s")
    img = _screenshot(page)
    assert pixels_near(img, TTFT_BLUE) > 300 and pixels_near(img, E2E_GREEN) > 300
