"""The rules table and its machinery on hand-made figures: conditions, templates, windows,
the cost order, and the figures computed from a hand-made ServerSeries."""

from __future__ import annotations

import numpy as np
import pytest

from servetune.diagnose.actions.build import build_action
from servetune.diagnose.actions.table import ACTIONS
from servetune.diagnose.conditions import AnyOf, Cond, fmt_ms, render, template_fields
from servetune.diagnose.doctor.rules import DOCTOR_RULES
from servetune.diagnose.engine_flags import engine_flags
from servetune.diagnose.evaluate import evaluate, evaluate_rule, needs
from servetune.diagnose.figures.client import compute_figures
from servetune.diagnose.figures.server import GPU_UTIL_MISSING
from servetune.diagnose.figures.table import FIGURES, Figures
from servetune.diagnose.knobs import KnownConfig
from servetune.diagnose.rules import RULES, Rule
from servetune.knobs import flag as knob_flag
from servetune.knobs import note as knob_note
from servetune.results.schema import (
    BenchConfig,
    ClientHealth,
    Environment,
    RunResult,
    Stats,
    Summary,
    TargetInfo,
)
from servetune.results.server_series import ServerSample

ALL_RULES = (*RULES, *DOCTOR_RULES)
EXTRAS = {
    "stall_examples",
    "quantization",
    "kv_cache_dtype",
    "running_cap_source",
    "compute_peak",
    "sending_window",
    "stall_limit_ms",
    "stall_windows",
    "kv_above_90",
    "kv_below_50",
    "running_at_cap",
    "mml_effect",
}


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.id)
def test_every_rule_is_complete_data(rule: Rule) -> None:
    assert rule.seed, "each rule says which line of the seed it implements"
    assert rule.when
    for action in rule.actions:
        assert action in ACTIONS, action
    for template in (rule.verdict, rule.cannot_tell, *rule.evidence):
        for name in template_fields(template):
            assert name in FIGURES or name in EXTRAS, (rule.id, name)
    for cond in (*rule.when, *rule.unless):
        for name in cond.figures():
            assert name in FIGURES, (rule.id, name)
    assert needs(rule), "the metrics a rule needs are listed"


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.id)
def test_actions_are_listed_in_the_seed_cost_order(rule: Rule) -> None:
    steps = [ACTIONS[a].cost_step for a in rule.actions if ACTIONS[a].cost_step]
    assert steps == sorted(steps), rule.id
    if "add_gpus" in rule.actions:
        assert rule.actions[-1] == "add_gpus", "only then add GPUs"


def test_conditions_true_false_unknown() -> None:
    fig = Figures(values={"a": 0.3, "b": 5.0})
    assert Cond("a", "<", 0.5, "").evaluate(fig) is True
    assert Cond("b", "<", 1.0, "").evaluate(fig) is False
    assert Cond("c", "<", 1.0, "").evaluate(fig) is None
    assert AnyOf((Cond("c", "<", 1, ""), Cond("a", "<", 1, "")), "").evaluate(fig) is True
    assert AnyOf((Cond("c", "<", 1, ""), Cond("b", "<", 1, "")), "").evaluate(fig) is None
    assert AnyOf((Cond("a", ">", 1, ""), Cond("b", "<", 1, "")), "").evaluate(fig) is False


def test_templates_format_by_unit_and_drop_when_a_figure_is_missing() -> None:
    fig = Figures(
        values={"kv_share_above_90": 0.673, "ttft_p99_ms": 11138.0, "offered_rate": 4.0},
        windows={"kv_above_90": [(23.5, 93.8), (1.0, 2.0)]},
    )
    assert render("{kv_share_above_90:pct} ({kv_above_90:win})", fig) == (
        "67% (23.5–93.8 s, 1.0–2.0 s)"
    )
    assert render("{ttft_p99_ms}", fig) == "11.1 s"
    assert render("{offered_rate:rate}", fig) == "4 req/s"
    assert render("{kv_mean:pct}", fig) is None
    assert fmt_ms(482.2) == "482 ms" and fmt_ms(1290.0) == "1.29 s" and fmt_ms(8.44) == "8.4 ms"


def _run(**summary: object) -> RunResult:
    return RunResult(
        config=BenchConfig(request_rate=4.0, num_prompts=100),
        environment=Environment(
            servetune_version="0",
            python="3.11",
            platform="x",
            hostname="h",
            cpu_count=2,
            started_at="2026-01-01T00:00:00+00:00",
        ),
        target=TargetInfo(base_url="http://127.0.0.1:1/v1", model="m"),
        client_health=ClientHealth(),
        summary=Summary(**summary),  # type: ignore[arg-type]
    )


def _series(kv: list[float], running: list[float] | None = None) -> list[ServerSample]:
    out = []
    for i, v in enumerate(kv):
        values = {"kv_cache_usage": v, "waiting": 0.0}
        if running is not None:
            values["running"] = running[i]
        out.append(ServerSample(t=i * 0.5, values=values))
    return out


def test_durations_are_shares_of_the_measured_window() -> None:
    run = _run(completed=50, window_start_s=0.0, window_end_s=9.5, duration_s=9.5)
    kv = [0.2] * 4 + [0.95] * 12 + [0.3] * 4
    fig = compute_figures(run, [], _series(kv), KnownConfig())
    assert fig.get("kv_share_above_90") == pytest.approx(12 / 20)
    assert fig.get("kv_share_below_50") == pytest.approx(8 / 20)
    assert fig.windows["kv_above_90"] == [(2.0, 7.75)]
    assert fig.missing["gpu_utilization_mean"] == GPU_UTIL_MISSING
    assert fig.missing["preemptions"].startswith("preemptions not exposed by this server")
    assert "max-num-seqs" not in fig.texts.get("running_cap_source", "")


