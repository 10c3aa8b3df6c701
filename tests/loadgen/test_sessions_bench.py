"""Sessions against a scripted server (a real process) that keeps what it was sent: each later
turn holds the conversation so far with the answers as the server returned them, is sent after
the previous answer ended plus the think time, and carries the session id in the header and the
``user`` field; the context cap truncates or ends a session; a failed turn ends its session."""

from __future__ import annotations

import itertools
import json
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servetune.loadgen.bench import bench
from servetune.results.conversation import MultiturnConfig
from servetune.results.io import read_records
from servetune.results.record import RequestRecord
from servetune.results.schema import BenchConfig

Factory = Callable[..., Any]
WORDS_PER_ANSWER = 6


def _cfg(url: str, **kw: Any) -> BenchConfig:
    base: dict[str, Any] = dict(
        base_url=url,
        dataset_name="multiturn",
        random_input_len=12,
        random_output_len=WORDS_PER_ANSWER,
        num_prompts=6,
        request_rate=20.0,
        seed=11,
        multiturn=MultiturnConfig(
            turns_min=3,
            turns_max=3,
            system_prompt_len=20,
            system_prompts=2,
            think_time_s=0.05,
            think_dist="constant",
        ),
    )
    base.update(kw)
    return BenchConfig(**base)


def _seen(srv: Any) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{srv.port}/scripted/requests"
    with urllib.request.urlopen(url, timeout=10) as resp:
        got: list[dict[str, Any]] = json.loads(resp.read())
    return got


def _by_session(recs: list[RequestRecord]) -> dict[str, list[RequestRecord]]:
    out: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in recs:
        assert r.session is not None and r.turn is not None
        out[r.session].append(r)
    for v in out.values():
        v.sort(key=lambda r: r.turn or 0)
    return out


def _answer(n: int) -> str:
    from servetune.testserver.server import _WORDS

    return "".join(_WORDS[k % 64] for k in range(n))


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_turns_carry_the_conversation_and_the_session_id(
    scripted: Factory, tmp_path: Path, endpoint: str
) -> None:
    srv = scripted({"ttft_ms": 5, "tpot_ms": 1, "record_writes": True})
    run = bench(
        _cfg(srv.base_url, endpoint=endpoint), tmp_path, progress=False, scrape_metrics=False
    )
    assert run.status == "complete"
    recs = read_records(tmp_path)
    assert len(recs) == 18 and all(r.ok for r in recs)
    sessions = _by_session(recs)
    assert len(sessions) == 6
    seen = _seen(srv)
    assert len(seen) == 18
    by_user: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in seen:
        assert s["headers"]["x-session-id"] == s["user"]
        by_user[s["user"]].append(s)
    assert set(by_user) == set(sessions)
    answer = _answer(WORDS_PER_ANSWER)
    for sid, turns in sessions.items():
        assert [r.turn for r in turns] == [1, 2, 3]
        assert {r.session_turns for r in turns} == {3}
        sent = by_user[sid]  # in arrival order: one turn at a time
        if endpoint == "chat":
            msgs = [s["messages"] for s in sent]
            assert msgs[0][0]["role"] == "system" and len(msgs[0]) == 2
            for a, b in itertools.pairwise(msgs):
                # the next turn: everything before + the answer as returned + a new message
                assert b[: len(a)] == a
                assert b[len(a)] == {"role": "assistant", "content": answer}
                assert b[len(a) + 1]["role"] == "user" and len(b) == len(a) + 2
        else:
            prompts = [s["prompt"] for s in sent]
            for a, b in itertools.pairwise(prompts):
                assert b.startswith(a + answer + "\n") and len(b) > len(a + answer) + 1
        for prev, nxt in itertools.pairwise(turns):
            # closed loop: due when the previous answer ended, plus the think time
            assert nxt.scheduled_ns == prev.end_ns + 50_000_000
            assert nxt.send_ns >= prev.end_ns
            assert nxt.planned_input_len > prev.planned_input_len
    # open loop across sessions: the first turns start at the planned session times
    firsts = sorted(t[0].scheduled_ns for t in sessions.values())
    assert firsts[0] == 0 and firsts[-1] > 0


