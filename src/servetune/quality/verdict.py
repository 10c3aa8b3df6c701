"""The verdict: is the candidate's loss bigger than the baseline's own noise, and by how much?

The baseline is scored twice (the second pass in reverse order, so requests meet other batch
company); A→A is the *noise floor*, A→B the candidate. For each metric and each text i, the
candidate's loss and the floor's are paired, and their difference — the *excess* — is what
the candidate adds beyond run-to-run noise::

    perplexity  excess = exp( Σ_i [(NLL_B,i − NLL_A,i) − (NLL_A2,i − NLL_A,i)] / Σ_i n_i ) − 1
                (relative perplexity increase beyond the floor; n_i = the text's tokens)
    KL          excess = Σ_i (KL_AB,i − KL_AA2,i) / Σ_i n_i        (nats per token)
    top-1       excess = Σ_i (disagree_AB,i − disagree_AA2,i) / Σ_i n_i
    greedy      excess = share of prompts whose greedy output differs, minus the floor's

with a 95% interval over texts (texts are the independent units; tokens of a text share its
context, so they are not counted alone): the excess is a ratio of sums, Σ d_i / Σ n_i, whose
standard error is taken from the per-text residuals d_i − R·n_i (the delta method, with n/(n−1)),
and the interval is R ± t(0.975, texts − 1) × that error — Student's t, so that a handful of
texts gives the wide interval it should. (A percentile bootstrap over texts was used before:
with 2 texts its "95%" interval is the two texts' range and missed the true excess half the
time, 14% of the time with 6 texts, 13% with 8 — measured on simulated texts; the t interval
misses 4–7% at every size.) The transform (perplexity's exp(x) − 1) is monotone and applied to
the ends. Against the threshold T:

- ``pass``  the interval's upper end ≤ T;
- ``fail``  its lower end > T;
- ``inconclusive`` otherwise (more texts, ``--prompts``, narrow it).

Business samples: a *regression* passes on both baseline runs and fails on the candidate; a
sample whose two baseline runs disagree is *flaky* and left out. More regressions than
``--max-sample-regressions`` (default 0) fails.

Overall: ``fail`` if any metric fails; ``pass`` if every metric that ran passed and perplexity
or KL ran; else ``inconclusive`` (a check that could not run says why).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel
from scipy.stats import t as student_t

Status = Literal["pass", "fail", "inconclusive", "not_run"]


class Thresholds(BaseModel):
    max_ppl_increase: float = 0.02
    """Relative perplexity increase beyond the floor (0.02 = 2%)."""
    max_kl: float = 0.01
    """Mean KL divergence per token beyond the floor, nats."""
    min_top1: float = 0.95
    """Top-1 agreement (the floor's disagreement is allowed on top)."""
    min_greedy_match: float | None = None
    """Share of identical greedy outputs; None: reported, not judged."""
    max_sample_regressions: int = 0


class MetricResult(BaseModel):
    name: str
    label: str
    unit: str
    status: Status
    candidate: float | None = None
    """Candidate against the baseline (A→B)."""
    floor: float | None = None
    """Baseline against itself (A→A2): the noise floor."""
    excess: float | None = None
    ci95: tuple[float, float] | None = None
    threshold: float | None = None
    gated: bool = True
    texts: int = 0
    tokens: int = 0
    why: str | None = None


def ratio_ci(d: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """95% interval of Σ d / Σ w over independent texts (Student's t on the delta method's
    standard error, texts − 1 degrees of freedom); NaN for fewer than two texts."""
    n = d.size
    if n < 2 or w.sum() <= 0:
        return (float("nan"), float("nan"))
    r = float(d.sum() / w.sum())
    resid = d - r * w
    se = math.sqrt(n / (n - 1) * float((resid**2).sum())) / float(w.sum())
    half = float(student_t.ppf(0.975, n - 1)) * se
    return (r - half, r + half)


def judge(ci: tuple[float, float], threshold: float) -> Status:
    lo, hi = ci
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "inconclusive"
    if hi <= threshold:
        return "pass"
    if lo > threshold:
        return "fail"
    return "inconclusive"


def paired_metric(
    name: str,
    label: str,
    unit: str,
    cand: Sequence[float],
    floor: Sequence[float],
    weights: Sequence[float],
    threshold: float,
    transform: Callable[[float], float] = lambda x: x,
    gated: bool = True,
    bounds: tuple[float, float] = (-math.inf, math.inf),
) -> MetricResult:
    """Per-text sums (candidate, floor) over per-text weights: the metric is
    transform(Σ x / Σ w); the excess transform(Σ (cand − floor) / Σ w). ``bounds``: the
    values the excess can take (a difference of two shares lies in −1 … 1); the interval is
    kept inside them."""
    c, f, w = (np.asarray(v, dtype=float) for v in (cand, floor, weights))
    if c.size < 2 or w.sum() <= 0:
        return MetricResult(
            name=name,
            label=label,
            unit=unit,
            status="not_run",
            threshold=threshold,
            gated=gated,
            why="fewer than two texts could be compared",
        )
    d = c - f
    excess = transform(float(d.sum() / w.sum()))
    lo, hi = ratio_ci(d, w)
    ci = (
        min(max(_safe(transform, lo), bounds[0]), bounds[1]),
        min(max(_safe(transform, hi), bounds[0]), bounds[1]),
    )
    return MetricResult(
        name=name,
        label=label,
        unit=unit,
        status=judge(ci, threshold) if gated else "not_run",
        candidate=transform(float(c.sum() / w.sum())),
        floor=transform(float(f.sum() / w.sum())),
        excess=excess,
        ci95=ci,
        threshold=threshold,
        gated=gated,
        texts=int(c.size),
        tokens=int(w.sum()),
        why=None if gated else "reported, not judged",
    )


def _safe(f: Callable[[float], float], x: float) -> float:
    try:
        return f(x)
    except OverflowError:
        return math.inf


def overall(results: Sequence[MetricResult]) -> tuple[Status, str]:
    gated = [r for r in results if r.gated]
    failed = [r for r in gated if r.status == "fail"]
    if failed:
        return "fail", "; ".join(_say(r) for r in failed)
    ran = [r for r in gated if r.status != "not_run"]
    core = [r for r in ran if r.name in ("perplexity", "kl")]
    unsure = [r for r in ran if r.status == "inconclusive"]
    if ran and not unsure and core:
        return "pass", "; ".join(_say(r) for r in ran)
    if not core:
        missing = [r for r in gated if r.name in ("perplexity", "kl")]
        why = "; ".join(f"{r.label}: {r.why}" for r in missing if r.why) or "no logprobs"
        return "inconclusive", f"neither perplexity nor KL could be measured ({why})"
    return "inconclusive", "; ".join(_say(r) for r in unsure)


def _say(r: MetricResult) -> str:
    if r.excess is None or r.ci95 is None:
        return f"{r.label} {r.status}: {r.why or ''}".rstrip(": ")
    fmt = _fmt(r.unit)
    return (
        f"{r.label} {r.status}: {fmt(r.excess)} beyond the noise floor (95% CI "
        f"{fmt(r.ci95[0])} … {fmt(r.ci95[1])}; threshold {fmt(r.threshold or 0.0)})"
    )


def _fmt(unit: str) -> Callable[[float], str]:
    if unit == "share":
        return lambda v: f"{v:+.2%}"
    if unit == "nats":
        return lambda v: f"{v:+.4f} nats"
    return lambda v: f"{v:+.4g}"
