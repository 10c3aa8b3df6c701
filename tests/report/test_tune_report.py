"""``servetune report TUNE_DIR`` and ``compare --html``: the same report machinery as runs and
sweeps — the tune page carries the best command, its SLO-max with the repeats' spread, the
gain over the default and whether it beats the noise, the one-knob-at-a-time table, the
Pareto plot and every trial; both pages open cleanly in headless Chromium."""

from __future__ import annotations

import io
import json
import re
import shutil
from html import unescape
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
from cdp_browser import load_page, pixels_near

from servetune.cli import main
from servetune.compare.build import build
from servetune.compare.html import render_html
from servetune.report.tune_page import build_tune_report
from servetune.results.tune_file import read_tune_result

TUNE = [
    "tune", "--engine", "sim", "--gpu", "H100-80GB", "--num-prompts", "200", "--probes", "7",
    "--seed", "1", "--slo", "ttft:p99<=300", "--slo", "tpot:p99<=30", "--knob", "quantization",
    "--knob", "max_num_seqs=64,256,1024", "--trials", "8", "--repeats", "2", "--top-k", "2",
]  # fmt: skip
PARETO_RED = (0xD6, 0x27, 0x28)
BEST_GREEN = (0x2C, 0xA0, 0x2C)


@pytest.fixture(scope="module")
def tune_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tune") / "t"
    assert main([*TUNE, "--result-dir", str(out)]) == 0
    return out


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def test_report_command_draws_the_tune_result(
    tune_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = read_tune_result(tune_dir)
    assert main(["report", str(tune_dir), "--out", str(tmp_path)]) == 0
    assert "(a servetune tune result)" in capsys.readouterr().out
    html = (tmp_path / "report.html").read_text()
    assert {p.name for p in tmp_path.glob("*.png")} == {"pareto.png", "trials.png"}
    text = _text(html)
    assert r.best_command and r.best_command in html
    assert r.verdict and r.verdict in text
    # SLO-max with the spread of its repeats, and the default's, both measured here
    assert re.search(r"median [0-9.]+ of 2 measurements, [0-9.]+–[0-9.]+ \(MAD", text)
    assert "over the engine's default, both measured in this study" in text
    assert r.gain_beyond_noise is not None
    assert ("beyond the run-to-run spread" in text) == r.gain_beyond_noise
    # the one-knob-at-a-time table, every trial with its verdict, the plots inline
    assert "One knob at a time around the best" in text
    for o in r.ofat:
        if o.direction != "best":
            assert f"{o.knob} = {o.value} ({o.direction})" in text
    table = html[html.index('<section id="trials">') : html.index("<details>")]
    rows = re.findall(r"<tr[^>]*><td>(\d+)</td>", table)
    assert [int(n) for n in rows] == [t.number for t in r.trials]
    assert len(re.findall(r"<svg[^>]*class=\"plot\"", html)) == 2
    assert "<script" not in html
    # tune itself wrote its report with the same renderer
    own = (tune_dir / "report.html").read_text()
    assert len(re.findall(r"<svg[^>]*class=\"plot\"", own)) == 2 and r.best_command in own
    # the file itself works as well as its folder
    assert main(["report", str(tune_dir / "tune.json"), "--out", str(tmp_path / "f")]) == 0


def test_a_tune_file_from_before_baseline_reads_its_default_as_the_baseline(
    tune_dir: Path, tmp_path: Path
) -> None:
    """tune.json written before --baseline had only ``default`` and ``gain_over_default``:
    its report still states the gain over the default."""
    d = json.loads((tune_dir / "tune.json").read_text())
    for key in ("baseline", "gain_over_baseline"):
        d.pop(key)
    for key in ("baseline", "baseline_text"):
        d["spec"].pop(key)
    old = tmp_path / "old"
    old.mkdir()
    (old / "tune.json").write_text(json.dumps(d))
    r = read_tune_result(old)
    assert r.baseline is not None and r.baseline.number == r.default.number  # type: ignore[union-attr]
    assert r.gain_over_baseline == r.gain_over_default is not None
    text = _text(build_tune_report(old, tmp_path / "r", png=False).read_text())
    assert "over the engine's default, both measured in this study" in text


def test_a_study_that_met_nothing_still_has_a_report(tmp_path: Path) -> None:
    out = tmp_path / "t"
    code = main(
        [
            "tune", "--engine", "sim", "--num-prompts", "100", "--probes", "3", "--seed", "1",
            "--slo", "ttft:p99<=5", "--knob", "max_num_seqs=64,256", "--trials", "2",
            "--result-dir", str(out),
        ]
    )  # fmt: skip
    assert code == 1
    html = build_tune_report(out, tmp_path / "r", png=False).read_text()
    text = _text(html)
    assert "No configuration meets the SLOs" in text
    assert "Best configuration" not in text and "Every trial" in text


def test_an_unreadable_tune_file_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tune.json").write_text(json.dumps({"kind": "tune", "schema_version": 99}))
    assert main(["report", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert "schema version 99" in err and "Traceback" not in err


@pytest.mark.browser
def test_tune_report_opens_in_chromium(chromium: str, tune_dir: Path, tmp_path: Path) -> None:
    html = build_tune_report(tune_dir, tmp_path, png=False)
    page = load_page(chromium, html, 1280)
    assert page.console_errors == [] and page.exceptions == [] and page.log_errors == []
    assert [u for u in page.requests if not u.startswith(("file:", "data:"))] == []
    facts = page.facts
    assert facts["scripts"] == 0
    assert facts["svgs"] == 2
    for w, h in facts["svg_sizes"]:
        assert w > 600 and h > 200, facts["svg_sizes"]
    assert facts["width"] <= 1280
    assert facts["verdict"].startswith("Best: ")
    assert facts["tables"] >= 4  # repeats, one knob at a time, trials, probes
    img = mpimg.imread(io.BytesIO(page.screenshot), format="png")
    img = np.asarray(img[:, :, :3] * 255, dtype=float)
    # the Pareto front: its line and markers when it holds several points; a front of one
    # point (one configuration dominating every other, as here since tune refines around
    # its best) lies under the best's star and only its legend entry shows
    front = {(t.throughput, t.p99_latency_ms) for t in read_tune_result(tune_dir).pareto}
    assert front
    assert pixels_near(img, PARETO_RED) > (200 if len(front) > 1 else 50)
    assert pixels_near(img, BEST_GREEN) > 200  # the best's star, the best-so-far line


@pytest.mark.browser
def test_compare_page_opens_in_chromium(chromium: str, sweep_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "b"
    shutil.copytree(sweep_dir, other)
    report = build([str(sweep_dir), str(other)], None, replicates=1000)
    page_path = tmp_path / "cmp.html"
    page_path.write_text(render_html(report), encoding="utf-8")
    page = load_page(chromium, page_path, 1280)
    assert page.console_errors == [] and page.exceptions == []
    assert [u for u in page.requests if not u.startswith(("file:", "data:"))] == []
    assert page.facts["scripts"] == 0 and page.facts["svgs"] == 1
    assert page.facts["width"] <= 1280
    assert page.facts["verdict"]
