"""The routing policies, as pure code: keys, rendezvous, the prefix index, each policy."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from servetune.routing.config import RoutingConfig
from servetune.routing.keys import prompt_blocks, stable_hash
from servetune.routing.policies import Balancer, queue_depth
from servetune.routing.prefix_index import PrefixIndex

NAMES = [f"http://127.0.0.1:{8000 + i}/v1" for i in range(4)]


class Req:
    def __init__(self, text: str, session: str | None = None) -> None:
        self.text = text.encode()
        self.session = session

    def session_key(self) -> int | None:
        return None if self.session is None else stable_hash(self.session.encode())

    def blocks(self, chunk: int) -> list[int]:
        return prompt_blocks(self.text, chunk)


def choose(b: Balancer, r: Req, inflight: list[int], down: set[int] = frozenset()) -> int:  # type: ignore[assignment]
    healthy = [i for i in range(len(b.names)) if i not in down]
    return b.choose(r, healthy, inflight, [None] * len(b.names), healthy)


def test_block_keys_are_chained_and_stable_across_processes() -> None:
    a = prompt_blocks(b"x" * 64 + b"y" * 64 + b"z" * 64, 64)
    b = prompt_blocks(b"x" * 64 + b"q" * 64 + b"z" * 64, 64)
    assert len(a) == 3 and a[0] == b[0] and a[1] != b[1] and a[2] != b[2]  # z differs by prefix
    assert prompt_blocks(b"x" * 63, 64) == []
    code = "from servetune.routing.keys import prompt_blocks as p, stable_hash as h;" \
        "print(p(b'hello world ' * 20, 16), h(b'session-1'))"  # fmt: skip
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outs) == 1


def test_prefix_index_is_lru_bounded_and_keeps_prefixes() -> None:
    idx = PrefixIndex(capacity=10)
    first = list(range(100, 108))
    idx.add(first)
    assert idx.match(first) == 8 and idx.match([100, 101, 999]) == 2
    idx.add(list(range(200, 206)))  # 14 blocks > 10: the oldest (first's tail) go first
    assert len(idx) == 10
    assert idx.match(first) == 4  # what is left of a prompt is its prefix
    assert idx.match(list(range(200, 206))) == 6


def test_session_affinity_survives_an_upstream_failure_and_comes_back() -> None:
    b = Balancer(RoutingConfig(policy="session"), NAMES)
    sessions = [f"s{i}" for i in range(200)]
    home = {s: choose(b, Req("hi", s), [0] * 4) for s in sessions}
    assert len(set(home.values())) == 4  # spread over all
    assert all(choose(b, Req("again", s), [5, 0, 9, 1]) == home[s] for s in sessions)
    dead = 2
    moved = {}
    for s in sessions:
        moved[s] = choose(b, Req("x", s), [0] * 4, {dead})
        if home[s] == dead:
            assert moved[s] != dead and b.reason == "rebalanced"
        else:
            assert moved[s] == home[s] and b.reason == "affinity"  # only its sessions move
    again = {s: choose(b, Req("x", s), [0] * 4, {dead}) for s in sessions}
    assert again == moved  # the moved ones stay together on their second choice
    assert {s: choose(b, Req("x", s), [0] * 4) for s in sessions} == home


@pytest.mark.parametrize("policy", ["session", "prefix", "score"])
def test_two_replicas_sharing_nothing_route_one_session_alike(policy: str) -> None:
    system = "You are a careful assistant. " * 20
    a = Balancer(RoutingConfig(policy=policy), NAMES)
    b = Balancer(RoutingConfig(policy=policy), NAMES)
    # each replica has seen other traffic first (other sessions with the same system prompt)
    for k in range(12):
        choose(a, Req(system + f"other a {k}", f"a{k}"), [0] * 4)
        choose(b, Req(system + f"other b {k} " * 3, f"b{k}"), [0] * 4)
    history = system
    picks = []
    for turn in range(8):
        history += f" user turn {turn} asks something new. assistant answers at length. " * 3
        via = a if turn % 2 == 0 else b
        picks.append(choose(via, Req(history, "the-session"), [0] * 4))
    assert len(set(picks)) == 1, picks


def test_prefix_policy_follows_the_longest_match() -> None:
    b = Balancer(RoutingConfig(policy="prefix"), NAMES)
    doc = "a long shared document. " * 40
    first = choose(b, Req(doc + "question one"), [0] * 4)
    assert choose(b, Req(doc + "question two"), [0, 0, 0, 0]) == first
    other = choose(b, Req("something else entirely " * 40), [0] * 4)
    assert b.reason == "prefix_miss" and isinstance(other, int)


def test_the_load_bound_holds_for_a_hot_prefix() -> None:
    """Every request shares one long prompt prefix: without the bound all would pile onto
    the first upstream; with it, no upstream's count passes max(c·mean, mean + slack)."""
    for policy in ("prefix", "score"):
        cfg = RoutingConfig(policy=policy, load_bound=1.25, load_slack=1)
        b = Balancer(cfg, NAMES)
        hot = "the same system prompt for everyone. " * 50
        inflight = [0] * 4
        for k in range(400):
            i = choose(b, Req(hot + f"q{k}"), inflight)
            inflight[i] += 1
            total = sum(inflight)
            mean = total / 4
            assert max(inflight) <= max(1.25 * mean, mean + 1) + 1e-9, (policy, inflight)
            if k % 3 == 2:  # some finish
                inflight[max(range(4), key=inflight.__getitem__)] -= 1
        assert min(inflight) > 0


