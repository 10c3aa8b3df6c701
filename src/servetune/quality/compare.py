"""Per-text comparisons of two endpoints' answers (one text, two sets of positions).

For a text both scored on the same tokens (:class:`~servetune.quality.endpoint.Scored`):

- NLL: Σ −log p(actual token) over its positions (first token excluded, it has no context);
  perplexity = exp(Σ NLL / tokens). A position whose actual token was beyond every top-k
  asked counts with the k-th logprob (an upper bound) and is counted as a *miss*.
- KL(A‖B) at a position, from the two top-k lists: over the tokens in both lists and one more
  outcome "any other token" (1 − their mass), Σ p log(p/q). Merging outcomes can only lower
  a KL divergence, so this is a lower bound of the full-vocabulary KL (exact when the lists
  cover the distributions).
- top-1 agreement: the most likely token is the same.

Greedy outputs (``temperature 0``): exact match of the token sequences, the share of the
longer one both start with (common prefix), and the token F1 (multiset overlap).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from servetune.quality.endpoint import Generated, Key, Position, Scored


@dataclass
class PairStats:
    """One text, endpoint A (reference) against endpoint B."""

    aligned: bool
    """Both tokenized the text the same way (KL and top-1 need it)."""
    tokens: int
    nll_a: float
    nll_b: float
    kl_sum: float = 0.0
    kl_n: int = 0
    top1_same: int = 0
    top1_n: int = 0
    misses_a: int = 0
    misses_b: int = 0


def _nll(positions: Sequence[Position]) -> tuple[float, int, int]:
    total, misses = 0.0, 0
    for p in positions:
        lp = p.logprob
        if lp is None:
            misses += 1
            lp = min(p.top.values()) if p.top else math.log(1e-9)
        total -= lp
    return total, len(positions), misses


def kl_topk(p_top: dict[Key, float], q_top: dict[Key, float]) -> float | None:
    """Coarse-grained KL(P‖Q) over the tokens in both top lists plus "the rest"."""
    common = p_top.keys() & q_top.keys()
    if not common:
        return None
    kl = 0.0
    mass_p = mass_q = 0.0
    for t in common:
        lp, lq = p_top[t], q_top[t]
        p = math.exp(lp)
        kl += p * (lp - lq)
        mass_p += p
        mass_q += math.exp(lq)
    rest_p, rest_q = max(0.0, 1.0 - mass_p), max(1e-12, 1.0 - mass_q)
    if rest_p > 1e-12:
        kl += rest_p * math.log(rest_p / rest_q)
    return max(0.0, kl)


def _argmax(top: dict[Key, float]) -> Key | None:
    return max(top.items(), key=lambda kv: kv[1])[0] if top else None


def compare_scored(a: Scored, b: Scored) -> PairStats:
    nll_a, n_a, miss_a = _nll(a.positions)
    nll_b, n_b, miss_b = _nll(b.positions)
    aligned = a.tokens == b.tokens and n_a == n_b
    out = PairStats(aligned, n_a, nll_a, nll_b, misses_a=miss_a, misses_b=miss_b)
    if not aligned:
        return out
    for pa, pb in zip(a.positions, b.positions, strict=True):
        kl = kl_topk(pa.top, pb.top)
        if kl is not None:
            out.kl_sum += kl
            out.kl_n += 1
        ta, tb = _argmax(pa.top), _argmax(pb.top)
        if ta is not None and tb is not None:
            out.top1_n += 1
            out.top1_same += int(ta == tb)
    return out


@dataclass
class GreedyStats:
    exact: bool
    prefix_share: float
    token_f1: float


def compare_greedy(a: Generated, b: Generated) -> GreedyStats:
    ta: Sequence[object] = a.tokens or list(a.text)
    tb: Sequence[object] = b.tokens or list(b.text)
    if not ta and not tb:
        return GreedyStats(True, 1.0, 1.0)
    lcp = 0
    for x, y in zip(ta, tb, strict=False):
        if x != y:
            break
        lcp += 1
    ca, cb = Counter(ta), Counter(tb)
    overlap = sum((ca & cb).values())
    f1 = 2 * overlap / (len(ta) + len(tb)) if (ta or tb) else 1.0
    return GreedyStats(list(ta) == list(tb), lcp / max(len(ta), len(tb)), f1)
