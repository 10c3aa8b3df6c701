"""Every run rule fires on the simulated scenario that reproduces its condition, names the
right knob, and stays silent on the others; following its first advice improves the figure
the rule was about."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.diagnose.dx_scenarios import SCENARIOS, run_scenario

from servetune.diagnose import Diagnosis, diagnose_path
from servetune.diagnose.actions.build import apply_action
from servetune.diagnose.model import Action
from servetune.results.io import read_run_result

ScenarioDir = Callable[[str], Path]


def _diag(scenario_dir: ScenarioDir, name: str) -> Diagnosis:
    return diagnose_path(scenario_dir(name))


def _first_action(diag: Diagnosis, rule: str) -> Action:
    f = diag.finding(rule)
    assert f is not None and f.actions, diag.headline
    return f.actions[0]


# scenario → (the top verdict, the id of its first action, the knob it turns)
EXPECTED = {
    "under_loaded": ("under_loaded", "add_load", None),
    "kv_pool_full": ("kv_pool_full", "kv_cache_fp8", "kv_cache_dtype"),
    "prefill_blocked": ("prefill_blocked", "enable_chunked_prefill", "enable_chunked_prefill"),
    "short_prompts_wait": (
        "short_prompts_wait",
        "long_prefill_threshold",
        "long_prefill_token_threshold",
    ),
    "batch_capped": ("batch_capped", "raise_max_num_seqs", "max_num_seqs"),
    "overloaded": ("overloaded", "rate_limit", None),
    "kv_near_full": ("kv_near_full", "kv_cache_fp8", "kv_cache_dtype"),
    "burst": ("burst", None, None),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_scenario_names_the_bottleneck_and_the_knob(scenario_dir: ScenarioDir, name: str) -> None:
    rule, action_id, knob = EXPECTED[name]
    diag = _diag(scenario_dir, name)
    assert diag.findings[0].rule == rule, [f.rule for f in diag.findings]
    top = diag.findings[0]
    assert top.kind in ("bottleneck", "warning")
    assert top.evidence, "a verdict quotes its evidence"
    assert top.seed, "a verdict says which line of the seed it implements"
    assert not diag.healthy
    assert diag.headline.startswith(top.title)
    if action_id is not None:
        first = top.actions[0]
        assert first.id == action_id
        assert first.knob == knob
        assert first.expected and first.risk
        if knob is not None:
            assert set(first.flags) == {"vllm", "sglang", "tgi", "llama.cpp", "trtllm"}
            assert first.to_value is not None


def test_healthy_run_fires_no_rule(scenario_dir: ScenarioDir) -> None:
    diag = _diag(scenario_dir, "healthy")
    assert diag.healthy
    assert diag.rules_fired() == []
    assert diag.findings[0].rule == "healthy"
    assert diag.headline.startswith("Healthy")
    assert [f for f in diag.findings if f.kind == "cannot_tell"] == []


# rules that must stay silent on each scenario (the negative half of "fire and not fire")
SILENT = {
    "healthy": {
        "short_prompts_wait",
        "under_loaded",
        "kv_pool_full",
        "kv_near_full",
        "batch_capped",
        "prefill_blocked",
        "overloaded",
        "quantized_quality",
        "burst",
    },
    "under_loaded": {"kv_pool_full", "batch_capped", "overloaded", "prefill_blocked"},
    "kv_pool_full": {"under_loaded", "batch_capped", "prefill_blocked", "kv_near_full"},
    "prefill_blocked": {"overloaded", "kv_pool_full", "batch_capped", "short_prompts_wait"},
    "short_prompts_wait": {"prefill_blocked", "overloaded", "kv_pool_full"},
    "batch_capped": {"kv_pool_full", "under_loaded", "prefill_blocked"},
    # Compute-bound saturation: raising --max-num-seqs would not help, so no batch verdict.
    "overloaded": {"batch_capped", "under_loaded", "kv_pool_full", "prefill_blocked"},
    "kv_near_full": {"kv_pool_full", "overloaded", "under_loaded"},
    "quantized": {"kv_pool_full", "overloaded", "batch_capped"},
    "burst": {"overloaded", "under_loaded"},
}


@pytest.mark.parametrize("name", sorted(SILENT))
def test_rules_stay_silent_where_their_condition_does_not_hold(
    scenario_dir: ScenarioDir, name: str
) -> None:
    diag = _diag(scenario_dir, name)
    fired = {f.rule for f in diag.findings if f.kind != "cannot_tell"}
    assert not (fired & SILENT[name]), f"{name}: {fired & SILENT[name]}"


def test_quantized_run_reminds_of_quality(scenario_dir: ScenarioDir) -> None:
    diag = _diag(scenario_dir, "quantized")
    assert diag.healthy
    f = diag.finding("quantized_quality")
    assert f is not None and f.kind == "advisory"
    assert f.actions[0].id == "quality_regression"
    assert diag.finding("quantized_quality") is not None
    assert _diag(scenario_dir, "kv_pool_full").finding("quantized_quality") is None


def test_overloaded_names_what_limits_it(scenario_dir: ScenarioDir) -> None:
    over = _diag(scenario_dir, "overloaded").finding("overloaded")
    assert over is not None and over.cause is not None
    assert "compute" in over.cause
    # On an A100 (no fp8 tensor cores) int4 weights would not lift a compute limit.
    assert all(a.knob != "quantization" for a in over.actions)
    assert [a.cost_step for a in over.actions] == sorted(a.cost_step for a in over.actions)
    # With a cause found, the saturated finding points at it instead of repeating its fixes.
    capped = _diag(scenario_dir, "batch_capped").finding("overloaded")
    assert capped is not None and capped.cause is not None and "max-num-seqs" in capped.cause
    assert all(a.cost_step >= 3 for a in capped.actions)


def test_kv_pool_full_actions_follow_the_cost_order(scenario_dir: ScenarioDir) -> None:
    f = _diag(scenario_dir, "kv_pool_full").finding("kv_pool_full")
    assert f is not None
    ids = [a.id for a in f.actions]
    assert ids[:2] == ["kv_cache_fp8", "quantize_weights"]  # 1: quantize
    assert ids[-1] == "add_gpus"  # 4: only then add GPUs
    steps = [a.cost_step for a in f.actions if a.cost_step]
    assert steps == sorted(steps)
    # the memory planner's before/after, not a guess: fp8 halves the bytes per token
    m = re.search(r"KV pool ([\d,]+) → ([\d,]+) tokens", f.actions[0].expected)
    assert m is not None, f.actions[0].expected
    before, after = (int(x.replace(",", "")) for x in m.groups())
    assert after == pytest.approx(2 * before, rel=0.01)


# --- following the advice improves the figure the rule was about -----------------------------


def _rerun(
    name: str, action: Action, out: Path, data_dir: Path, bench: dict[str, object] | None = None
) -> Diagnosis:
    sc = SCENARIOS[name]
    changed = apply_action(sc.engine_config(), action)
    run_scenario(name, out, data_dir, bench, **changed.model_dump(exclude_unset=False))
    return diagnose_path(out)


def test_kv_fp8_ends_the_preemptions(
    scenario_dir: ScenarioDir, data_dir: Path, tmp_path: Path
) -> None:
    before = _diag(scenario_dir, "kv_pool_full")
    action = _first_action(before, "kv_pool_full")
    after = _rerun("kv_pool_full", action, tmp_path / "after", data_dir)
    b, a = before.figures, after.figures
    assert b["preemptions"] >= 50
    assert a["preemptions"] == 0
    assert a["kv_share_above_90"] < b["kv_share_above_90"]
    assert a["e2e_p99_ms"] < b["e2e_p99_ms"]
    assert a["request_throughput"] > b["request_throughput"]
    assert after.finding("kv_pool_full") is None


def test_chunked_prefill_ends_the_stalls(
    scenario_dir: ScenarioDir, data_dir: Path, tmp_path: Path
) -> None:
    before = _diag(scenario_dir, "prefill_blocked")
    action = _first_action(before, "prefill_blocked")
    assert action.also == {"max_num_batched_tokens": 2048}
    after = _rerun("prefill_blocked", action, tmp_path / "after", data_dir)
    b, a = before.figures, after.figures
    assert b["itl_max_ms"] > 900
    assert a["itl_max_ms"] < b["itl_max_ms"] / 3
    assert a["stalls"] == 0 < b["stalls"]
    assert after.finding("prefill_blocked") is None


def test_a_per_prompt_chunk_cap_lets_short_prompts_through(
    scenario_dir: ScenarioDir, data_dir: Path, tmp_path: Path
) -> None:
    before = _diag(scenario_dir, "short_prompts_wait")
    action = _first_action(before, "short_prompts_wait")
    assert action.to_value == 512  # a quarter of the 2048-token step
    after = _rerun("short_prompts_wait", action, tmp_path / "after", data_dir)
    b, a = before.figures, after.figures
    assert a["ttft_short_p99_ms"] < b["ttft_short_p99_ms"] / 5
    assert a["request_throughput"] == pytest.approx(b["request_throughput"], rel=0.02)
    assert after.finding("short_prompts_wait") is None
    # the run records the cap it ran with: diagnose reads it, and the vllm serve line says it
    assert a["long_prefill_token_threshold"] == 512
    args = read_run_result(tmp_path / "after").target.simulated["vllm_serve_args"]
    assert args[args.index("--long-prefill-token-threshold") + 1] == "512"


def test_a_simulated_run_says_it_had_no_per_prompt_chunk_cap(scenario_dir: ScenarioDir) -> None:
    f = _diag(scenario_dir, "short_prompts_wait").finding("short_prompts_wait")
    assert f is not None
    assert f.figures["long_prefill_token_threshold"] == 0
    assert f.missing == [] and f.confidence == "high"


def test_raising_the_batch_cap_raises_throughput(
    scenario_dir: ScenarioDir, data_dir: Path, tmp_path: Path
) -> None:
    before = _diag(scenario_dir, "batch_capped")
    action = _first_action(before, "batch_capped")
    assert (action.from_value, action.to_value) == (16, 32)
    after = _rerun("batch_capped", action, tmp_path / "after", data_dir)
    b, a = before.figures, after.figures
    assert a["request_throughput"] > 1.3 * b["request_throughput"]
    assert a["ttft_p99_ms"] < b["ttft_p99_ms"] / 5
    assert after.finding("batch_capped") is None
    assert after.finding("overloaded") is None


def test_the_batch_cap_verdict_is_withheld_where_it_would_not_help(
    scenario_dir: ScenarioDir, data_dir: Path, tmp_path: Path
) -> None:
    """The compute-bound overload has the cap at 256 hit too, but doubling it buys < 5%."""
    base = _diag(scenario_dir, "overloaded")
    run_scenario("overloaded", tmp_path / "512", data_dir, max_num_seqs=512)
    bigger = diagnose_path(tmp_path / "512")
    gain = bigger.figures["request_throughput"] / base.figures["request_throughput"]
    assert gain < 1.05
    assert base.finding("batch_capped") is None


def test_rate_limiting_at_the_advised_rate_stops_the_growth(
    scenario_dir: ScenarioDir, data_dir: Path, tmp_path: Path
) -> None:
    before = _diag(scenario_dir, "overloaded")
    action = _first_action(before, "overloaded")
    assert action.id == "rate_limit" and action.to_value is not None
    assert action.to_value < SCENARIOS["overloaded"].bench["request_rate"]
    run_scenario(
        "overloaded", tmp_path / "limited", data_dir, {"request_rate": float(action.to_value)}
    )
    after = diagnose_path(tmp_path / "limited")
    assert after.finding("overloaded") is None
    assert after.figures["ttft_p99_ms"] < before.figures["ttft_p99_ms"] / 2
    assert after.figures["inflight_growth_per_s"] < before.figures["inflight_growth_per_s"] / 5


def test_kv_fp8_takes_the_pool_off_its_edge(
    scenario_dir: ScenarioDir, data_dir: Path, tmp_path: Path
) -> None:
    before = _diag(scenario_dir, "kv_near_full")
    action = _first_action(before, "kv_near_full")
    after = _rerun("kv_near_full", action, tmp_path / "after", data_dir)
    assert after.figures["kv_share_above_90"] < 0.05 < before.figures["kv_share_above_90"]
    assert after.finding("kv_near_full") is None


def test_more_load_uses_the_idle_server(
    scenario_dir: ScenarioDir, data_dir: Path, tmp_path: Path
) -> None:
    before = _diag(scenario_dir, "under_loaded")
    run_scenario("under_loaded", tmp_path / "more", data_dir, {"request_rate": 6.0})
    after = diagnose_path(tmp_path / "more")
    assert after.figures["compute_use_est"] > 2.5 * before.figures["compute_use_est"]
    assert after.figures["request_throughput"] > 2.5 * before.figures["request_throughput"]
    assert after.finding("overloaded") is None


def _texts(diag: Diagnosis) -> list[str]:
    out = [diag.headline]
    for f in [*diag.findings, *(g for lv in diag.levels for g in lv.findings)]:
        out += [f.title, *f.evidence, *f.conditions, *f.missing]
        for a in f.actions:
            out += [a.title, a.expected, a.risk, *a.flags.values()]
    return out


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_no_template_is_left_unfilled(scenario_dir: ScenarioDir, name: str) -> None:
    diag = _diag(scenario_dir, name)
    for text in _texts(diag):
        assert "{" not in text and "}" not in text, text


def test_a_config_given_with_a_run_is_checked_without_repeating_the_run(
    scenario_dir: ScenarioDir,
) -> None:
    diag = diagnose_path(
        scenario_dir("prefill_blocked"),
        server_cmd="vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 16384 "
        "--max-num-batched-tokens 16384 --no-enable-chunked-prefill",
        gpu="A100-80GB",
    )
    rules = [f.rule for f in diag.findings]
    assert "prefill_blocked" in rules
    assert "prefill_stall_ahead" not in rules  # the run already shows it
    for text in _texts(diag):
        assert "{" not in text, text
