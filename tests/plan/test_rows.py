"""The rows of a plan's table compare like with like: the rows shown are confirmed on
independent draws and ranked on the confirmed figures; rows past them are marked, not ranked
against them; "held on all 8 draws" is said for what it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servetune.cli import main
from servetune.plan.capacity import DRAWS, Confirmation, latency_margin, simulate_draw
from servetune.plan.confirmation import _apply_confirmation
from servetune.plan.pricing import rank_key, set_replicas
from servetune.plan.request import PlanRequest
from servetune.plan.simulate import Point
from servetune.plan.space import candidates
from servetune.plan.workload import synthetic
from servetune.results.plan_file import PlannedCandidate, PlanResult
from servetune.results.schema import Slo
from servetune.sim.memory import plan_memory

# Mistral-7B, 512 ±50% in / 512 ±50% out, bursty arrivals (burstiness 0.5), P99 TTFT ≤ 2 s and
# TPOT ≤ 80 ms, 6 req/s: one L4 with FP8 weights holds 2.01 req/s on the search's one draw (3
# replicas, $2.25/h), which ranked it above two A100s at TP 2 ($2.78/h); 4 of 20 fresh draws
# miss there. Confirmed, it holds 1.86 req/s: 4 replicas, $3.00/h, below the A100s.
MISTRAL = ["--model", "Mistral-7B", "--input-len", "512", "--output-len", "512"]
MISTRAL += ["--range-ratio", "0.5", "--burstiness", "0.5", "--peak-rate", "6"]
MISTRAL += ["--slo", "ttft:2000", "tpot:80", "--gpus", "L4,A100-80GB", "--tp", "1,2"]
MISTRAL += ["--quantizations", "fp8", "--knob-set", "default"]


def test_the_rows_shown_are_confirmed_and_ranked_on_the_confirmed_figures(
    tmp_path: Path,
) -> None:
    out = tmp_path / "plan.json"
    assert main(["plan", "--json", "-o", str(out), "--workers", "1", *MISTRAL]) == 0
    doc = json.loads(out.read_text())
    ok = [c for c in doc["candidates"] if c["status"] == "ok"]
    assert len(ok) == 4
    for c in ok:  # every row shown: confirmed, its figures the confirmed ones
        assert c["confirm_draws"] == DRAWS, c["label"]
        assert len(c["draws"]) == DRAWS
        for d in c["draws"]:
            assert d["rate"] == pytest.approx(c["slo_max_rate_per_replica"])
    l4 = next(c for c in ok if c["label"] == "L4 tp1 fp8 default")
    assert l4["search_slo_max_rate"] == pytest.approx(2.01, abs=0.01)
    assert l4["slo_max_rate_per_replica"] < 1.95 and l4["replicas"] == 4
    a100_tp2 = next(c for c in ok if c["label"] == "A100-80GB tp2 fp8 default")
    labels = [c["label"] for c in ok]
    # on the search's figure the L4 ranked above the A100 pair; confirmed, it is below
    assert labels.index(l4["label"]) > labels.index(a100_tp2["label"])
    assert [c["usd_per_hour"] for c in ok] == sorted(c["usd_per_hour"] for c in ok)
    assert doc["settled_rows"] == 4  # in plan.json, for scripts
    assert PlanResult.model_validate(doc).settled_rows == 4


def test_the_rate_a_runner_up_shows_holds_on_fresh_draws(tmp_path: Path) -> None:
    """At the L4's shown figure, 20 fresh draws of the traffic (other than the search's and the
    confirmation's): at the search's 2.01 req/s, shown before, 4 missed; at the confirmed
    figure 1 (a confirmed figure is not a bound: a few % of fresh draws still miss)."""
    out = tmp_path / "plan.json"
    assert main(["plan", "--json", "-o", str(out), "--workers", "1", *MISTRAL]) == 0
    doc = json.loads(out.read_text())
    l4 = next(c for c in doc["candidates"] if c["label"] == "L4 tp1 fp8 default")
    (cand,) = candidates("mistralai/Mistral-7B-Instruct-v0.3", ["L4"], [1], ["fp8"], ["default"])
    w = synthetic(512, 512, 0.5, 4000, 0, 0.5)
    r = cand.engine.resolve()
    mem = plan_memory(r)
    slo = Slo(ttft=2000, tpot=80)
    rate = l4["slo_max_rate_per_replica"]
    missed = [
        d
        for d in range(1001, 1021)
        if latency_margin(simulate_draw(r, mem, w, rate, 1000, d), slo) > 1.0
    ]
    assert len(missed) <= 2, (rate, missed)


def _point(rate: float, tpot: float) -> Point:
    return Point(
        rate=rate, requests=1000, completed=1000, failed=0, duration_s=1000 / rate,
        request_throughput=rate, input_tok_s=rate * 1024, output_tok_s=rate * 128,
        ttft_p99_ms=500.0, tpot_p99_ms=tpot, e2el_p99_ms=10_000.0, running_mean=10.0,
        inflight_growth_late_share=0.0,
    )  # fmt: skip


@pytest.mark.parametrize("share", [1.0, 0.99, 0.9, 0.75, 0.5, 0.1, None])
def test_a_confirmation_only_raises_a_rows_ranking_key(share: float | None) -> None:
    """What lets the rows below the confirmed ones stay unconfirmed: a confirmation lowers
    the rate or keeps it, so the row's key ($/hour, then headroom, then rate) only rises — a
    row could not climb above a confirmed one by being confirmed."""
    (cand,) = candidates("Qwen/Qwen2.5-7B-Instruct", ["A100-80GB"], [1], ["auto"], ["default"])
    w = synthetic(1024, 128, 0.0, 1000, 0, 1.0)
    slo = Slo(ttft=1000, tpot=100)
    req = PlanRequest(
        model="Qwen/Qwen2.5-7B-Instruct", peak_rate=20, slo=slo, candidates=[cand], workload=w,
        max_replicas=8,
    )  # fmt: skip
    searched = 9.0
    c = PlannedCandidate(
        label=cand.label, gpu="A100-80GB", tensor_parallel_size=1, quantization="auto",
        knob_set="default", status="ok", usd_per_gpu_hour=1.39,
        slo_max_rate_per_replica=searched,
    )  # fmt: skip
    set_replicas(c, req, 3, w)
    before = rank_key(c)
    missed = [_point(searched, 120.0)] * DRAWS
    if share is None:  # refuted at every rate tried
        conf = Confirmation(searched_rate=searched, missed=missed, evaluations=8 * DRAWS)
    else:
        rate = searched * share
        conf = Confirmation(
            searched_rate=searched,
            rate=rate,
            draws=[_point(rate, 80.0)] * DRAWS,
            missed=missed if share < 1 else [],
        )
    _apply_confirmation(req, c, conf)
    assert rank_key(c) >= before
    if share is not None and share < 1:
        assert rank_key(c) > before


def test_rows_past_the_confirmed_ones_are_marked_and_not_ranked_against_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--top 1 --all: one row confirmed (or the few a confirmation moved), the rest listed
    apart — unnumbered, "1 draw" — under a line that says they are not ranked against the
    rows above; the note under the table says what "held on 8 draws" does not mean."""
    out = tmp_path / "plan.json"
    args = ["plan", "-o", str(out), "--workers", "1", "--no-progress", "--top", "1", "--all"]
    args += ["--peak-rate", "10", "--slo", "ttft:1000", "tpot:60", "--requests-per-point", "200"]
    args += ["--gpus", "L40S,A100-80GB", "--tp", "1", "--quantizations", "auto,fp8"]
    args += ["--knob-set", "default"]
    assert main(args) == 0
    text = capsys.readouterr().out
    plan = PlanResult.model_validate_json(out.read_text())
    ok = [c for c in plan.candidates if c.status == "ok"]
    k = plan.settled_rows
    assert 1 <= k < len(ok)
    assert all(c.confirm_draws == DRAWS for c in ok[:k])
    assert not ok[k].confirm_draws  # the first row past them was left unconfirmed
    assert f"not confirmed, not ranked against rows 1–{k}" in text
    unranked = [line for line in text.splitlines() if line.startswith("·")]
    assert len(unranked) == len(ok) - k
    assert any("1 draw" in line for line in unranked)
    assert "is not a guarantee" in text and "fresh draws" in text
    assert main(["report", str(tmp_path)]) == 0
    html = (tmp_path / "report.html").read_text()
    assert "<th>held on</th>" in html and f"not ranked against the {k} row" in html
    assert "not a bound" in html
