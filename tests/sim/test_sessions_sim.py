"""The simulated engine on sessions and traces: each answer says how many prompt tokens came
from the prefix cache; a conversation's later turns hit on everything before them (the answers
included, as vLLM caches every full block it computed); the virtual clock and the real-time
server agree request by request; a trace's reuse is reproduced; under KV pressure a sweep's
higher levels evict more and hit less."""

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path

import pytest

from servetune.loadgen.bench import bench
from servetune.results.conversation import MultiturnConfig
from servetune.results.io import read_records, read_run_result
from servetune.results.record import RequestRecord
from servetune.results.schema import BenchConfig
from servetune.results.sweep_schema import SweepConfig
from servetune.sim.config import EngineConfig
from servetune.sim.embedded import start_embedded
from servetune.sim.offline import run_offline, simulate
from servetune.sweep.runner import run_sweep
from servetune.sweep.targets import offline_runner

DATA = Path(__file__).parents[1] / "data" / "workloads"
B = 16


def _sessions_cfg(**kw: object) -> BenchConfig:
    base: dict[str, object] = dict(
        dataset_name="multiturn",
        random_input_len=60,
        random_output_len=40,
        num_prompts=8,
        request_rate=4.0,
        seed=21,
        multiturn=MultiturnConfig(
            turns_min=3,
            turns_max=3,
            system_prompt_len=200,
            system_prompts=2,
            think_time_s=0.1,
            think_dist="constant",
        ),
    )
    base.update(kw)
    return BenchConfig(**base)  # type: ignore[arg-type]


def _by_turn(recs: list[RequestRecord]) -> dict[tuple[str, int], RequestRecord]:
    return {(r.session or "", r.turn or 0): r for r in recs}


