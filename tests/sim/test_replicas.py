"""`sim run --replicas N --router POLICY`: N simulated engines behind the gateway's routing
code on one virtual clock — the cache hits routing buys are counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.cli import main
from servetune.results.conversation import MultiturnConfig
from servetune.results.io import read_records, read_run_result
from servetune.results.schema import BenchConfig
from servetune.routing.config import RoutingConfig
from servetune.sim.config import EngineConfig
from servetune.sim.memory import plan_memory
from servetune.sim.offline import simulate
from servetune.sim.offline_plan import workload_plan
from servetune.sim.offline_run import OfflineRun
from servetune.sim.replicas import ReplicaRuns, run_replicas

# 64 long shared prefixes, more than one L4 replica's KV pool holds: spread over all four
# (round-robin) each replica must hold all 64 and evicts; kept together (prefix, score) each
# holds its quarter
WORKLOAD = ["--gpu", "L4", "--dataset-name", "prefix", "--prefix-len", "2048",
            "--prefix-num-groups", "64", "--random-input-len", "64", "--random-output-len", "32",
            "--num-prompts", "800", "--request-rate", "6", "--no-progress"]  # fmt: skip


def run(tmp: Path, policy: str, replicas: int = 4) -> dict:  # type: ignore[type-arg]
    out = tmp / policy
    flags = ["--replicas", str(replicas), "--router", policy, "--result-dir", str(out)]
    assert main(["sim", "run", *WORKLOAD, *flags]) == 0
    result = read_run_result(out)
    records = read_records(out)
    assert sorted(r.id for r in records) == list(range(800))  # every request, once
    routing = (result.target.simulated or {})["routing"]
    assert sum(p["requests"] for p in routing["per_replica"]) == 800
    return {"routing": routing, "ttft_p50": result.summary.ttft.p50}


def test_routing_by_prefix_buys_cache_hits_that_round_robin_loses(tmp_path: Path) -> None:
    rr = run(tmp_path, "round-robin")
    assert [p["requests"] for p in rr["routing"]["per_replica"]] == [200] * 4
    for policy in ("prefix", "score"):
        got = run(tmp_path, policy)
        hit, base = got["routing"]["prefix_cache_hit_rate"], rr["routing"]["prefix_cache_hit_rate"]
        assert hit > base + 0.15, (policy, hit, base)
        assert got["ttft_p50"] < rr["ttft_p50"]
        # 64 prefixes over 4 replicas: each holds some (the load bound on in-flight counts is
        # tested in tests/routing)
        counts = [p["requests"] for p in got["routing"]["per_replica"]]
        assert min(counts) >= 80, counts


def test_one_replica_behind_a_router_is_the_single_engine_run(tmp_path: Path) -> None:
    one = tmp_path / "one"
    assert main(["sim", "run", *WORKLOAD, "--num-prompts", "100", "--result-dir", str(one)]) == 0
    routed = tmp_path / "routed"
    assert main(["sim", "run", *WORKLOAD, "--num-prompts", "100", "--replicas", "1",
                 "--router", "score", "--result-dir", str(routed)]) == 0  # fmt: skip
    a, b = read_records(one), read_records(routed)
    assert [r.first_ns for r in a] == [r.first_ns for r in b]


def test_replicas_with_a_shared_client_cap_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--replicas", "2", "--max-concurrency", "4", "--result-dir", str(tmp_path / "x")]
    assert main(["sim", "run", "--num-prompts", "5", "--no-progress", *flags]) == 2
    err = capsys.readouterr().err
    assert "--max-concurrency with --replicas" in err
    assert main(["sim", "run", "--num-prompts", "5", "--replicas", "0", "--no-progress",
                 "--result-dir", str(tmp_path / "y")]) == 2  # fmt: skip
    assert "--replicas must be ≥ 1" in capsys.readouterr().err


def _sessions(sessions: int, rate: float, think: float = 2.0) -> BenchConfig:
    return BenchConfig(
        dataset_name="multiturn",
        random_input_len=200,
        random_output_len=120,
        num_prompts=sessions,
        request_rate=rate,
        seed=5,
        multiturn=MultiturnConfig(
            turns_min=6,
            turns_max=6,
            system_prompt_len=1024,
            system_prompts=8,
            think_time_s=think,
            think_dist="constant",
        ),
    )


def _replicas(cfg: BenchConfig, engine: EngineConfig, n: int, policy: str) -> ReplicaRuns:
    r = engine.resolve()
    plan, _tok, _exact = workload_plan(cfg)
    return run_replicas(plan, cfg, r, plan_memory(r), n, RoutingConfig(policy=policy))  # type: ignore[arg-type]


def test_sessions_run_closed_loop_across_replicas() -> None:
    """Round-robin moves a session's every turn to another replica; each turn is still sent
    when the answer before it reached the client (on the other replica) plus the think time,
    and hits only on what that replica holds: the shared system prompt, and the conversation
    as far as the session's last turn there had it."""
    cfg = _sessions(24, 2.0)
    done = _replicas(cfg, EngineConfig(max_model_len=8192), 3, "round-robin")
    recs = done.records
    assert len(recs) == 24 * 6 and all(r.ok for r in recs)
    by = {(r.session, r.turn): r for r in recs}
    hops = 0
    for (sid, turn), rec in by.items():
        if turn == 1:
            continue
        prev = by[(sid, turn - 1)]
        assert prev.end_ns is not None
        assert rec.scheduled_ns == prev.end_ns + 2 * 10**9  # closed loop, across replicas
        assert rec.send_ns >= rec.scheduled_ns
        here = done.routed.replica[rec.id]
        if here != done.routed.replica[prev.id]:
            hops += 1
            held = 1024  # the system prompt (64 full blocks)
            for k in range(turn - 2, 0, -1):
                old = by[(sid, k)]
                if done.routed.replica[old.id] == here:
                    assert old.prompt_tokens is not None and old.output_tokens is not None
                    held = max(held, (old.prompt_tokens + old.output_tokens - 1) // 16 * 16)
                    break
            assert (rec.cached_tokens or 0) <= held
    assert hops >= 24 * 5 // 3  # many turns moved (each has a 2 in 3 chance)
    # session affinity: the whole conversation hits, turn after turn
    aff = _replicas(cfg, EngineConfig(max_model_len=8192), 3, "session")
    homes: dict[str, set[int]] = {}
    for rec in aff.records:
        homes.setdefault(rec.session or "", set()).add(aff.routed.replica[rec.id])
        if rec.turn and rec.turn > 1:
            prev = {(r.session, r.turn): r for r in aff.records}[(rec.session, rec.turn - 1)]
            assert prev.prompt_tokens is not None and prev.output_tokens is not None
            held = (prev.prompt_tokens + prev.output_tokens - 1) // 16 * 16
            assert rec.cached_tokens == held
    assert all(len(h) == 1 for h in homes.values())
    assert len({next(iter(h)) for h in homes.values()}) == 3


def test_one_replica_behind_a_router_runs_sessions_as_the_single_engine() -> None:
    cfg = _sessions(10, 1.0, think=0.5)
    engine = EngineConfig(max_model_len=8192)
    alone = simulate(cfg, engine)
    done = _replicas(cfg, engine, 1, "score")
    plan, _tok, _exact = workload_plan(cfg)
    r = engine.resolve()
    single = OfflineRun(plan, cfg, r, plan_memory(r))
    single.run()
    a = sorted(single.records, key=lambda rec: rec.id)
    assert [(x.id, x.send_ns, x.first_ns, x.end_ns, x.cached_tokens) for x in a] == [
        (x.id, x.send_ns, x.first_ns, x.end_ns, x.cached_tokens) for x in done.records
    ]
    assert alone.summary.completed == len(done.records) == 60


def test_session_aware_routing_buys_hits_and_ttft_on_sessions_under_kv_pressure(
    tmp_path: Path,
) -> None:
    """Sessions with shared system prompts on four L4 replicas: spread round-robin, every
    replica holds every live conversation and evicts; session, prefix and score keep a
    conversation where it is cached."""
    flags = ["--gpu", "L4", "--dataset-name", "multiturn", "--multiturn-turns", "8",
             "--multiturn-system-len", "1024", "--multiturn-system-prompts", "8",
             "--multiturn-think-time", "5", "--random-input-len", "200",
             "--random-output-len", "150", "--num-prompts", "120", "--request-rate", "1.5",
             "--replicas", "4", "--no-progress"]  # fmt: skip
    got = {}
    for policy in ("round-robin", "session", "prefix", "score"):
        out = tmp_path / policy
        assert main(["sim", "run", *flags, "--router", policy, "--result-dir", str(out)]) == 0
        result = read_run_result(out)
        assert result.summary.completed == 960
        routing = (result.target.simulated or {})["routing"]
        assert result.workload is not None and result.summary.sessions is not None
        later = result.summary.sessions.later_turns
        assert later is not None
        got[policy] = (routing["prefix_cache_hit_rate"], later.ttft_p50, routing)
    rr_hit, rr_ttft, rr = got["round-robin"]
    assert rr["per_replica"][0]["prefix_cache_query_tokens"] > 0
    for policy in ("session", "prefix", "score"):
        hit, ttft, _ = got[policy]
        assert hit > rr_hit + 0.15, (policy, hit, rr_hit)
        assert ttft < 0.6 * rr_ttft, (policy, ttft, rr_ttft)
