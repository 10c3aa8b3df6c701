"""Checks live in the models: a library caller gets the same refusal as the CLI, in the
model's own field names; the CLI names the flag that set the field."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from servetune.checks import config_error, validated
from servetune.errors import ConfigError
from servetune.results.schema import BenchConfig
from servetune.results.tune_file import Space, TuneSpec


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"num_prompts": -1}, "num_prompts must be ≥ 1 (got -1)"),
        ({"request_rate": 0}, "request_rate must be > 0 (got 0)"),
        ({"random_range_ratio": 1.0}, "random_range_ratio must be in [0, 1) (got 1)"),
        ({"duration_s": math.nan}, "duration_s must be a finite number (got nan)"),
        ({"request_timeout_s": -1}, "request_timeout_s must be > 0 seconds (got -1)"),
        (
            {"arrival": "constant", "burstiness": 0.5},
            "burstiness 0.5 shapes random gaps, and arrival constant spaces",
        ),
        (
            {"duration_s": 10, "warmup_s": 5, "cooldown_s": 5},
            "warmup_s 5 s + cooldown_s 5 s leave nothing of duration_s 10 s to measure",
        ),
    ],
)
def test_bench_config_refuses_in_its_own_names(fields: dict[str, object], said: str) -> None:
    with pytest.raises(ValidationError) as exc:
        BenchConfig(**fields)  # type: ignore[arg-type]
    err = config_error(exc.value, model=BenchConfig)
    assert said in err.message, err.message
    assert "--" not in err.message  # a library layer names no CLI flag


def test_the_cli_names_the_flag_and_keeps_the_hint() -> None:
    from servetune.commands._flags import flag_of

    with pytest.raises(ConfigError) as exc:
        validated(BenchConfig, {"num_prompts": -1}, name=flag_of)
    assert exc.value.message == "--num-prompts must be ≥ 1 (got -1)"
    assert exc.value.hint == "e.g. --num-prompts 1000"
    with pytest.raises(ConfigError) as exc:
        validated(BenchConfig, {"dataset_path": "a.jsonl"}, name=flag_of)
    assert "--dataset-path a.jsonl is not read by --dataset-name random" in exc.value.message
    assert exc.value.hint is not None and "--dataset-name jsonl" in exc.value.hint


def _spec(**extra: object) -> dict[str, object]:
    return {
        "engine": "sim",
        "model": "m",
        "workload": BenchConfig(),
        "space": Space(engine="sim"),
        **extra,
    }


def test_tune_spec_refuses_counts_it_used_to_clamp() -> None:
    for field, value, said in (
        ("probes", 1, "probes must be ≥ 2 (got 1)"),
        ("repeats", 0, "repeats must be ≥ 1 (got 0)"),
        ("time_budget_s", 0, "time_budget_s must be > 0 seconds (got 0)"),
    ):
        with pytest.raises(ConfigError) as exc:
            validated(TuneSpec, _spec(**{field: value}))
        assert exc.value.message == said


def test_tune_spec_knows_its_engines_and_their_rules() -> None:
    with pytest.raises(ConfigError) as exc:
        validated(TuneSpec, _spec(engine="nope"))
    assert "unknown engine 'nope'" in exc.value.message
    assert validated(TuneSpec, _spec(engine="llamacpp")).engine == "llama.cpp"
    with pytest.raises(ConfigError) as exc:
        validated(TuneSpec, _spec(engine="vllm", realtime=True))
    assert exc.value.message == "realtime applies to engine sim only"


def test_plan_and_cost_requests_refuse_in_their_own_names() -> None:
    from servetune.results.cost_file import CostRequest

    with pytest.raises(ConfigError) as exc:
        validated(CostRequest, {"path": "x", "r": math.nan})
    assert exc.value.message == "r must be a finite number (got nan)"
    with pytest.raises(ConfigError) as exc:
        validated(CostRequest, {"path": "x", "gpus": 0})
    assert exc.value.message == "gpus must be ≥ 1 (got 0)"
    assert exc.value.hint == "e.g. gpus=8"
