"""Speculative decoding in the simulated engine: what a decode step verifies, how many tokens
a request gains from it, and the acceptance rates assumed when the user gives none.

vLLM V1 (``--speculative-config '{"method": M, "num_speculative_tokens": k}'``): after each
step the drafter proposes ``k`` tokens per decoding request; the next step runs the target
model over the last sampled token and the ``k`` drafts (``k + 1`` tokens per request: compute,
KV written, ``k + 1`` of the scheduler's token budget) and keeps the drafts up to the first one
the target rejects, plus the target's own next token. With each draft accepted independently
with probability ``a`` (the usual model, Leviathan et al. 2023), a step gives a request ``j +
1`` tokens with probability ``a^j (1 − a)`` for ``j < k`` and ``a^k`` for ``j = k``, on
average ``E = (1 − a^(k+1)) / (1 − a)`` (:func:`expected_tokens`; ``k + 1`` at ``a = 1``) —
vLLM's "mean acceptance length".

The engine keeps decoding requests in aggregate (every one at the same pace), so the gains
are drawn once per step and shared by every request decoding in it (:class:`GainStream`): each
request's gains are i.i.d. step after step, as the model says, but the requests of one step
are lucky or unlucky together. Each request's TPOT and its spread over a request's steps are
the model's; what is not is the independence between requests in one step (a batch's tokens
per step vary more than they would).

Acceptance defaults (:data:`MEASURED`): published mean acceptance lengths of a method at a
draft length, turned into the per-token rate ``a`` of the i.i.d. model at that length
(:func:`rate_for_length`); between two measured lengths ``a`` is interpolated, outside them the
nearest is used. Measured deeper drafts accept less per token than the i.i.d. model with the
first token's rate says (DeepSeek-V3's MTP: 0.85 for one draft, 0.72 per token over three),
which is why ``a`` is taken at the length asked for. n-gram drafting is accepted as often as
the text repeats itself, which the simulator's prompts do not model: it needs the user's rate.
"""

from __future__ import annotations

import random
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from servetune.errors import SimError

MTP_METHODS = ("mtp", "deepseek_mtp")
"""vLLM's names for drafting with the model's own MTP layers (``deepseek_mtp`` the older)."""


@dataclass(frozen=True)
class Measured:
    """A published mean acceptance length (accepted drafts + 1 per step) at a draft length."""

    method: str
    k: int
    acceptance_length: float
    source: str


MEASURED: tuple[Measured, ...] = (
    Measured(
        "mtp",
        1,
        1.85,
        "DeepSeek-V3 Technical Report (arXiv 2412.19437) §5.4.3: the second token's "
        "acceptance rate 85-90% across generation topics (the low end taken)",
    ),
    Measured(
        "mtp",
        3,
        2.61,
        "sgl-project/sgl-cookbook, DeepSeek-V3 on 8x MI300X, SGLang EAGLE over the MTP layer, "
        "3 steps, top-1, 4 draft tokens, ShareGPT: accept length 2.61",
    ),
)


def expected_tokens(a: float, k: int) -> float:
    """Mean tokens a request gains per step: ``(1 − a^(k+1)) / (1 − a)`` (``k + 1`` at 1)."""
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def rate_for_length(length: float, k: int) -> float:
    """The per-token rate ``a`` whose :func:`expected_tokens` at ``k`` is ``length``."""
    if not 1.0 <= length <= k + 1:
        raise ValueError(f"an acceptance length of {length} is outside 1..{k + 1}")
    lo, hi = 0.0, 1.0
    for _ in range(60):  # bisection: expected_tokens grows with a
        mid = (lo + hi) / 2
        if expected_tokens(mid, k) < length:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def default_acceptance(method: str, k: int) -> tuple[float, str]:
    """(per-token acceptance rate, where it comes from) for ``method`` at draft length ``k``;
    a SimError when the simulator has no measurement for the method (it needs the user's)."""
    base = "mtp" if method in MTP_METHODS else method
    points = sorted((m for m in MEASURED if m.method == base), key=lambda m: m.k)
    if not points:
        raise SimError.over_fields(
            f"speculative decoding with {method!r} is accepted as often as the text repeats "
            "itself, which the simulated prompts do not model: no default acceptance rate",
            hint="give the rate measured on your traffic: {spec_acceptance_rate} A (0-1; vLLM "
            "logs it as 'Draft acceptance rate' and per-position acceptance in its "
            "SpecDecoding metrics)",
            code="sim.config",
        )
    rates = [(m.k, rate_for_length(m.acceptance_length, m.k), m) for m in points]
    ks = [r[0] for r in rates]
    i = bisect_left(ks, k)
    if i < len(ks) and ks[i] == k:
        _, a, m = rates[i]
        return a, f"{m.source} (a = {a:.3f} per token)"
    if i == 0 or i == len(ks):
        _, a, m = rates[0] if i == 0 else rates[-1]
        return a, f"{m.source} (a = {a:.3f} per token at k = {m.k}, the nearest measured)"
    (k0, a0, m0), (k1, a1, m1) = rates[i - 1], rates[i]
    a = a0 + (a1 - a0) * (k - k0) / (k1 - k0)
    return a, (
        f"interpolated between k = {k0} (a = {a0:.3f}: {m0.source}) and k = {k1} "
        f"(a = {a1:.3f}: {m1.source})"
    )


class Speculation(BaseModel):
    """A resolved speculative-decoding configuration."""

    model_config = ConfigDict(frozen=True)

    method: str
    k: int
    """Drafts per step (``num_speculative_tokens``)."""
    acceptance: float
    """Per-token acceptance rate ``a`` of the i.i.d. model."""
    acceptance_source: str
    """``--spec-acceptance-rate``, or the measurement the default comes from."""

    @property
    def expected_tokens(self) -> float:
        return expected_tokens(self.acceptance, self.k)

    @property
    def drafts_with_mtp(self) -> bool:
        return self.method in MTP_METHODS


_CHUNK = 4096
"""Steps drawn at a time."""


class GainStream:
    """The tokens every decoding request gains at each step, drawn once per step (see the
    module docstring): ``G[s]`` is what a request decoding from step 0 has gained before step
    ``s`` (``G[0] = 0``, strictly increasing), so one decoding from ``s0`` has gained
    ``G[s] − G[s0]`` before step ``s``."""

    def __init__(self, spec: Speculation, seed: int) -> None:
        self.k = spec.k
        a = spec.acceptance
        # P(gain ≤ j + 1) for j < k: 1 − a^(j+1); the gain is 1 + the drafts accepted
        self._cdf = [1.0 - a ** (j + 1) for j in range(spec.k)]
        self._rng = random.Random(f"servetune-spec-{seed}")
        self.G = array("q", [0])

    def ensure(self, steps: int) -> None:
        """``G`` holds at least ``steps + 1`` entries (through step ``steps``)."""
        G = self.G
        if len(G) > steps:
            return
        rnd, cdf = self._rng.random, self._cdf
        total = G[-1]
        more = array("q")
        for _ in range(max(_CHUNK, steps + 1 - len(G))):
            total += 1 + bisect_right(cdf, rnd())
            more.append(total)
        G.extend(more)

    def finish_step(self, s0: int, remaining: int) -> int:
        """The step at which a request decoding from ``s0`` with ``remaining`` tokens to go
        samples its last one: the first ``f ≥ s0`` with ``G[f + 1] − G[s0] ≥ remaining``."""
        self.ensure(s0 + remaining + 1)
        G = self.G
        return bisect_left(G, G[s0] + remaining, s0 + 1) - 1
