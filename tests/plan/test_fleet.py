"""`servetune plan --router POLICY`: fleets behind a router, simulated whole, on multi-turn
traffic — the cache hits routing buys are counted in the replicas a plan asks for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servetune.cli import main
from servetune.plan.fleet import confirm_replicas, find_replicas
from servetune.plan.simulate import Point
from servetune.results.plan_file import read_plan_result
from servetune.results.schema import Slo

# sessions of 6 turns sharing 8 system prompts of 1,024 tokens on L4 replicas with a small KV
# pool (35k tokens): spread round-robin every replica must hold every live conversation and
# evicts them during the think time; behind `score` each holds its share, and later turns
# prefill only their new message
KNOBS = "gpu_memory_utilization=0.8,max_model_len=8192"
SESSIONS = ["--gpus", "L4", "--tp", "1", "--quantizations", "auto", "--knob-set", KNOBS,
            "--input-len", "300", "--output-len", "48", "--multiturn-turns", "6",
            "--multiturn-system-len", "1024", "--multiturn-system-prompts", "8",
            "--multiturn-think-time", "2", "--peak-rate", "6", "--slo", "ttft:800",
            "tpot:90"]  # fmt: skip


def _plan(tmp_path: Path, *extra: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    out = tmp_path / "plan.json"
    code = main(["plan", "--json", "-o", str(out), "--requests-per-point", "200", *extra])
    return code, json.loads(out.read_text()) if out.exists() else {}


def test_score_routing_needs_fewer_replicas_than_round_robin_on_sessions(
    tmp_path: Path,
) -> None:
    code, doc = _plan(tmp_path, *SESSIONS, "--router", "round-robin,score", "--top", "1")
    assert code == 0
    assert doc["routers"] == ["round-robin", "score"]
    rows = {c["router"]: c for c in doc["candidates"]}
    rr, score = rows["round-robin"], rows["score"]
    assert rr["status"] == score["status"] == "ok"
    assert score["confirm_draws"] == 8  # the winner confirmed; a confirmation only adds
    assert score["replicas"] < rr["replicas"], (score["replicas"], rr["replicas"])
    assert score["usd_per_hour"] < rr["usd_per_hour"]
    # what bought it: the fleet's prefix cache
    assert score["at_slo"]["prefix_cache_hit_rate"] > rr["at_slo"]["prefix_cache_hit_rate"] + 0.2
    assert score["slo_max_rate_per_replica"] == pytest.approx(6 / score["replicas"])
    assert score["headroom"] is None  # only the peak was simulated
    assert doc["winner"]["label"].endswith("· score")
    # one replica fewer missed, and the note says how
    assert any("replicas behind score missed at 6 req/s" in n for n in score["notes"])
    assert read_plan_result(tmp_path / "plan.json").candidates[0].router == "score"

    # the winner holds in an independent `sim run` of its fleet on another draw
    k = doc["winner"]["replicas"]
    check = tmp_path / "check"
    args = ["sim", "run", "--gpu", "L4", "--gpu-memory-utilization", "0.8", "--max-model-len",
            "8192", "--dataset-name", "multiturn", "--random-input-len", "300",
            "--random-output-len", "48", "--multiturn-turns", "6", "--multiturn-system-len",
            "1024", "--multiturn-system-prompts", "8", "--multiturn-think-time", "2",
            "--request-rate", "6", "--request-rate-unit", "requests", "--num-prompts", "100",
            "--seed", "11", "--replicas", str(k), "--router", "score", "--warmup", "20",
            "--result-dir", str(check), "--no-progress"]  # fmt: skip
    assert main(args) == 0
    run = json.loads((check / "run.json").read_text())
    assert run["summary"]["ttft"]["p99"] <= 800 * 1.15
    assert run["summary"]["tpot"]["p99"] <= 90 * 1.15


def test_a_fixed_fleet_too_small_misses_and_says_how(tmp_path: Path) -> None:
    code, doc = _plan(
        tmp_path, *SESSIONS, "--router", "round-robin", "--replicas", "2", "--top", "1"
    )
    assert code == 1
    (row,) = doc["candidates"]
    assert row["status"] == "misses_slo" and row["replicas"] is None
    assert row["reason"].startswith("2 replicas behind round-robin miss the SLO at the peak: ")
    assert "P99" in row["reason"] or "pile up" in row["reason"]


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ([], "multi-turn traffic is planned as fleets behind a router"),
        (["--router", "sticky"], "--router 'sticky' is not a routing policy"),
    ],
)
def test_sessions_without_a_router_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], words: str
) -> None:
    code, _ = _plan(tmp_path, *SESSIONS, *extra)
    assert code == 2
    assert words in capsys.readouterr().err


def test_replicas_without_a_router_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = _plan(tmp_path, "--peak-rate", "4", "--slo", "ttft:500", "--replicas", "3")
    assert code == 2
    assert "--replicas plans fleets of that many replicas behind a router" in (
        capsys.readouterr().err
    )


def _point(ttft_p99: float) -> Point:
    return Point(
        rate=8.0,
        requests=300,
        completed=300,
        failed=0,
        duration_s=40.0,
        request_throughput=8.0,
        input_tok_s=1.0,
        output_tok_s=1.0,
        ttft_p99_ms=ttft_p99,
    )


def test_the_search_doubles_then_bisects_to_the_fewest_that_hold() -> None:
    tried: list[int] = []

    def run(k: int) -> Point:  # holds from 5 replicas on
        tried.append(k)
        return _point(400.0 if k >= 5 else 2000.0)

    got = find_replicas(run, Slo(ttft=500), 64, "score", None)
    assert got.replicas == 5 and got.below_replicas == 4
    assert tried == [1, 2, 4, 8, 6, 5]
    assert got.limiting_metric == "ttft"
    none = find_replicas(lambda k: _point(2000.0), Slo(ttft=500), 6, "score", None)
    assert none.replicas is None and none.below_replicas == 6
    assert none.reason is not None and none.reason.startswith("6 replicas behind score miss")


def test_a_confirmation_only_adds_replicas() -> None:
    def draws(k: int) -> list[Point]:  # one draw of 8 misses below 7 replicas
        return [_point(600.0 if k < 7 and d == 3 else 400.0) for d in range(8)]

    got = confirm_replicas(5, Slo(ttft=500), draws, 64)
    assert got.replicas == 7 and got.missed_replicas == 6 and got.evaluations == 24
    capped = confirm_replicas(5, Slo(ttft=500), draws, 6)
    assert capped.replicas is None and capped.missed_replicas == 6
