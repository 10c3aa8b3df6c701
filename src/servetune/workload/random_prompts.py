"""Random prompts whose token count under a given counter is exactly the requested length."""

from __future__ import annotations

import numpy as np

from servetune.workload.tokens import ApproxTokenizer, TokenCounter

_MAX_FIX_ROUNDS = 8


def exact_prompt(tok: TokenCounter, length: int, rng: np.random.Generator) -> tuple[str, int]:
    """A prompt of random tokens that re-tokenizes to ``length`` tokens (or as close as can be).

    Decoding random ids and encoding the text again can merge or split tokens, so the text is
    trimmed or extended and checked again, a few rounds at most. Returns the text and its
    token count under ``tok``.
    """
    if length <= 0:
        return "", 0
    pool = tok.sample_ids()
    draws = rng.integers(0, len(pool), size=length)
    if isinstance(tok, ApproxTokenizer):  # one word = one token by construction: no re-count
        return tok.decode(draws.tolist()), length
    ids = [pool[i] for i in draws]
    text = tok.decode(ids)
    n = tok.count(text)
    for _ in range(_MAX_FIX_ROUNDS):
        if n == length:
            break
        ids = tok.encode(text)
        if n > length:
            ids = ids[:length]
        else:
            ids = ids + [pool[i] for i in rng.integers(0, len(pool), size=length - n)]
        text = tok.decode(ids)
        n = tok.count(text)
    return text, n


def sample_lengths(mean: int, range_ratio: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Lengths uniform in [mean·(1−r), mean·(1+r)] (vLLM's ``--random-range-ratio``)."""
    lo = max(1, round(mean * (1 - range_ratio)))
    hi = max(lo, round(mean * (1 + range_ratio)))
    return rng.integers(lo, hi + 1, size=n)
