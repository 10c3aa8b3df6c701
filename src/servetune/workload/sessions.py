"""Sessions: conversations whose turns depend on the answers before them.

A :class:`Session` holds what is known before the run: its system prompt and, for each turn,
the new user message, the answer's ``max_tokens`` and the think time before it is sent. What
each later prompt holds is decided during the run, from the answers as the server returned
them (:mod:`servetune.loadgen.session_driver`; :mod:`servetune.sim.offline_run` for the
virtual clock): turn k's prompt = turn k−1's prompt + its answer + the new message.

:func:`implied_session_hit_rate` is the share of prompt tokens an unbounded prefix cache could
serve when every answer is as long as planned: a later turn reuses the whole conversation so
far (in full blocks), a first turn the system prompt when an earlier session sent it.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict


class Turn(BaseModel):
    """One turn as planned: the new user message, the answer's max_tokens, the wait before."""

    model_config = ConfigDict(frozen=True)

    user: str
    user_tokens: int
    output_len: int
    think_s: float = 0.0
    """Seconds between the previous answer's end and this turn's send (0 for the first)."""


class Session(BaseModel):
    """A conversation as planned."""

    model_config = ConfigDict(frozen=True)

    sid: str
    """Its id: the session header's value and the request's ``user`` field."""
    system: str = ""
    system_tokens: int = 0
    system_id: int | None = None
    """Which of the shared system prompts (None: its own, or none)."""
    turns: list[Turn]

    def nominal_prompt_tokens(self) -> list[int]:
        """Each turn's prompt length when every earlier answer is as long as planned."""
        out: list[int] = []
        n = self.system_tokens
        prev_answer = 0
        for t in self.turns:
            n += prev_answer + t.user_tokens
            out.append(n)
            prev_answer = t.output_len
        return out


def implied_session_hit_rate(sessions: Sequence[Session], block: int = 16) -> float:
    """Share of prompt tokens (0–1) an unbounded prefix cache serves, answers as planned,
    sessions in start order; reuse counted in full blocks of ``block`` tokens, and never the
    whole prompt (a server computes at least the last token)."""
    seen_system: set[int] = set()
    hit = total = 0
    for s in sessions:
        prompts = s.nominal_prompt_tokens()
        before = 0  # the previous turn's prompt + answer (what the cache holds of this one)
        for k, (t, p) in enumerate(zip(s.turns, prompts, strict=True)):
            total += p
            reuse = (s.system_tokens if s.system_id in seen_system else 0) if k == 0 else before
            hit += min((reuse // block) * block, ((p - 1) // block) * block)
            before = p + t.output_len
        if s.system_id is not None:
            seen_system.add(s.system_id)
    return hit / total if total else 0.0


def total_turns(sessions: Sequence[Session]) -> int:
    return sum(len(s.turns) for s in sessions)
