"""Issue 11 item 8: advice that agrees with itself and with the facts — a curve's verdict from
the levels at and around the knee (never the unbounded probe alone), levels past the knee
never called "not enough load", "near its ceiling" only near it. (A cap from the server's
configuration, never a run's peak: test_diagnose_missing; commands and flags that exist:
test_diagnose_words_exist.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tests.diagnose.dx_scenarios import SCENARIOS

from servetune.diagnose import diagnose_path
from servetune.diagnose.limiter import compute_words
from servetune.diagnose.model import Diagnosis, Finding
from servetune.diagnose.rules import NEAR_CEILING
from servetune.diagnose.sweep.levels import agree_with_the_curve
from servetune.diagnose.sweep.limit import limit_finding
from servetune.results.schema import BenchConfig
from servetune.results.sweep_schema import Knee, LevelRow, SweepConfig, SweepResult

ScenarioDir = Callable[[str], Path]


def _row(label: str, rate: float, role: str = "level", e2e: float = 5000.0) -> LevelRow:
    return LevelRow.model_validate(
        {
            "label": label,
            "role": role,
            "level_dir": f"levels/{label}",
            "mode": "rate",
            "offered_rate": rate,
            "e2el_p99": e2e,
        }
    )


def _diag(*findings: Finding, kv: float) -> Diagnosis:
    return Diagnosis(kind="run", headline="", findings=list(findings), figures={"kv_mean": kv})


KNEE = Knee(
    status="found",
    method="test",
    k=2.0,
    binding_metric="e2el",
    throughput=9.0,
    offered=10.0,
    latency_p99_ms={"e2el": 4000.0},
    confidence="high",
)


def _sweep() -> SweepResult:
    return SweepResult.model_validate(
        {
            "config": SweepConfig(bench=BenchConfig()).model_dump(),
            "rows": [],
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        }
    )


def test_the_limit_comes_from_the_levels_around_the_knee_not_the_probe() -> None:
    """The seen case: the probe level (every request at once) filled the KV pool; the level
    that saturated used 62% of it and was compute-bound. fp8 KV must not be the advice."""
    over = Finding(
        rule="overloaded",
        kind="bottleneck",
        title="Past capacity",
        cause="the engine's step time: compute is near its ceiling",
    )
    full = Finding(rule="kv_pool_full", kind="bottleneck", title="The KV pool is full")
    levels = [
        (_row("rate-8", 8.0), _diag(kv=0.3)),
        (_row("rate-12", 12.0), _diag(over, kv=0.62)),
        (_row("probe-inf", float("inf"), role="probe"), _diag(over, full, kv=0.97)),
    ]
    limit = limit_finding(_sweep(), KNEE, levels)
    assert limit is not None
    assert limit.level == "rate-12"
    assert "compute" in limit.title and "KV pool" not in limit.title
    assert all(a.id != "kv_cache_fp8" for a in limit.actions)
    assert any("KV mean 62% at rate-12" in e for e in limit.evidence)


def test_a_probe_alone_gives_no_capacity_verdict() -> None:
    full = Finding(rule="kv_pool_full", kind="bottleneck", title="The KV pool is full")
    levels = [
        (_row("rate-2", 2.0), _diag(kv=0.1)),
        (_row("probe-inf", float("inf"), role="probe"), _diag(full, kv=0.97)),
    ]
    limit = limit_finding(_sweep(), None, levels)
    assert limit is not None and limit.kind == "cannot_tell"
    assert not limit.actions
    assert "only the unbounded probe" in limit.title


def test_a_level_past_the_knee_is_not_called_not_enough_load() -> None:
    under = Finding(rule="under_loaded", kind="bottleneck", title="Not enough load: …")
    findings, headline = agree_with_the_curve(
        _row("rate-12", 12.0, e2e=9000.0), KNEE, [under], "Not enough load: …"
    )
    assert [f.rule for f in findings] == ["past_knee"]
    assert headline.startswith("Past the knee of the curve")
    assert "9.00 s here against 4.00 s at the knee" in headline
    assert "Not enough load" in findings[0].evidence[1]  # said, as what the level alone showed


def test_a_real_sweep_agrees_with_itself(tmp_path: Path) -> None:
    from test_diagnose_sweep import _sweep as run

    diag = diagnose_path(run(tmp_path / "sweep", [2, 4, 8, 12, 16, 32]))
    for lv in diag.levels:
        if lv.past_knee:
            assert all(f.rule not in ("under_loaded", "healthy") for f in lv.findings), lv
            assert not lv.headline.startswith(("Not enough load", "Healthy"))


def test_near_its_ceiling_only_near_it() -> None:
    assert "near its ceiling" in compute_words(0.50, 0.57)
    far = compute_words(0.30, 0.57)
    assert "near its ceiling" not in far and "not at its ceiling" in far
    assert "53% of the ~57%" in far
    assert "near its ceiling" not in compute_words(0.50, None)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_words_match_the_figures(scenario_dir: ScenarioDir, name: str) -> None:
    diag = diagnose_path(scenario_dir(name))
    texts = [f.title for f in diag.findings] + [f.cause or "" for f in diag.findings]
    if any("near its ceiling" in t and "not at" not in t for t in texts):
        assert diag.figures["compute_of_ceiling"] >= NEAR_CEILING
    if diag.healthy:
        assert not diag.verdicts()
