"""A sweep on the simulated engine: per level and for the curve as a whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.diagnose.dx_scenarios import SEED_KNOBS

from servetune.diagnose import Diagnosis, diagnose_path
from servetune.diagnose.render import render
from servetune.results.schema import BenchConfig, RunResult
from servetune.results.sweep_schema import SweepConfig
from servetune.sim.config import EngineConfig
from servetune.sim.offline import run_offline
from servetune.sweep.runner import run_sweep

ENGINE = EngineConfig(**SEED_KNOBS)


def _sweep(
    out: Path,
    rates: list[float] | None,
    prompts: int = 150,
    engine: EngineConfig = ENGINE,
    concurrencies: list[int] | None = None,
    lengths: tuple[int, int] = (1024, 128),
) -> Path:
    def level(cfg: BenchConfig, d: Path) -> RunResult:
        return run_offline(cfg.model_copy(update={"base_url": None}), engine, d)

    run_sweep(
        SweepConfig(
            bench=BenchConfig(
                num_prompts=prompts, random_input_len=lengths[0], random_output_len=lengths[1]
            ),
            mode="concurrency" if concurrencies else "rate",
            request_rates=rates,
            concurrencies=concurrencies,
            target="offline",
            engine=engine.model_dump(),
        ),
        out,
        level,
        echo=lambda _line: None,
    )
    return out


@pytest.fixture(scope="module")
def seed_sweep(tmp_path_factory: pytest.TempPathFactory) -> Diagnosis:
    """The seed's procedure at a small scale: rates across the knee (saturation ≈ 10 req/s)."""
    d = _sweep(tmp_path_factory.mktemp("dx-sweep") / "sweep", [2, 4, 8, 12, 16, 32])
    return diagnose_path(d)


def test_levels_past_the_knee_are_named_with_the_growing_queue(seed_sweep: Diagnosis) -> None:
    diag = seed_sweep
    assert diag.kind == "sweep"
    past = diag.finding("past_knee")
    assert past is not None and past.kind == "bottleneck" and past.scope == "curve"
    assert "are past the knee" in past.title
    assert "waiting grows without bound at" in past.title
    assert "32 req/s" in past.title
    assert past.actions[0].id == "rate_limit_at_knee"
    assert past.actions[0].cost_step == 3
    marked = [lv.label for lv in diag.levels if lv.past_knee]
    assert marked and marked[-1] == "rate-32"
    assert "rate-2" not in marked
    assert [lv.label for lv in diag.levels] == [
        "rate-2",
        "rate-4",
        "rate-8",
        "rate-12",
        "rate-16",
        "rate-32",
    ]
    # the per-level verdicts agree with the curve: the top levels saturate
    top = next(lv for lv in diag.levels if lv.label == "rate-32")
    assert any(f.rule == "overloaded" for f in top.findings)
    low = next(lv for lv in diag.levels if lv.label == "rate-2")
    assert low.findings[0].rule == "under_loaded"
    assert all(f.scope == "level" for lv in diag.levels for f in lv.findings)


def test_a_saturated_level_is_limited_at_the_curves_knee_not_at_its_own_guess(
    seed_sweep: Diagnosis,
) -> None:
    """One run alone can only guess a limit (75% of what it completed); within a sweep the
    knee is known, and a level past it that saturated advises the knee's limit — not a third
    figure beside the knee's and the other levels' (7.19 and 7.59 beside a knee of 7.70)."""
    knee = seed_sweep.finding("past_knee")
    assert knee is not None
    limit = knee.actions[0]
    for lv in seed_sweep.levels:
        if not lv.past_knee:
            continue
        for f in lv.findings:
            ids = [a.id for a in f.actions]
            assert "rate_limit" not in ids, (lv.label, f.title, ids)
            if "rate_limit_at_knee" in ids:
                assert f.actions[ids.index("rate_limit_at_knee")].title == limit.title
        assert "75% of what the saturated" not in lv.headline, lv.headline


def test_the_curve_says_what_limits_capacity_in_cost_order(seed_sweep: Diagnosis) -> None:
    limit = seed_sweep.finding("capacity_limit")
    assert limit is not None
    assert "compute" in limit.title
    steps = [a.cost_step for a in limit.actions]
    assert steps == sorted(steps)
    assert limit.actions[-1].id == "add_gpus"
    assert any(e.startswith("step 2 push KV use to 80%+") for e in limit.evidence)
    assert "knee ≈" in seed_sweep.headline
    assert "past it" in seed_sweep.headline


def test_the_text_shows_the_curve_then_the_levels(seed_sweep: Diagnosis) -> None:
    text = render(seed_sweep)
    assert text.index("The curve:") < text.index("Per level:")
    assert "[past the knee]" in text
    assert "rate-32 [past the knee]" in text


def test_a_sweep_that_never_reaches_the_knee_says_more_load(tmp_path: Path) -> None:
    diag = diagnose_path(_sweep(tmp_path / "low", [0.5, 1, 1.5, 2], prompts=80))
    f = diag.findings[0]
    assert f.rule == "knee_not_reached", [x.rule for x in diag.findings]
    assert "never reached the knee" in f.title
    assert f.actions and f.actions[0].id == "add_load"
    assert diag.finding("past_knee") is None
    assert all(lv.past_knee is None for lv in diag.levels)


def test_a_concurrency_sweep_on_a_small_pool_names_the_pool(tmp_path: Path) -> None:
    small = EngineConfig(max_model_len=8192, gpu_memory_utilization=0.3)
    d = _sweep(
        tmp_path / "conc",
        None,
        prompts=150,
        engine=small,
        concurrencies=[4, 16, 64, 128],
        lengths=(2048, 512),
    )
    diag = diagnose_path(d)
    past = diag.finding("past_knee")
    assert past is not None and "concurrency ≈" in past.title
    limit = diag.finding("capacity_limit")
    assert limit is not None and "KV pool" in limit.title
    assert limit.actions[0].id == "kv_cache_fp8"
    assert limit.actions[-1].id == "add_gpus"
    assert "limit: the KV pool" in diag.headline