def test_too_few_samples_judge_no_duration() -> None:
    run = _run(completed=5, window_start_s=0.0, window_end_s=1.5, duration_s=1.5)
    fig = compute_figures(run, [], _series([0.95, 0.96, 0.97, 0.97]), KnownConfig())
    assert fig.has("kv_mean")
    assert not fig.has("kv_share_above_90")
    assert "too few" in fig.missing["kv_share_above_90"]


def test_the_running_cap_is_the_servers_never_the_highest_count_seen() -> None:
    run = _run(completed=50, window_start_s=0.0, window_end_s=4.5, duration_s=4.5)
    running = [4, 8, 8, 8, 8, 8, 8, 8, 7, 8]
    series = _series([0.1] * 10, running=[float(x) for x in running])
    unknown = compute_figures(run, [], series, KnownConfig())
    assert not unknown.has("running_cap") and not unknown.has("running_at_cap_share")
    assert (
        "highest running count seen, 8, is what this run reached" in unknown.missing["running_cap"]
    )
    # a vLLM engine on a known GPU without --max-num-seqs runs at the registry's default
    default = compute_figures(run, [], series, KnownConfig(source="t", gpu="A100-80GB"))
    assert default.get("running_cap") == 256
    assert "default" in default.texts["running_cap_source"]
    known = compute_figures(run, [], series, KnownConfig(source="t", values={"max_num_seqs": 64}))
    assert known.get("running_cap") == 64
    assert known.get("running_at_cap_share") == 0
    assert known.get("batch_fill") == pytest.approx(np.mean(running) / 64)


def test_a_rule_with_a_known_false_condition_says_nothing() -> None:
    rule = next(r for r in RULES if r.id == "kv_pool_full")
    fig = Figures(values={"kv_share_above_90": 0.0, "kv_p95": 0.4})
    fig.missing["preemptions_per_request"] = "preemptions not exposed by this server"
    assert evaluate_rule(rule, fig) is None


def test_a_cannot_tell_asserts_nothing_it_could_not_see() -> None:
    """The cap is known (the engine's configuration) but too few samples show whether the
    batch sat at it: "cannot tell" must not read "Running requests sit at their cap (256)
    while others wait" — a run whose mean running was 3. Once those conditions are seen to
    hold and only the GPU's side is unknown, it says what held."""
    rule = next(r for r in RULES if r.id == "batch_capped")
    few = "only 5 server samples in the measured window"
    fig = Figures(values={"running_cap": 256.0, "kv_p95": 0.01})
    for name in ("running_at_cap_share", "waiting_share"):
        fig.missing[name] = few
    f = evaluate_rule(rule, fig)
    assert f is not None and f.kind == "cannot_tell"
    assert "sit at their cap" not in f.title and few in f.title, f.title
    fig = Figures(values={"running_cap": 256.0, "running_at_cap_share": 0.9, "waiting_share": 0.8})
    f = evaluate_rule(rule, fig)
    assert f is not None and f.kind == "cannot_tell"
    assert f.title.startswith("Running requests sit at their cap (256)"), f.title


def test_a_run_with_no_server_metrics_gets_cannot_tells_and_no_verdict() -> None:
    run = _run(
        completed=50,
        window_start_s=0.0,
        window_end_s=10.0,
        duration_s=10.0,
        ttft=Stats(count=50, p50=50.0, p99=80.0, max=90.0),
    )
    findings = evaluate(compute_figures(run, [], [], KnownConfig()))
    kinds = {f.rule: f.kind for f in findings}
    assert kinds["kv_pool_full"] == "cannot_tell"
    assert kinds["under_loaded"] == "cannot_tell"
    assert findings[0].kind == "healthy"
    assert "could not be evaluated" in findings[0].title


def test_engine_flags_speak_each_engine() -> None:
    flags = engine_flags("max_num_seqs", 256, 512)
    assert flags["vllm"].startswith("--max-num-seqs 512")
    assert "was --max-num-seqs 256" in flags["vllm"]
    assert flags["sglang"].startswith("--max-running-requests 512")
    assert flags["tgi"].startswith("--max-batch-size 512")
    assert flags["llama.cpp"].startswith("-np 512")
    kv = engine_flags("kv_cache_dtype", "auto", "fp8")
    assert kv["llama.cpp"].startswith("-ctk q8_0 -ctv q8_0")
    assert kv["sglang"].startswith("--kv-cache-dtype fp8_e5m2")
    assert engine_flags("enable_chunked_prefill", False, True)["tgi"].startswith("no equivalent")
    assert engine_flags("quantization", None, "fp8")["tgi"].startswith("--quantize fp8")


def test_the_chunk_cap_is_spelled_from_the_engine_knob_map() -> None:
    flags = engine_flags("long_prefill_token_threshold", 0, 512)
    assert (
        flags["vllm"]
        == "--long-prefill-token-threshold 512  (was --long-prefill-token-threshold 0)"
    )
    for engine in ("sglang", "tgi", "llama.cpp"):
        assert knob_flag(engine, "long_prefill_token_threshold") is None
        assert (
            flags[engine] == f"no equivalent: {knob_note(engine, 'long_prefill_token_threshold')}"
        )
    assert "--chunked-prefill-size" in flags["sglang"]


def test_an_action_with_no_known_value_says_so() -> None:
    fig = Figures(values={"running_cap": 16.0})
    a = build_action("raise_max_num_seqs", fig)
    assert a is not None
    assert a.from_value is None and a.to_value == 32
    b = build_action("raise_gpu_memory_utilization", Figures())
    assert b is not None and b.to_value is None
    assert "current value unknown" in b.flags["vllm"]
    assert build_action("kv_cache_fp8", Figures(values={"kv_fp8": 1.0})) is None