def _expected_cached(recs: list[RequestRecord]) -> dict[tuple[str, int], int]:
    """What an unbounded cache serves each later turn: the previous prompt and all of its
    answer but the last token (never computed), in full blocks, never the whole prompt."""
    by = _by_turn(recs)
    out = {}
    for (sid, turn), r in by.items():
        if turn > 1:
            prev = by[(sid, turn - 1)]
            assert prev.prompt_tokens is not None and prev.output_tokens is not None
            assert r.prompt_tokens is not None
            held = (prev.prompt_tokens + prev.output_tokens - 1) // B * B
            out[(sid, turn)] = min(held, (r.prompt_tokens - 1) // B * B)
    return out


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_later_turns_hit_on_the_conversation_and_both_clocks_agree(
    tmp_path: Path, endpoint: str
) -> None:
    cfg = _sessions_cfg(endpoint=endpoint)
    run_offline(cfg, EngineConfig(max_model_len=4096), tmp_path / "offline")
    offline = read_records(tmp_path / "offline")
    srv = start_embedded(EngineConfig(max_model_len=4096))
    try:
        live = cfg.model_copy(update={"base_url": srv.base_url})
        result = bench(live, tmp_path / "live", progress=False, metrics_interval_s=0.5)
    finally:
        srv.stop()
    real = read_records(tmp_path / "live")
    assert len(offline) == len(real) == 24
    assert all(r.ok and r.cached_tokens is not None for r in offline + real)
    for recs in (offline, real):
        for key, want in _expected_cached(recs).items():
            assert _by_turn(recs)[key].cached_tokens == want, key
        # a first turn hits on its system prompt once an earlier session has sent it
        firsts = sorted((r for r in recs if r.turn == 1), key=lambda r: r.scheduled_ns)
        assert firsts[0].cached_tokens == 0
        assert any((r.cached_tokens or 0) >= 192 for r in firsts[2:])
    a, b = _by_turn(offline), _by_turn(real)
    assert a.keys() == b.keys()
    for key in a:
        assert (a[key].prompt_tokens, a[key].cached_tokens) == (
            b[key].prompt_tokens,
            b[key].cached_tokens,
        ), key
    # the summary: the client-seen rate beside the server's counters and the implied rate
    cache = result.summary.cache
    assert cache is not None and cache.requests_reporting == 24
    assert result.server is not None and result.workload is not None
    server = result.server.summary["prefix_cache_hit_rate"]
    assert cache.hit_rate == pytest.approx(server, abs=0.03)
    assert cache.hit_rate == pytest.approx(result.workload.implied_prefix_hit_rate, abs=0.05)
    assert cache.hit_rate_later_turns is not None and cache.hit_rate_later_turns > 0.8
    ss = result.summary.sessions
    assert ss is not None and ss.sessions == 8 and ss.completed == 8 and ss.ended_early == 0
    assert [t.turn for t in ss.by_turn] == ["1", "2", "3"]
    assert ss.first_turn is not None and ss.later_turns is not None
    assert ss.first_turn.requests == 8 and ss.later_turns.requests == 16
    assert ss.session_ttft_mean_p50 is not None


def test_a_mooncake_trace_reuse_is_reproduced_on_the_engine() -> None:
    cfg = BenchConfig(
        dataset_name="trace", dataset_path=str(DATA / "mooncake_tiny.jsonl"), num_prompts=10**9
    )
    result = simulate(cfg, EngineConfig(max_model_len=8192))
    assert result.summary.completed == 6
    cache = result.summary.cache
    assert cache is not None and cache.hit_rate is not None
    # from the hash ids: requests 1 and 3 reuse 1024 and 1200 tokens of request 0's blocks,
    # request 4 the 512 of block 4 (request 2's): 2736 of 5536 prompt tokens
    assert cache.hit_rate == pytest.approx(2736 / 5536, abs=0.02)
    assert result.workload is not None
    assert result.workload.implied_prefix_hit_rate == pytest.approx(2736 / 5536, abs=0.02)


def test_under_kv_pressure_higher_levels_evict_more_and_hit_less(tmp_path: Path) -> None:
    """A sweep of session rates on a pool of ~24k tokens: more sessions live at once, each
    one's conversation is evicted during its think time, and its next turn misses."""
    mt = MultiturnConfig(
        turns_min=4, turns_max=8, system_prompt_len=512, system_prompts=4, think_time_s=3.0
    )
    bench_cfg = BenchConfig(
        dataset_name="multiturn",
        multiturn=mt,
        random_input_len=200,
        random_output_len=100,
        num_prompts=40,
        seed=1,
    )
    cfg = SweepConfig(bench=bench_cfg, mode="rate", request_rates=[0.5, 2.0, 8.0])
    engine = EngineConfig(gpu_memory_utilization=0.215, max_model_len=8192)
    sweep = run_sweep(cfg, tmp_path, offline_runner(engine), echo=lambda _: None)
    rows = sweep.measured_rows()
    assert len(rows) == 3
    hit = [row.server.prefix_cache_hit_rate for row in rows if row.server is not None]
    assert len(hit) == 3 and all(h is not None for h in hit)
    evicted = []
    client = []
    for row in rows:
        run = read_run_result(tmp_path / row.level_dir)
        assert run.server is not None
        evicted.append(run.server.summary["sim"]["prefix_cache_evicted_blocks"])
        assert run.summary.cache is not None and run.summary.cache.hit_rate is not None
        client.append(run.summary.cache.hit_rate)
        assert run.workload is not None  # what an unbounded cache would serve: ~0.85
        assert run.workload.implied_prefix_hit_rate == pytest.approx(0.85, abs=0.05)
    assert evicted[0] < evicted[1] < evicted[2]
    assert hit[0] > hit[1] > hit[2]  # type: ignore[operator]
    assert client[0] > 0.8 and client[2] < 0.6
    # per session and per turn: the later turns lose their hits as the pool churns
    deep = read_run_result(tmp_path / rows[2].level_dir).summary.sessions
    assert deep is not None and deep.later_turns is not None
    assert (deep.later_turns.hit_rate or 0.0) < client[0]


def test_turns_of_a_session_wait_for_the_answer_on_the_virtual_clock(tmp_path: Path) -> None:
    cfg = _sessions_cfg(num_prompts=4)
    run_offline(cfg, EngineConfig(max_model_len=4096), tmp_path)
    recs = read_records(tmp_path)
    by: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in recs:
        by[r.session or ""].append(r)
    for turns in by.values():
        turns.sort(key=lambda r: r.turn or 0)
        assert [r.turn for r in turns] == [1, 2, 3]
        for prev, nxt in itertools.pairwise(turns):
            assert nxt.scheduled_ns == prev.end_ns + 100_000_000
            assert nxt.prompt_tokens == (prev.prompt_tokens or 0) + (prev.output_tokens or 0) + 60
