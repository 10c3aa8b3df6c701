"""The offline simulator's public path: simulate() (no files) agrees with sim run (files), the
shortcuts it takes give what the general code gives."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servetune.results.io import read_records, record_line
from servetune.results.record import RequestRecord
from servetune.results.schema import BenchConfig
from servetune.sim.config import EngineConfig
from servetune.sim.construct import _record, ok_record
from servetune.sim.frontend import ApiServer
from servetune.sim.offline import run_offline, simulate, workload_plan
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
    values: dict[str, Any] = {
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


def test_ok_record_is_record_of_its_values() -> None:
    """The one-dict record of a successful simulated request is ``_record`` of its values:
    equal, the same fields set, the same key order (so the same JSONL line)."""
    args = (7, 100, 120, 500, 900, 950, [500, 700, 900], 1024, 3, 1024, 3, "length")
    values: dict[str, Any] = {
        "id": 7,
        "worker": 0,
        "status": "ok",
        "error": None,
        "http_status": 200,
        "scheduled_ns": 100,
        "eligible_ns": 120,
        "send_ns": 120,
        "first_ns": 500,
        "last_ns": 900,
        "end_ns": 950,
        "chunk_ns": [500, 700, 900],
        "chunk_tokens": None,
        "planned_input_len": 1024,
        "planned_output_len": 3,
        "prompt_tokens": 1024,
        "output_tokens": 3,
        "tokens_source": "sim",
        "finish_reason": "length",
    }
    fast, ref = ok_record(*args), _record(values)
    assert fast == ref
    assert list(fast.__dict__) == list(ref.__dict__)
    assert fast.model_fields_set == ref.model_fields_set
    assert record_line(fast) == record_line(ref)


def test_requests_file_is_record_lines_of_the_records(tmp_path: Path) -> None:
    """``requests.jsonl`` as the offline run writes it (token times from an int64 array) is
    byte for byte ``record_line`` of the records it keeps, and reads back as them; with a
    concurrency cap and preemptions too (records of several segments)."""
    from servetune.results.io import LineAppender
    from servetune.sim.memory import plan_memory
    from servetune.sim.offline_run import OfflineRun

    r = EngineConfig(
        gpu="A100-80GB", model="Qwen/Qwen2.5-7B-Instruct", gpu_memory_utilization=0.3
    ).resolve()
    preempted = 0
    for knobs in (
        {"request_rate": 40.0},
        {"request_rate": float("inf")},
        {"request_rate": float("inf"), "max_concurrency": 9},
    ):
        cfg = BenchConfig(num_prompts=300, random_input_len=2000, random_output_len=200, **knobs)
        plan, _, _ = workload_plan(cfg)
        run_dir = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        run_dir.mkdir()
        path = run_dir / "requests.jsonl"
        out = LineAppender(path)
        sim = OfflineRun(plan, cfg, r, plan_memory(r), requests_out=out)
        sim.run()
        out.close()
        assert path.read_bytes() == b"".join(record_line(x) for x in sim.records)
        assert read_records(run_dir) == sim.records
        preempted += sim.eng.counters.preemptions
    assert preempted > 0


def test_api_server_is_one_fifo_loop() -> None:
    """Steps' outputs computed at once equal the loop worked job by job."""
    rng = random.Random(1)
    api = ApiServer(per_request_ns=7, latency_ns=3, per_token_ns=2)
    ref_free = -(1 << 62)
    t = 0
    for _ in range(50):
        t += rng.randint(0, 9)
        api.accept(t)
        ref_free = max(t, ref_free) + 7
    ends = np.cumsum([rng.randint(0, 20) for _ in range(400)]).astype(np.int64)
    toks = np.array([rng.randint(0, 30) for _ in range(400)], dtype=np.int64)
    want = []
    for e, k in zip(ends.tolist(), toks.tolist(), strict=True):
        ref_free = max(e, ref_free) + k * 2
        want.append(ref_free + 3)
    free_before = api.free_at
    assert api.outputs(ends[:150], toks[:150]).tolist() == want[:150]
    assert api.outputs(ends[150:], toks[150:]).tolist() == want[150:]
    assert api.accept(0) == want[-1] - 3 + 7  # a request waits for the outputs before it
    # the job-by-job path for a few steps gives the same times
    api.free_at = free_before
    few = []
    for i in range(0, 400, 7):
        few += api.outputs_few(ends[i : i + 7].tolist(), toks[i : i + 7].tolist())
    assert few == want


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
    from servetune.sim.construct import construct_model

    h = {"buckets": [(0.1, 1), (1.0, 3)], "sum": 1.5, "count": 3}
    assert construct_model(Histogram, h) == Histogram.model_construct(**h)
    s = {"t": 0.5, "values": {"a": 1.0}, "histograms": {"x": Histogram.model_construct(**h)}}
    assert construct_model(ServerSample, s) == ServerSample.model_construct(**s)
    assert construct_model(ServerSample, {"t": 1.0}).histograms == {}