def test_score_weighs_queue_and_kv_against_prefix() -> None:
    b = Balancer(RoutingConfig(policy="score", load_slack=100), NAMES)
    doc = "context " * 200
    home = choose(b, Req(doc + "a"), [0] * 4)
    healthy = list(range(4))
    # the cached one is deep in queue and its KV nearly full: another takes it
    depth = [0.0] * 4
    depth[home] = 40.0
    kv: list[float | None] = [0.1] * 4
    kv[home] = 0.99
    pick = b.choose(Req(doc + "b"), healthy, [0] * 4, [None] * 4, healthy, depth, kv)
    assert pick != home
    # lightly loaded: the prefix wins (a replica with nothing of it cached, idle, loses)
    b = Balancer(RoutingConfig(policy="score", load_slack=100), NAMES)
    home = choose(b, Req(doc + "a"), [0] * 4)
    depth = [0.0] * 4
    depth[home] = 1.0
    kv = [0.1] * 4
    kv[home] = 0.2
    pick = b.choose(Req(doc + "c"), healthy, [0] * 4, [None] * 4, healthy, depth, kv)
    assert pick == home and b.reason == "score"


def test_score_keeps_a_session_beside_running_decodes_and_moves_it_off_a_queue() -> None:
    """Two replicas, a conversation cached on one (its system prompt on both): requests
    *running* there (a decode or two in the batch, as the engine's last /metrics said) do not
    move the next turn to the idle one; requests *waiting* there do. Fails on the depth that
    counted every request in flight (6 running against 0 moved the session)."""
    names = NAMES[:2]
    system = "system prompt " * 40
    history = system + "turn one of this conversation and its answer " * 12
    b = Balancer(RoutingConfig(policy="score"), names)
    healthy = [0, 1]
    home = b.choose(Req(history, "s"), healthy, [0, 0], [None, None], healthy)
    other = 1 - home
    b.choose(Req(system + "another session", "t"), [other], [0, 0], [None, None], healthy)
    inflight = [0, 0]
    inflight[home] = 6
    running: list[float | None] = [0.0, 0.0]
    running[home] = 6.0
    kv: list[float | None] = [0.01, 0.01]
    nxt = Req(history + "turn two", "s")
    pick = b.choose(nxt, healthy, inflight, [None, None], healthy, [0.0, 0.0], kv, running)
    assert pick == home and b.reason == "score"
    # 12 in flight and the engine ran 6 of them: 6 wait ahead of this turn (sent since the
    # read, or beyond its batch): a half-cached prompt on the idle one is the better bet
    inflight[home] = 12
    pick = b.choose(nxt, healthy, inflight, [None, None], healthy, [0.0, 0.0], kv, running)
    assert pick == other
    # the engine's own waiting queue says so too (another gateway's requests)
    inflight[home] = 0
    depth = [0.0, 0.0]
    depth[home] = 6.0
    pick = b.choose(nxt, healthy, inflight, [None, None], healthy, depth, kv, running)
    assert pick == other


def test_queue_depth_counts_what_waits() -> None:
    assert queue_depth(3, 0.0, 3.0) == 0.0  # all running
    assert queue_depth(5, 0.0, 3.0) == 2.0  # two sent since the read, or beyond the batch
    assert queue_depth(1, 4.0, 8.0) == 4.0  # the engine's queue (other routers' requests)
    assert queue_depth(2, 0.0, None) == 2.0  # never read: all in flight


def test_round_robin_cycles_over_the_eligible() -> None:
    b = Balancer(RoutingConfig(policy="round-robin"), NAMES)
    got = [b.choose(None, [0, 1, 2, 3], [0] * 4, [None] * 4, []) for _ in range(8)]
    assert got == [0, 1, 2, 3, 0, 1, 2, 3]
    assert b.choose(None, [0, 2], [0] * 4, [None] * 4, []) == 0
    assert b.choose(None, [0, 2], [0] * 4, [None] * 4, []) == 2


def test_a_bad_routing_config_is_refused_with_its_range() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="policy"):
        RoutingConfig(policy="random")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="load_bound"):
        RoutingConfig(load_bound=0.5)
    with pytest.raises(ValidationError, match="at least one weight"):
        RoutingConfig.model_validate({"weights": {"prefix": 0, "queue": 0, "kv": 0}})
