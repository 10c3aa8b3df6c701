"""The ``multiturn`` dataset, synthetic: sessions of random turns with shared system prompts.

Each session draws one of ``--multiturn-system-prompts`` system prompts of
``--multiturn-system-len`` tokens, a number of turns uniform in ``--multiturn-turns``, and per
turn a user message of ``--random-input-len`` tokens and an answer of ``--random-output-len``
(both ± ``--random-range-ratio``), and a think time before every turn after the first
(``--multiturn-think-time``, exponential or constant). All drawn from ``--seed``. With
``--dataset-path`` the sessions come from a file instead
(:mod:`servetune.workload.datasets.conversations`).
"""

from __future__ import annotations

import numpy as np

from servetune.results.schema import BenchConfig
from servetune.workload.random_prompts import exact_prompt, sample_lengths
from servetune.workload.sessions import Session, Turn
from servetune.workload.tokens import TokenCounter


def think_times(cfg: BenchConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` think times (s) of the configured mean and distribution."""
    mean = cfg.multiturn.think_time_s
    if mean <= 0 or n <= 0:
        return np.zeros(max(0, n))
    if cfg.multiturn.think_dist == "constant":
        return np.full(n, mean)
    return rng.exponential(mean, size=n)


def session_id(seed: int, index: int) -> str:
    """A session id unique to the run's seed (two runs' sessions never share one)."""
    return f"s{seed:x}-{index}"


def synthetic_sessions(cfg: BenchConfig, tok: TokenCounter, n: int) -> list[Session]:
    mt = cfg.multiturn
    rng = np.random.default_rng([cfg.seed, 0x5E55])
    systems: list[tuple[str, int]] = []
    if mt.system_prompt_len > 0:
        systems = [exact_prompt(tok, mt.system_prompt_len, rng) for _ in range(mt.system_prompts)]
    turns = rng.integers(mt.turns_min, mt.turns_max + 1, size=n)
    total = int(turns.sum())
    users = sample_lengths(cfg.random_input_len, cfg.random_range_ratio, total, rng)
    outs = sample_lengths(cfg.random_output_len, cfg.random_range_ratio, total, rng)
    thinks = think_times(cfg, total, rng)
    picks = rng.integers(0, max(1, len(systems)), size=n)
    sessions: list[Session] = []
    j = 0
    for i in range(n):
        ts: list[Turn] = []
        for k in range(int(turns[i])):
            text, count = exact_prompt(tok, int(users[j]), rng)
            think = float(thinks[j]) if k else 0.0
            ts.append(Turn(user=text, user_tokens=count, output_len=int(outs[j]), think_s=think))
            j += 1
        sys_text, sys_tokens, sys_id = "", 0, None
        if systems:
            sys_id = int(picks[i])
            sys_text, sys_tokens = systems[sys_id]
        sessions.append(
            Session(
                sid=session_id(cfg.seed, i),
                system=sys_text,
                system_tokens=sys_tokens,
                system_id=sys_id,
                turns=ts,
            )
        )
    return sessions