def test_scraped_samples_are_construct_of_their_values() -> None:
    """A scrape of a running engine, as the offline run keeps it, is ``construct_model`` of its
    values: equal, the same key order and fields set, its histograms too."""
    from servetune.results.server_series import Histogram, ServerSample
    from servetune.sim.construct import construct_model
    from servetune.sim.memory import plan_memory
    from servetune.sim.offline_run import OfflineRun
    from servetune.sim.scrape import as_server_sample, server_sample

    cfg = BenchConfig(num_prompts=60, random_input_len=512, random_output_len=32, request_rate=20)
    r = ENGINE.resolve()
    plan, _, _ = workload_plan(cfg)
    sim = OfflineRun(plan, cfg, r, plan_memory(r), keep_series=True)
    sim.run()
    assert len(sim.series) > 3
    raw = server_sample(sim.eng, 1.5)
    got = as_server_sample(raw)
    hists = {k: construct_model(Histogram, h) for k, h in raw["histograms"].items()}
    want = construct_model(ServerSample, {"t": 1.5, "values": raw["values"], "histograms": hists})
    assert got == want and got.model_fields_set == want.model_fields_set
    assert list(got.__dict__) == list(want.__dict__)
    for k, h in got.histograms.items():
        assert list(h.__dict__) == list(hists[k].__dict__)
        assert h.model_fields_set == hists[k].model_fields_set
        assert h.model_dump() == hists[k].model_dump()


def test_itl_from_delivery_times_is_summarizes_own() -> None:
    """The run's pooled ITL read from its int64 delivery times (what ``sim run`` hands the
    summary) is array for array what ``summarize`` computes from the records' ``chunk_ns``,
    with preemptions (records of several segments), in the summary's order, on a subset;
    and it declines (``None``) for records it did not make, or without token times."""
    from servetune.metrics.summary import _itl_ms, summarize
    from servetune.sim.memory import plan_memory
    from servetune.sim.offline_run import OfflineRun

    r = EngineConfig(
        gpu="A100-80GB", model="Qwen/Qwen2.5-7B-Instruct", gpu_memory_utilization=0.3
    ).resolve()
    cfg = BenchConfig(num_prompts=300, random_input_len=2000, random_output_len=200)
    cfg.request_rate = float("inf")
    plan, _, _ = workload_plan(cfg)
    sim = OfflineRun(plan, cfg, r, plan_memory(r))
    sim.run()
    assert sim.eng.counters.preemptions > 0
    assert any(len(sim._segs[x.id][1]) > 1 for x in sim.records if x.ok)
    ok = [x for x in sim.records if x.ok]
    for subset in (ok, ok[::-1], ok[5:40], ok[:1], []):
        got = sim.itl_ms(subset)
        assert got is not None
        want = _itl_ms(subset)
        assert got.dtype == want.dtype and np.array_equal(got, want)
    assert sim.itl_ms([*ok[:3], ok[3].model_copy()]) is None
    s1 = summarize(sim.records, 0.0, 5.0, itl_ms=sim.itl_ms)
    assert s1 == summarize(sim.records, 0.0, 5.0)
    assert 0 < s1.completed < len(ok) and s1.itl.count > 0
    sim2 = OfflineRun(plan, cfg, r, plan_memory(r), token_times=False)
    sim2.run()
    assert sim2.itl_ms([x for x in sim2.records if x.ok]) is None


