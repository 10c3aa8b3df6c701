"""The ``multiturn`` dataset: synthetic sessions, ShareGPT multi-turn and JSONL sessions; the
session rate; the implied hit rate of a conversation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from servetune.errors import DatasetError
from servetune.results.conversation import MultiturnConfig
from servetune.results.schema import BenchConfig
from servetune.workload.plan import make_plan
from servetune.workload.prefix_share import workload_facts
from servetune.workload.sessions import Session, Turn, implied_session_hit_rate
from servetune.workload.tokens import ApproxTokenizer

DATA = Path(__file__).parents[1] / "data" / "workloads"


def _cfg(**kw: object) -> BenchConfig:
    base: dict[str, object] = {
        "dataset_name": "multiturn",
        "random_input_len": 40,
        "random_output_len": 20,
        "num_prompts": 50,
        "request_rate": 5.0,
        "seed": 3,
    }
    base.update(kw)
    return BenchConfig(**base)  # type: ignore[arg-type]


def test_synthetic_sessions_follow_their_settings() -> None:
    mt = MultiturnConfig(
        turns_min=2, turns_max=6, system_prompt_len=200, system_prompts=3, think_time_s=1.5
    )
    plan = make_plan(_cfg(multiturn=mt, random_range_ratio=0.5), ApproxTokenizer())
    assert plan.sessions is not None and len(plan.sessions) == 50
    turns = [len(s.turns) for s in plan.sessions]
    assert min(turns) >= 2 and max(turns) <= 6 and len(set(turns)) > 2
    assert {s.system_id for s in plan.sessions} == {0, 1, 2}
    by_id = {s.system_id: s.system for s in plan.sessions}
    assert all(s.system == by_id[s.system_id] and s.system_tokens == 200 for s in plan.sessions)
    assert len(set(by_id.values())) == 3
    users = [t.user_tokens for s in plan.sessions for t in s.turns]
    assert min(users) >= 20 and max(users) <= 60
    thinks = [t.think_s for s in plan.sessions for t in s.turns[1:]]
    assert all(s.turns[0].think_s == 0 for s in plan.sessions)
    assert np.mean(thinks) == pytest.approx(1.5, rel=0.3)
    assert len({s.sid for s in plan.sessions}) == 50
    # requests: every turn, session by session, with its nominal prompt length
    assert len(plan.requests) == sum(turns)
    s0 = plan.sessions[0]
    assert [r.input_len for r in plan.requests[: len(s0.turns)]] == s0.nominal_prompt_tokens()
    # sessions/s: 50 sessions at 5/s span ~10 s
    assert plan.session_offsets_ns is not None
    assert plan.session_offsets_ns[-1] / 1e9 == pytest.approx(10.0, rel=0.4)
    assert plan.planned_rate == pytest.approx(5.0 * sum(turns) / 50, rel=0.01 + 0.4)


def test_rate_in_requests_spreads_sessions_over_the_mean_turns() -> None:
    mt = MultiturnConfig(turns_min=4, turns_max=4, rate_unit="requests")
    plan = make_plan(_cfg(multiturn=mt, request_rate=20.0, num_prompts=200), ApproxTokenizer())
    assert plan.session_offsets_ns is not None
    span = plan.session_offsets_ns[-1] / 1e9
    assert 199 / span == pytest.approx(5.0, rel=0.15)  # 20 req/s / 4 turns


def test_same_seed_same_sessions() -> None:
    a = make_plan(_cfg(), ApproxTokenizer())
    b = make_plan(_cfg(), ApproxTokenizer())
    c = make_plan(_cfg(seed=4), ApproxTokenizer())
    assert a.sessions == b.sessions and a.session_offsets_ns == b.session_offsets_ns
    assert a.sessions != c.sessions


def test_implied_hit_rate_of_a_conversation() -> None:
    # one session: system 32, turns of 16-token messages and 16-token answers
    turns = [Turn(user="u", user_tokens=16, output_len=16) for _ in range(3)]
    s = Session(sid="a", system="s", system_tokens=32, system_id=0, turns=turns)
    # prompts 48, 80, 112; reuse 0, 64, 96 (previous prompt + answer, in full blocks)
    assert implied_session_hit_rate([s]) == pytest.approx((64 + 96) / (48 + 80 + 112))
    # a second session with the same system prompt reuses it on its first turn
    t = s.model_copy(update={"sid": "b"})
    assert implied_session_hit_rate([s, t]) == pytest.approx(
        (64 + 96 + 32 + 64 + 96) / (2 * (48 + 80 + 112))
    )
    plan = make_plan(_cfg(), ApproxTokenizer())
    facts = workload_facts(plan.requests, 3, False, plan.sessions)
    assert facts.requests == len(plan.requests)
    assert facts.implied_prefix_hit_rate == pytest.approx(
        implied_session_hit_rate(plan.sessions or [])
    )


def test_sharegpt_multiturn_conversations() -> None:
    cfg = _cfg(dataset_path=str(DATA / "sharegpt_multiturn.json"), num_prompts=3)
    plan = make_plan(cfg, ApproxTokenizer())
    assert plan.sessions is not None
    by_name = {s.sid.rsplit("-", 2)[-1]: s for s in plan.sessions}
    # conv-d has no user turn: skipped; three sessions from three usable conversations
    assert set(by_name) == {"a", "b", "c"}
    a = by_name["a"]
    assert len(a.turns) == 3 and a.system.startswith("You are a careful assistant")
    assert a.turns[0].user.startswith("Our time to first token")
    tok = ApproxTokenizer()
    answer = "Start with the queue: compare waiting requests with the batch cap during the slow"
    assert a.turns[0].output_len == tok.count(
        answer + " hours, then check whether prompts got longer."
    )
    assert by_name["c"].system_id == a.system_id  # the same system prompt
    assert by_name["b"].system == "" and by_name["b"].system_id is None
    fixed = make_plan(cfg.model_copy(update={"sharegpt_output_len": 7}), tok)
    assert {t.output_len for s in fixed.sessions or [] for t in s.turns} == {7}


def test_jsonl_sessions() -> None:
    cfg = _cfg(dataset_path=str(DATA / "sessions.jsonl"), num_prompts=2, random_output_len=11)
    plan = make_plan(cfg, ApproxTokenizer())
    assert plan.sessions is not None
    agent = next(s for s in plan.sessions if s.sid.endswith("agent-1"))
    assert [t.output_len for t in agent.turns] == [24, 32]
    assert agent.turns[1].think_s == 0.5
    other = next(s for s in plan.sessions if s is not agent)
    # from messages: the assistant's length, and a last user turn without one gets the default
    assert [t.output_len for t in other.turns][1] == 11
    assert other.system == agent.system and other.system_id == agent.system_id


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"turns": []}\n', r"s\.jsonl:1: 'turns' must be a non-empty list"),
        (
            '{"turns": [{"user": "hi"}]}\n{"turns": [{"text": "hi"}]}\n',
            r"s\.jsonl:2, turn 0: expected an object with 'user'",
        ),
        ('{"turns": [{"user": "hi", "output_len": 0}]}\n', r"output_len must be a positive"),
        ('{"turns": [{"user": "hi", "think_s": -1}]}\n', r"think_s must be a number ≥ 0"),
        ('{"turns": [{"user": 5}]}\n', r"'user' is not a string"),
        ("[1, 2]", r"s\.jsonl: entry 0 has no 'conversations' list"),
        ('[{"conversations": [{"from": "human", "value": "x"}', r"s\.jsonl:1:\d+: not valid JSON"),
        ('{"hello": 1}\n', r"s\.jsonl:1: neither 'turns' nor 'messages'"),
    ],
)
def test_malformed_sessions_name_the_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(content)
    with pytest.raises(DatasetError, match=message):
        make_plan(_cfg(dataset_path=str(path)), ApproxTokenizer())


def test_bad_settings_are_errors() -> None:
    with pytest.raises(ValidationError, match=r"turns_max: the most turns .* below the least"):
        MultiturnConfig(turns_min=5, turns_max=2)
    with pytest.raises(ValidationError, match="session_header 'X Session' is not an HTTP header"):
        MultiturnConfig(session_header="X Session")
    with pytest.raises(DatasetError, match="conversations file not found"):
        make_plan(_cfg(dataset_path="/nonexistent/x.json"), ApproxTokenizer())