def test_header_name_and_none(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({"record_writes": True})
    mt = MultiturnConfig(turns_min=2, turns_max=2, session_header="X-Conversation")
    bench(
        _cfg(srv.base_url, multiturn=mt, num_prompts=2),
        tmp_path / "a",
        progress=False,
        scrape_metrics=False,
    )
    seen = _seen(srv)
    assert all(s["headers"]["x-conversation"] == s["user"] for s in seen)
    assert not any("x-session-id" in s["headers"] for s in seen)
    srv2 = scripted({"record_writes": True})
    none = mt.model_copy(update={"session_header": ""})
    bench(
        _cfg(srv2.base_url, multiturn=none, num_prompts=2),
        tmp_path / "b",
        progress=False,
        scrape_metrics=False,
    )
    seen2 = _seen(srv2)
    assert len(seen2) == 4 and all(s["user"] for s in seen2)
    assert not any(k.startswith("x-") for s in seen2 for k in s["headers"])


def test_the_context_cap_truncates_as_a_client_would(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({"record_writes": True})
    # system 20 + turns of 12 + answers of 6: prompts 32, 50, 68, 86, …; a cap of 80 with
    # max_tokens 6 keeps the prompt ≤ 74: from turn 4 the oldest exchange goes
    mt = MultiturnConfig(
        turns_min=6, turns_max=6, system_prompt_len=20, max_context=80, on_overflow="truncate"
    )
    bench(
        _cfg(srv.base_url, multiturn=mt, num_prompts=2),
        tmp_path / "t",
        progress=False,
        scrape_metrics=False,
    )
    recs = read_records(tmp_path / "t")
    assert len(recs) == 12 and all(r.ok for r in recs)
    for turns in _by_session(recs).values():
        assert [r.dropped_turns or 0 for r in turns][:3] == [0, 0, 0]
        assert (turns[3].dropped_turns or 0) >= 1
        assert all(r.planned_input_len + 6 <= 80 for r in turns)
        assert all((r.prompt_tokens or 0) + 6 <= 80 for r in turns)
    by_user: dict[str, list[str]] = defaultdict(list)
    for s in _seen(srv):
        by_user[s["user"]].append(s["prompt"])
    for prompts in by_user.values():
        system = prompts[0].split("\n")[0]
        assert all(p.startswith(system + "\n") for p in prompts)  # the system prompt stays
        assert not prompts[4].startswith(prompts[2])  # older exchanges left out
    end = mt.model_copy(update={"on_overflow": "end"})
    bench(
        _cfg(srv.base_url, multiturn=end, num_prompts=2),
        tmp_path / "e",
        progress=False,
        scrape_metrics=False,
    )
    ended = read_records(tmp_path / "e")
    assert len(ended) == 6  # three turns fit, the fourth would not: each session ends there
    assert {r.turn for r in ended} == {1, 2, 3}


def test_a_failed_turn_ends_its_session(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({"fail_every": 4})
    run = bench(
        _cfg(srv.base_url, max_failure_rate=1.0), tmp_path, progress=False, scrape_metrics=False
    )
    recs = read_records(tmp_path)
    failed = [r for r in recs if r.status == "failed"]
    assert failed
    sessions = _by_session(recs)
    for turns in sessions.values():
        bad = [r.turn for r in turns if r.status == "failed"]
        if bad:
            assert turns[-1].turn == bad[0]  # nothing sent after the failure
    assert len(recs) < 18
    assert run.summary.sessions is not None and run.summary.sessions.ended_early >= 1


def test_sessions_over_two_workers_and_a_concurrency_cap(scripted: Factory, tmp_path: Path) -> None:
    """Sessions are split whole between the worker processes (one clock), and the cap counts
    requests in flight: a turn waits for a slot, its wait kept apart from the client's lag."""
    srv = scripted({"ttft_ms": 20, "tpot_ms": 2, "record_writes": True})
    cfg = _cfg(srv.base_url, workers=2, max_concurrency=2, num_prompts=8, request_rate=50.0)
    run = bench(cfg, tmp_path, progress=False, scrape_metrics=False)
    assert run.status == "complete" and run.client_health.workers == 2
    recs = read_records(tmp_path)
    assert len(recs) == 24 and all(r.ok for r in recs)
    sessions = _by_session(recs)
    assert len(sessions) == 8
    for turns in sessions.values():
        assert len({r.worker for r in turns}) == 1  # a session stays on its worker
        for prev, nxt in itertools.pairwise(turns):
            assert nxt.scheduled_ns == prev.end_ns + 50_000_000
    assert {r.worker for r in recs} == {0, 1}
    # at most 2 in flight (one per worker), and some turns waited for their slot
    events = sorted([(r.send_ns, 1) for r in recs] + [(r.end_ns, -1) for r in recs])
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    assert peak <= 2
    assert any(r.eligible_ns > r.scheduled_ns for r in recs)


def test_no_turn_is_sent_or_waited_for_past_the_duration(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({"record_writes": True})
    mt = MultiturnConfig(turns_min=5, turns_max=5, think_time_s=30.0, think_dist="constant")
    cfg = _cfg(srv.base_url, multiturn=mt, num_prompts=4, duration_s=1.0, request_rate=8.0)
    t = time.monotonic()
    bench(cfg, tmp_path, progress=False, scrape_metrics=False, num_prompts_given=True)
    assert time.monotonic() - t < 20.0  # the next turns were due after 30 s: not waited for
    recs = read_records(tmp_path)
    assert recs and {r.turn for r in recs} == {1}