def test_selected_percentiles_from_stats_are_computed_ones() -> None:
    """The percentile table taken from the metrics' Stats equals it computed again."""
    from servetune.metrics.stats import describe
    from servetune.metrics.summary import selected_percentiles

    rng = np.random.default_rng(3)
    values = {"a": rng.lognormal(size=30_001), "b": list(rng.random(17)), "c": []}
    stats = {m: describe(v) for m, v in values.items()}
    for pcts in ((99.0,), (50.0, 90.0, 95.0, 99.0, 99.9), (25.0, 99.0), (99.9, 50)):
        assert selected_percentiles(values, list(values), pcts, stats) == selected_percentiles(
            values, list(values), pcts
        )


def test_sample_line_is_orjson_of_the_scrape(tmp_path: Path) -> None:
    """A ``server_metrics.jsonl`` line, its histograms' JSON re-used while unchanged, is byte
    for byte ``orjson.dumps`` of the scrape (after a run, again unchanged, and changed)."""
    import orjson

    from servetune.results.io import LineAppender
    from servetune.sim.memory import plan_memory
    from servetune.sim.offline_run import OfflineRun
    from servetune.sim.scrape import server_sample

    r = EngineConfig(gpu="A100-80GB", model="Qwen/Qwen2.5-7B-Instruct").resolve()
    cfg = BenchConfig(num_prompts=50, random_input_len=200, random_output_len=20, request_rate=20)
    plan, _, _ = workload_plan(cfg)
    out = LineAppender(tmp_path / "s.jsonl")
    sim = OfflineRun(plan, cfg, r, plan_memory(r), samples_out=out)
    sim.run()
    out.close()
    lines = (tmp_path / "s.jsonl").read_bytes().splitlines(keepends=True)
    assert len(lines) == sim.samples > 4
    t = sim.eng.now - sim.t0
    for _ in range(2):
        assert sim._scrape(t) == orjson.dumps(server_sample(sim.eng, t)) + b"\n"
    sim.eng.h_e2e.observe(1.5)
    assert sim._scrape(t + 0.5) == orjson.dumps(server_sample(sim.eng, t + 0.5)) + b"\n"


def test_a_simulated_run_that_measures_nothing_failed() -> None:
    """A warm-up longer than the run leaves the summary's window empty: the run failed as a
    measurement (said, status failed), as bench's runs do; a shorter one is complete."""
    base = {"num_prompts": 20, "random_input_len": 128, "random_output_len": 8}
    empty = simulate(BenchConfig(**base, request_rate=50, warmup_s=1000.0), ENGINE)
    assert empty.summary.completed == 0 and empty.status == "failed"
    assert any("no request falls in the measured window" in w for w in empty.warnings)
    some = simulate(BenchConfig(**base, request_rate=50, warmup_s=0.05), ENGINE)
    assert some.summary.completed > 0 and some.status == "complete"


@pytest.mark.parametrize(("endpoint", "what"), [("completions", "prompt"), ("chat", "messages")])
def test_a_request_past_the_context_is_refused_in_vllms_words(
    tmp_path: Path, endpoint: str, what: str
) -> None:
    """Offline, a request longer than the context fails as the simulated server refuses it:
    one message (sim.intake), "in the prompt" for completions, "in the messages" for chat —
    the offline path said "messages" for both."""
    cfg = BenchConfig(
        num_prompts=6, random_input_len=600, random_output_len=20, request_rate=4.0,
        endpoint=endpoint,
    )  # fmt: skip
    engine = EngineConfig(gpu="A100-80GB", model="Qwen/Qwen2.5-7B-Instruct", max_model_len=512)
    simulate(cfg, engine, tmp_path)
    recs = read_records(tmp_path)
    assert recs and all(r.status == "failed" and r.http_status == 400 for r in recs)
    assert all(r.error and "maximum context length is 512 tokens" in r.error for r in recs)
    assert all(f"in the {what}," in (r.error or "") for r in recs), recs[0].error
