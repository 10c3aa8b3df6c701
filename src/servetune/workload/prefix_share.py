"""How much of a workload's prompt text a prefix cache could serve, from the workload alone.

A prefix cache (vLLM's automatic prefix caching, SGLang's radix cache) stores the KV of full
blocks of prompt tokens, each block keyed by its own tokens *and* every block before it, so a
block can only hit when the whole prompt up to and including it was seen before. With an
unbounded cache that never evicts, the share of prompt tokens a run could serve from it is

    implied = Σ_requests (tokens in leading blocks already seen) / Σ_requests (prompt tokens)

walking the requests in send order. That is the most a server can honestly report for this
run: a measured hit rate well above it means the cache held prompts from *outside* the run (an
earlier run or sweep level with the same prompts), and the run measured the cache.

Tokens here are the prompt's words (split at white space), not the server's tokens: a shared
prefix is shared under any tokenizer, and blocks of :data:`BLOCK_PIECES` words stand for vLLM's
16-token blocks. Chat requests also share the
chat template's header, which the server adds: :func:`hit_rate_ceiling` allows for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from servetune.results.schema import WorkloadFacts
from servetune.workload.sessions import Session, implied_session_hit_rate
from servetune.workload.spec import RequestSpec

BLOCK_PIECES = 16
"""Words per block (vLLM's default block size is 16 tokens)."""
CHAT_TEMPLATE_TOKENS = 32
"""Shared header a chat template adds to every request (system prompt, role markers): up to
two blocks on the models we know; its share of a prompt counts as cacheable."""
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MULT = np.uint64(0xBF58476D1CE4E5B9)
TOLERANCE = 0.10
"""A measured hit rate may exceed the ceiling by this much (absolute) before it is flagged:
tokenizers split differently and servers count hits per block."""


def _block_keys(text: str, block: int) -> tuple[list[int], int]:
    """One key per full block of words, each standing for the block *and* all before it (the
    running, wrapping sum of a 64-bit mix of each word's hash and its position), and the
    number of words."""
    words = text.split()
    n = len(words) - len(words) % block
    if n == 0:
        return [], len(words)
    h = np.fromiter(map(hash, words[:n]), dtype=np.int64, count=n).view(np.uint64)
    pos = np.arange(1, n + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        mixed = (h ^ (pos * _GOLDEN)) * _MULT
        mixed ^= mixed >> np.uint64(29)
        keys = np.cumsum(mixed, dtype=np.uint64)[block - 1 :: block]
    return keys.tolist(), len(words)


def implied_hit_rate(requests: Iterable[RequestSpec], block: int = BLOCK_PIECES) -> float:
    """The share of prompt words an unbounded prefix cache serves, in send order (0–1)."""
    seen: set[int] = set()
    hit = total = 0
    memo: dict[int, tuple[RequestSpec, int, int]] = {}  # holds the spec: its id stays its own
    for spec in requests:
        again = memo.get(id(spec))
        if again is not None:  # one RequestSpec sent again (long closed loops): all cached
            hit += again[1]
            total += again[2]
            continue
        keys, words = _block_keys(spec.text(), block)
        memo[id(spec)] = (spec, len(keys) * block, words)
        total += words
        for i, k in enumerate(keys):
            if k not in seen:
                seen.update(keys[i:])
                break
            hit += block
    return hit / total if total else 0.0


def hit_rate_ceiling(implied: float, mean_prompt_tokens: float | None, chat: bool) -> float:
    """The highest hit rate a server may report for a workload before it is flagged: the
    workload's implied rate, plus the chat template's share for chat requests, plus
    :data:`TOLERANCE`."""
    template = 0.0
    if chat and mean_prompt_tokens:
        template = min(1.0, CHAT_TEMPLATE_TOKENS / mean_prompt_tokens)
    return min(1.0, implied + template * (1.0 - implied) + TOLERANCE)


def workload_facts(
    requests: Sequence[RequestSpec],
    seed: int,
    chat: bool,
    sessions: Sequence[Session] | None = None,
) -> WorkloadFacts:
    """The facts of a planned run that readers judge the server's figures by. With
    ``sessions`` the requests are their turns, and the implied rate is the sessions' own
    (:func:`~servetune.workload.sessions.implied_session_hit_rate`: answers as planned)."""
    n = len(requests)
    mean_in = sum(s.input_len for s in requests) / n if n else None
    if sessions is not None:
        implied = implied_session_hit_rate(sessions, BLOCK_PIECES)
    else:
        implied = implied_hit_rate(requests)
    return WorkloadFacts(
        seed=seed,
        requests=n,
        distinct_prompts=len({id(s) for s in requests}),
        mean_prompt_tokens=mean_in,
        implied_prefix_hit_rate=implied,
        prefix_hit_rate_ceiling=hit_rate_ceiling(implied, mean_in, chat),
    )
