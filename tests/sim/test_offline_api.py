"""The offline simulator's public path: simulate() (no files) agrees with sim run (files), the
shortcuts it takes give what the general code gives."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from servetune.results.record import RequestRecord
from servetune.results.schema import BenchConfig
from servetune.sim.config import EngineConfig
from servetune.sim.frontend import ApiServer
from servetune.sim.offline import _record, run_offline, simulate, workload_plan
from servetune.workload.plan import make_plan
from servetune.workload.tokens import load_tokenizer

ENGINE = EngineConfig(gpu="A100-80GB", model="Qwen/Qwen2.5-7B-Instruct", max_model_len=8192)


@pytest.mark.parametrize(
    "knobs",
    [
        {"request_rate": 8.0},
        {"request_rate": 3.0, "burstiness": 0.5},
        {"request_rate": float("inf")},
        {"request_rate": 5.0, "seed": 7, "random_range_ratio": 0.5},
        {"request_rate": 20.0, "duration_s": 3.0},
    ],
)
def test_workload_plan_is_make_plans_plan(knobs: dict) -> None:  # type: ignore[type-arg]
    cfg = BenchConfig(num_prompts=40, random_input_len=300, random_output_len=20, **knobs)
    plan, name, exact = workload_plan(cfg)
    ref = make_plan(cfg, load_tokenizer(None))
    assert [(r.input_len, r.output_len) for r in plan.requests] == [
        (r.input_len, r.output_len) for r in ref.requests
    ]
    assert plan.offsets_ns == ref.offsets_ns
    assert plan.planned_rate == ref.planned_rate and plan.duration_ns == ref.duration_ns
    assert name == "approximate" and not exact
    # a second rate reuses the drawn requests
    other, _, _ = workload_plan(cfg.model_copy(update={"request_rate": 2.0}))
    if cfg.duration_s is None:
        assert other.requests is plan.requests


def test_fast_record_is_model_construct() -> None:
    values = {
        "id": 3,
        "worker": 0,
        "status": "ok",
        "scheduled_ns": 1,
        "eligible_ns": 1,
        "send_ns": 2,
        "first_ns": 5,
        "last_ns": 9,
        "end_ns": 9,
        "chunk_ns": [5, 7, 9],
        "planned_input_len": 10,
        "output_tokens": 3,
        "tokens_source": "sim",
    }
    fast, ref = _record(values), RequestRecord.model_construct(**values)
    assert fast == ref
    assert fast.model_dump() == ref.model_dump()
    assert fast.model_fields_set == ref.model_fields_set
    assert fast.itl_ms() == [2e-6, 2e-6]


def test_vectorized_delivery_is_per_token_delivery() -> None:
    rng = random.Random(1)
    api = ApiServer(5, 3)
    t = 0
    for _ in range(300):
        t += rng.randint(0, 9)
        api.accept(t)
    times = np.array([rng.randint(0, 3000) for _ in range(2000)], dtype=np.int64)
    want = [api.deliver(int(x)) for x in times]
    assert api.deliver_array(times.copy()).tolist() == want
    ordered = sorted(int(x) for x in times)
    assert api.deliver_all(ordered, 0) == [api.deliver(x) for x in ordered]


def test_simulate_without_files_is_sim_run(tmp_path: Path) -> None:
    cfg = BenchConfig(num_prompts=200, random_input_len=512, random_output_len=64, request_rate=6)
    mem_only = simulate(cfg, ENGINE)
    on_disk = run_offline(cfg, ENGINE, tmp_path / "run")
    assert mem_only.summary == on_disk.summary
    assert mem_only.server is not None and on_disk.server is not None
    assert mem_only.server.summary == on_disk.server.summary
    assert {p.name for p in (tmp_path / "run").iterdir()} == {
        "requests.jsonl",
        "server_metrics.jsonl",
        "run.json",
    }
    assert mem_only.summary.completed == 200
    quick = simulate(cfg, ENGINE, server_metrics=False)
    assert quick.summary == mem_only.summary and quick.server is not None
    # the KV pool follows the vLLM release asked for
    old = simulate(cfg, ENGINE, vllm_version="0.10.1")
    assert old.target.simulated is not None and mem_only.target.simulated is not None
    assert (
        old.target.simulated["memory"]["kv_cache_tokens"]
        > mem_only.target.simulated["memory"]["kv_cache_tokens"]
    )


def test_fast_samples_are_model_construct() -> None:
    from servetune.results.server_series import Histogram, ServerSample
    from servetune.sim.offline import _construct

    h = {"buckets": [(0.1, 1), (1.0, 3)], "sum": 1.5, "count": 3}
    assert _construct(Histogram, h) == Histogram.model_construct(**h)
    s = {"t": 0.5, "values": {"a": 1.0}, "histograms": {"x": Histogram.model_construct(**h)}}
    assert _construct(ServerSample, s) == ServerSample.model_construct(**s)
    assert _construct(ServerSample, {"t": 1.0}).histograms == {}
