"""`sim run --replicas N --router POLICY`: N simulated engines behind the gateway's routing
code on one virtual clock — the cache hits routing buys are counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.cli import main
from servetune.results.io import read_records, read_run_result

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


def test_sessions_on_replicas_are_refused_not_approximated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--dataset-name", "multiturn", "--replicas", "2", "--router", "session"]
    assert main(["sim", "run", "--num-prompts", "5", "--no-progress", *flags,
                 "--result-dir", str(tmp_path / "s")]) == 2  # fmt: skip
    assert "closed-loop" in capsys.readouterr().err
