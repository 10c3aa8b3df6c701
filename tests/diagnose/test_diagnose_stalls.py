"""Issue 11 item 7: long prefills that stall running decodes are named, with the steps, the
stalls and the requests; the seed's action is advised and removes the stall; a run whose P99
TPOT or ITL is ≥ 5× its median is never called healthy without naming the cause."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.diagnose.dx_scenarios import SCENARIOS, run_scenario

from servetune.diagnose import Diagnosis, diagnose_path
from servetune.diagnose.actions.build import apply_action
from servetune.diagnose.evaluate import evaluate
from servetune.diagnose.figures.table import Figures
from servetune.diagnose.latency_tail import TAIL_EXPLAINED_BY
from servetune.metrics.timeline import TAIL_RATIO

ScenarioDir = Callable[[str], Path]


def _rerun(name: str, diag: Diagnosis, rule: str, out: Path, data_dir: Path) -> Diagnosis:
    f = diag.finding(rule)
    assert f is not None and f.actions
    changed = apply_action(SCENARIOS[name].engine_config(), f.actions[0])
    run_scenario(name, out, data_dir, **changed.model_dump(exclude_unset=False))
    return diagnose_path(out)


def test_decode_stalls_are_named_with_the_steps_and_the_requests(
    scenario_dir: ScenarioDir,
) -> None:
    diag = diagnose_path(scenario_dir("decode_stalls"))
    fig = diag.figures
    # the run of the issue: below capacity, a TPOT/ITL tail far past 5× the median
    assert fig["tpot_tail_ratio"] >= 5 and fig["itl_tail_ratio"] >= 5
    assert not diag.healthy
    top = diag.findings[0]
    assert top.rule == "prefill_blocked" and top.kind == "bottleneck"
    assert "stall the running decodes" in top.title
    assert fig["stalls"] >= 10 and fig["stalls_at_prefill_share"] >= 0.9
    steps = next(e for e in top.evidence if e.startswith("the steps that stalled"))
    # which streams waited, how long, and whose prefill ran in that step
    assert "streams waited up to" in steps and "while the engine prefilled request" in steps
    assert "prompt tokens" in steps
    assert any("stalls ≥" in e and "streams stalled" in e for e in top.evidence)
    action = top.actions[0]
    assert action.id == "enable_chunked_prefill" and action.knob == "enable_chunked_prefill"
    assert action.also == {"max_num_batched_tokens": 2048}
    assert action.flags["vllm"].startswith("--enable-chunked-prefill")


def test_chunked_prefill_removes_the_stalls(
    scenario_dir: ScenarioDir, data_dir: Path, tmp_path: Path
) -> None:
    before = diagnose_path(scenario_dir("decode_stalls"))
    after = _rerun("decode_stalls", before, "prefill_blocked", tmp_path / "after", data_dir)
    b, a = before.figures, after.figures
    assert a["stalls"] == 0 < b["stalls"]
    assert a["itl_max_ms"] < b["itl_max_ms"] / 4
    assert a["itl_p99_ms"] < b["itl_p99_ms"] / 2
    assert a["tpot_p99_ms"] < b["tpot_p99_ms"]
    assert after.finding("prefill_blocked") is None
    assert after.finding("prefill_chunks_stall") is None
    _tail_is_named(after)


def test_v1_with_a_huge_step_budget_is_told_to_shrink_it(
    scenario_dir: ScenarioDir, data_dir: Path, tmp_path: Path
) -> None:
    before = diagnose_path(scenario_dir("chunk_stalls"))
    top = before.findings[0]
    assert top.rule == "prefill_chunks_stall", [f.rule for f in before.findings]
    assert before.finding("prefill_blocked") is None  # chunked prefill is on: not that advice
    first = top.actions[0]
    assert first.id == "shrink_prefill_steps" and first.knob == "max_num_batched_tokens"
    assert first.from_value == 16384 and first.to_value is not None and first.to_value <= 4096
    assert "long_prefill_threshold" in [a.id for a in top.actions]
    after = _rerun("chunk_stalls", before, "prefill_chunks_stall", tmp_path / "v1", data_dir)
    assert after.figures["stalls"] == 0 < before.figures["stalls"]
    assert after.finding("prefill_chunks_stall") is None


@pytest.mark.parametrize("name", ["healthy", "under_loaded", "quantized", "short_prompts_wait"])
def test_no_stall_verdict_where_there_is_none(scenario_dir: ScenarioDir, name: str) -> None:
    diag = diagnose_path(scenario_dir(name))
    assert diag.finding("prefill_blocked") is None
    assert diag.finding("prefill_chunks_stall") is None


def _tail_is_named(diag: Diagnosis) -> None:
    fig = diag.figures
    tail = max(fig.get("tpot_tail_ratio", 0.0), fig.get("itl_tail_ratio", 0.0))
    if tail < TAIL_RATIO:
        return
    explained = {f.rule for f in diag.verdicts()} & set(TAIL_EXPLAINED_BY)
    named = diag.finding("latency_tail")
    assert explained or named is not None, diag.headline
    if diag.healthy:
        assert named is not None and named.title in diag.headline


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_latency_tail_is_never_healthy_without_its_cause(
    scenario_dir: ScenarioDir, name: str
) -> None:
    _tail_is_named(diagnose_path(scenario_dir(name)))


def test_a_tail_nothing_explains_is_a_warning() -> None:
    fig = Figures(
        values={
            "tpot_p50_ms": 20.0,
            "tpot_p99_ms": 400.0,
            "tpot_tail_ratio": 20.0,
            "slow_gaps": 12.0,
            "slow_gaps_at_prefill_share": 0.0,
        }
    )
    findings = evaluate(fig)
    top = findings[0]
    assert top.rule == "latency_tail" and top.kind == "warning"
    assert "20.0× its median" in top.title and "does not show" in top.title
    assert all(f.rule != "healthy" for f in findings)


def test_tokens_that_arrive_in_bunches_are_named_not_called_healthy(
    scripted: Callable[..., Any], tmp_path: Path
) -> None:
    """A server that writes two tokens at once (a stream interval of 2): half the chunk gaps
    are 0, so the P50 ITL is 0 and the ITL tail's ratio to it unbounded. The diagnosis names
    the bunching instead of skipping the ratio and calling the run plainly healthy."""
    from servetune.loadgen.bench import bench
    from servetune.results.schema import BenchConfig

    srv = scripted({"ttft_ms": 5, "tpot_ms": 8, "events_per_write": 2})
    cfg = BenchConfig(
        base_url=srv.base_url,
        random_input_len=16,
        random_output_len=16,
        num_prompts=20,
        request_rate=20.0,
        seed=1,
    )
    run = bench(cfg, tmp_path, progress=False, scrape_metrics=False)
    assert run.summary.itl.p50 == 0 and (run.summary.itl.p99 or 0) > 0
    diag = diagnose_path(tmp_path)
    assert diag.figures["itl_zero_share"] >= 0.5
    named = diag.finding("latency_tail")
    assert named is not None and "arrive in bunches" in named.title, diag.headline
    if diag.healthy:
        assert named.title in diag.headline
