"""The seed's facts, as the simulated engine must show them (short virtual-clock runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.results.io import read_records, read_run_result, read_server_series
from servetune.results.schema import BenchConfig
from servetune.sim.config import EngineConfig
from servetune.sim.memory import plan_memory
from servetune.sim.offline import run_offline
from servetune.sim.offline_run import OfflineRun
from servetune.workload.plan import Plan
from servetune.workload.spec import RequestSpec

SEED = EngineConfig(
    gpu="A100-80GB",
    model="Qwen2.5-7B-Instruct",
    max_model_len=32768,
    gpu_memory_utilization=0.9,
    max_num_seqs=256,
    max_num_batched_tokens=8192,
)


def lengths_plan(lens: list[tuple[int, int]], offsets_s: list[float]) -> Plan:
    reqs = [RequestSpec(prompt="", input_len=i, output_len=o) for i, o in lens]
    return Plan(requests=reqs, offsets_ns=[int(t * 1e9) for t in offsets_s])


def simulate(ec: EngineConfig, plan: Plan, cap: int | None = None) -> OfflineRun:
    r = ec.resolve()
    sim = OfflineRun(plan, BenchConfig(max_concurrency=cap), r, plan_memory(r))
    sim.run()
    return sim


def p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))]


def test_sim_run_writes_a_run_dir_every_reader_reads(tmp_path: Path) -> None:
    cfg = BenchConfig(
        num_prompts=60, request_rate=8, random_input_len=256, random_output_len=32, seed=1
    )
    res = run_offline(cfg, SEED, tmp_path)
    back = read_run_result(tmp_path)
    assert back.summary.completed == 60 == res.summary.completed
    recs = read_records(tmp_path)
    assert len(recs) == 60
    r = recs[0]
    assert r.tokens_source == "sim" and r.output_tokens == 32 and len(r.chunk_ns) == 32
    assert r.first_ns == r.chunk_ns[0] and r.last_ns == r.chunk_ns[-1]
    assert back.summary.tpot.mean and back.summary.ttft.mean and back.summary.itl.count
    series = read_server_series(tmp_path)
    assert len(series) >= 2
    assert {"kv_cache_usage", "running", "waiting", "preemptions_total"} <= set(series[-1].values)
    assert series[-1].histograms["ttft_seconds"].count == 60
    assert back.target.simulated and back.target.simulated["max_num_seqs"] == 256


def test_throughput_plateaus_while_p99_turns_up(tmp_path: Path) -> None:
    thr, p99s = [], []
    for rate in (2, 6, 24, 48):
        res = run_offline(
            BenchConfig(num_prompts=150, request_rate=rate, seed=3), SEED, tmp_path / str(rate)
        )
        thr.append(res.summary.output_throughput)
        p99s.append(res.summary.ttft.p99 or 0.0)
    assert thr[1] > 2.5 * thr[0]  # below the knee throughput follows the offered load
    assert thr[3] < 1.25 * thr[2]  # past it, it is flat
    assert p99s[3] > 10 * p99s[1]  # and the tail latency explodes


def test_more_max_num_seqs_more_throughput_higher_tpot() -> None:
    plan = lengths_plan([(128, 256)] * 256, [0.0] * 256)
    out = {}
    for seqs in (16, 128):
        sim = simulate(SEED.model_copy(update={"max_num_seqs": seqs}), plan)
        recs = sim.records
        dur = max(r.end_ns for r in recs) / 1e9
        tpot = sum(r.tpot_ms or 0 for r in recs) / len(recs)
        out[seqs] = (sum(r.output_tokens or 0 for r in recs) / dur, tpot)
    assert out[128][0] > 2 * out[16][0]
    assert out[128][1] > out[16][1]


def test_chunked_prefill_cuts_p99_ttft_under_mixed_prompts() -> None:
    # one prompt in eight is 12k tokens; the rest are short
    lens, offs = [], []
    for i in range(240):
        lens.append((12000 if i % 8 == 0 else 64, 64))
        offs.append(i * 0.25)
    plan = lengths_plan(lens, offs)
    off = SEED.model_copy(
        update={
            "max_model_len": 16384,
            "max_num_batched_tokens": None,
            "enable_chunked_prefill": False,
        }
    )
    on = off.model_copy(
        update={"enable_chunked_prefill": True, "long_prefill_token_threshold": 512}
    )
    ttft, itl = {}, {}
    for name, ec in (("off", off), ("on", on)):
        sim = simulate(ec, plan)
        ttft[name] = p99([r.ttft_ms or 0 for r in sim.records if r.planned_input_len == 64])
        itl[name] = max(g for r in sim.records for g in r.itl_ms())
    # a whole 12k-token prefill stalls every running decode for one long step: chunks do not
    assert itl["on"] < 0.5 * itl["off"]
    # and with V1's per-request chunk cap, short prompts no longer wait behind a long one
    assert ttft["on"] < 0.5 * ttft["off"]


@pytest.mark.parametrize("change", [{"kv_cache_dtype": "fp8"}, {"max_model_len": 4096}])
def test_fp8_kv_or_shorter_context_more_blocks_fewer_preemptions(change: dict) -> None:  # type: ignore[type-arg]
    # a KV pool too small for the load (the seed's "near 100% with frequent preemptions")
    # (without chunked prefill vLLM profiles max_model_len tokens, so a shorter context
    # leaves more memory to the KV cache)
    tight = SEED.model_copy(
        update={
            "gpu_memory_utilization": 0.35,
            "max_model_len": 32768,
            "enable_chunked_prefill": False,
            "max_num_batched_tokens": None,
        }
    )
    plan = lengths_plan([(1024, 1024)] * 100, [0.0] * 100)
    before = simulate(tight, plan)
    after = simulate(tight.model_copy(update=change), plan)
    assert after.eng.mem.num_gpu_blocks > before.eng.mem.num_gpu_blocks
    assert before.eng.counters.preemptions > 0
    assert after.eng.counters.preemptions < before.eng.counters.preemptions


def test_preempted_requests_still_get_every_token() -> None:
    tight = SEED.model_copy(update={"gpu_memory_utilization": 0.22, "max_model_len": 8192})
    plan = lengths_plan([(1024, 1024)] * 120, [0.0] * 120)
    sim = simulate(tight, plan)
    assert sim.eng.counters.preemptions > 0
    assert all(r.output_tokens == 1024 and len(r.chunk_ns) == 1024 for r in sim.records)
    assert all(
        b >= a for r in sim.records for a, b in zip(r.chunk_ns, r.chunk_ns[1:], strict=False)
    )
    assert sim.eng.pool.used == 0  # every block came back


def test_prefix_caching_hits_shared_prefixes(tmp_path: Path) -> None:
    cfg = BenchConfig(
        dataset_name="prefix",
        prefix_len=512,
        prefix_num_groups=2,
        num_prompts=40,
        request_rate=4,
        random_input_len=64,
        random_output_len=16,
    )
    on = run_offline(cfg, SEED, tmp_path / "on")
    off = run_offline(
        cfg, SEED.model_copy(update={"enable_prefix_caching": False}), tmp_path / "off"
    )
    assert on.server and on.server.summary["prefix_cache_hit_rate"] > 0.5
    assert (on.summary.ttft.mean or 0) < (off.summary.ttft.mean or 0)


def test_client_concurrency_cap_is_respected() -> None:
    plan = lengths_plan([(256, 64)] * 50, [0.0] * 50)
    sim = simulate(SEED, plan, cap=4)
    events = sorted([(r.send_ns, 1) for r in sim.records] + [(r.end_ns, -1) for r in sim.records])
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    assert peak <= 4


def test_prefill_and_decode_histograms_split_each_request_after_its_queue(
    tmp_path: Path,
) -> None:
    cfg = BenchConfig(
        num_prompts=40, request_rate=20, random_input_len=512, random_output_len=24, seed=2
    )
    run_offline(cfg, SEED, tmp_path)
    last = read_server_series(tmp_path)[-1].histograms
    e2e, queue = last["e2e_seconds"], last["queue_seconds"]
    prefill, decode = last["prefill_seconds"], last["decode_seconds"]
    assert prefill.count == decode.count == e2e.count == 40
    assert prefill.sum > 0 and decode.sum > prefill.sum  # 24 decode steps outlast one prefill
    # vLLM V1's phases: queued → scheduled → first token → last token, nothing in between
    assert queue.sum + prefill.sum + decode.sum == pytest.approx(e2e.sum, rel=1e-9)
