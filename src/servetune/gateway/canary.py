"""Is the candidate as good as the baseline? A sequential test on what the gateway measured.

Both groups serve live traffic over the same seconds. Requests inside a run are not
independent (they share each server's state over time), so the unit of the test is a *paired
batch*: the batch closes when each group has at least ``batch_size`` new requests, and its
statistic is, per metric, candidate minus baseline over that same window::

    d_i = mean(log x_candidate) − mean(log x_baseline)      x = TTFT, TPOT or E2E latency
    d_i = error_rate_candidate − error_rate_baseline         errors

so slow minutes hit both sides and cancel, and a log ratio makes "10 % slower" the same size
at any latency. Over k batches with mean d̄ and variance s², V = s²/k, the mixture sequential
probability ratio test (Robbins' normal mixture, as in Johari et al., "Always Valid Inference",
2017) gives a *confidence sequence* — valid however often it is looked at::

    d̄ ± w,   w² = V (V + τ²) / τ² · (2 ln(1/α') + ln((V + τ²) / V))

with τ = the tolerance δ (the mixture is tuned to effects of that size) and α' = α / (number
of metrics). For each metric, with δ = ln(1 + tolerance) for latencies and the error
tolerance for errors:

- **worse**   d̄ − w > δ: the candidate is worse than tolerated → roll back;
- **as good** d̄ + w < δ: the candidate is at most ``tolerance`` worse → this metric passes;
- otherwise undecided: keep collecting.

The geometric means do not see a tail: 5 % of the candidate's requests 5× slower (preemption
under peaks) move them ×1.08, inside a ×1.10 tolerance. So each latency also has a *tail*
test (``canary.tail_quantile`` q, default 0.95; None turns it off) on the same batches: with T
the baseline's q quantile over its recent requests (fixed before the batch),

    d_i = share of candidate requests above (1 + tolerance) · T − share of baseline ones above T

A candidate at the tolerance — its latencies divided by 1 + tolerance distributed as the
baseline's — has E d_i = 0 for *any* T, so the confidence sequence keeps its error bound
whatever T is. *Worse* (roll back): the interval lies above 0 — the candidate's q quantile is
above (1 + tolerance) × the baseline's; *as good*: it lies below ``tail_margin`` (0.02: the
candidate's P93 ≤ (1 + tolerance) × the baseline's P95). The mixture is tuned to τ =
``tail_margin``; α is split over all seven tests.

A step is promoted when every metric passes (a latency no request of either group had — TPOT
of non-streamed answers — is not compared), each group has ``min_requests`` and there are
``min_batches`` batches; rolled back as soon as one metric is worse (or the quality gate
fails); an undecided step ends after ``max_step_s`` (``on_timeout``). Before the minimum
sample the one decision is an early rollback of a plainly failing candidate (see
:meth:`StepAnalysis._failing`): one that fails outright would never reach the sample. The
variance is a plug-in estimate, which is why a minimum sample is required before any other
decision.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from typing import Literal

from servetune.gateway.config import CanaryPolicy

Verdict = Literal["worse", "as_good", "undecided"]
Decision = Literal["promote", "rollback", "continue"]
LATENCIES = ("ttft", "tpot", "e2e")
EARLY_MIN_ERRORS = 5
"""Failed candidate requests before the early rollback (:meth:`StepAnalysis._failing`)."""
_FLOOR_S = 1e-5


@dataclass
class Observation:
    """One finished request as the gateway saw it (seconds; None when not measured)."""

    group: str
    step: int
    ttft: float | None
    tpot: float | None
    e2e: float | None
    error: bool


def half_width(var_mean: float, tau: float, alpha: float) -> float:
    """The confidence sequence's half-width for an estimate of variance ``var_mean``."""
    if var_mean <= 0:
        return 0.0
    t2 = tau * tau
    return math.sqrt(
        var_mean
        * (var_mean + t2)
        / t2
        * (2 * math.log(1 / alpha) + math.log((var_mean + t2) / var_mean))
    )


class MetricTest:
    """The running sequence of batch differences of one metric (Welford's sums)."""

    def __init__(
        self, name: str, tolerance: float, good_below: float | None = None, tau: float = 0.0
    ) -> None:
        self.name = name
        self.tolerance = tolerance
        """δ on the metric's scale (log ratio for latencies, absolute for the error rate):
        worse when the interval lies above it."""
        self.good_below = tolerance if good_below is None else good_below
        """As good when the interval lies below this (the tail's margin; else δ)."""
        self.tau = max(tau or tolerance, 1e-3)
        """The effect size the mixture is tuned to."""
        self.scale = 0.0
        """A tail test's latency tolerance (log): the candidate's threshold is T · e^scale."""
        self.k = 0
        self._mean = 0.0
        self._m2 = 0.0

    def add(self, d: float) -> None:
        self.k += 1
        delta = d - self._mean
        self._mean += delta / self.k
        self._m2 += delta * (d - self._mean)

    def state(self, alpha: float) -> dict[str, float | int | str]:
        k = self.k
        if k < 2:
            return {"metric": self.name, "batches": k, "verdict": "undecided"}
        mean = self._mean
        var = self._m2 / (k - 1)
        w = half_width(var / k, self.tau, alpha)
        lo, hi = mean - w, mean + w
        verdict: Verdict = "undecided"
        if lo > self.tolerance:
            verdict = "worse"
        elif hi < self.good_below:
            verdict = "as_good"
        out: dict[str, float | int | str] = {
            "metric": self.name,
            "batches": k,
            "mean": mean,
            "low": lo,
            "high": hi,
            "tolerance": self.tolerance,
            "verdict": verdict,
        }
        if self.name.endswith("_tail"):
            out["margin"] = self.good_below
            out["ratio_tolerated"] = math.exp(self.scale)
        elif self.name != "errors":
            out["ratio"] = math.exp(mean)
            out["ratio_low"] = math.exp(lo)
            out["ratio_high"] = math.exp(hi)
            out["ratio_tolerated"] = math.exp(self.tolerance)
        return out


class _Side:
    """Observations of one group inside the open batch, and over the whole step."""

    def __init__(self) -> None:
        self.logs: dict[str, list[float]] = {m: [] for m in LATENCIES}
        self.n = 0
        self.errors = 0
        self.total = 0
        self.total_errors = 0
        self.all: dict[str, array[float]] = {m: array("d") for m in LATENCIES}

    def add(self, o: Observation) -> None:
        self.n += 1
        self.total += 1
        if o.error:
            self.errors += 1
            self.total_errors += 1
            return
        for m in LATENCIES:
            v = getattr(o, m)
            if v is not None and v >= 0:
                self.logs[m].append(math.log(max(v, _FLOOR_S)))
                self.all[m].append(v)

    def reset_batch(self) -> None:
        for m in LATENCIES:
            self.logs[m].clear()
        self.n = 0
        self.errors = 0

    def summary(self) -> dict[str, float | int | None]:
        out: dict[str, float | int | None] = {
            "requests": self.total,
            "errors": self.total_errors,
            "error_rate": self.total_errors / self.total if self.total else None,
        }
        for m in LATENCIES:
            xs = sorted(self.all[m])
            out[f"{m}_p50_ms"] = xs[len(xs) // 2] * 1e3 if xs else None
            out[f"{m}_p99_ms"] = xs[min(len(xs) - 1, int(0.99 * len(xs)))] * 1e3 if xs else None
        return out


class StepAnalysis:
    """The test of one rollout step: feed observations, ask for a decision."""

    def __init__(self, policy: CanaryPolicy, candidate: str, step: int) -> None:
        self.policy = policy
        self.candidate = candidate
        self.step = step
        self.cand = _Side()
        self.base = _Side()
        self.tol = tol = math.log1p(policy.tolerance)
        self.tests = {m: MetricTest(m, tol) for m in LATENCIES}
        self.tail_q = policy.tail_quantile
        if self.tail_q is not None:
            margin = policy.tail_margin
            for m in LATENCIES:
                t = self.tests[f"{m}_tail"] = MetricTest(f"{m}_tail", 0.0, margin, tau=margin)
                t.scale = tol
        self.tests["errors"] = MetricTest("errors", policy.error_tolerance)
        self.batches = 0
        self._tail_log: dict[str, float] = {}
        """Per latency, log of the baseline's recent ``tail_quantile`` before the open batch
        (the tail test's threshold; set once the baseline has enough requests)."""

    def add(self, o: Observation) -> None:
        if o.step != self.step:
            return
        side = self.cand if o.group == self.candidate else self.base
        side.add(o)
        b = self.policy.batch_size
        if self.cand.n >= b and self.base.n >= b:
            self._close_batch()

    def _close_batch(self) -> None:
        c, b = self.cand, self.base
        for m in LATENCIES:
            if c.logs[m] and b.logs[m]:
                d = sum(c.logs[m]) / len(c.logs[m]) - sum(b.logs[m]) / len(b.logs[m])
                self.tests[m].add(d)
                cut = self._tail_log.get(m)
                if cut is not None:  # the shares above the threshold, candidate's at ×(1+tol)
                    above_c = sum(x > cut + self.tol for x in c.logs[m]) / len(c.logs[m])
                    above_b = sum(x > cut for x in b.logs[m]) / len(b.logs[m])
                    self.tests[f"{m}_tail"].add(above_c - above_b)
        self.tests["errors"].add(c.errors / c.n - b.errors / b.n)
        self.batches += 1
        c.reset_batch()
        b.reset_batch()
        if self.tail_q is not None:
            self._update_thresholds(self.tail_q)

    def _update_thresholds(self, q: float) -> None:
        """The tail threshold of each latency for the next batch: the ``q`` quantile of the
        baseline's last 20 / (1 − q) requests (400 for P95; a recent window, so slow and fast
        minutes move it), once it has 5 / (1 − q). A sort of that window per batch, on the
        rollout's tick, not per request. The threshold only has to be fixed before the batch,
        not exact: a candidate at the tolerance (its latencies divided by 1 + tolerance
        distributed as the baseline's) has the baseline's share above *any* threshold, so
        the test's error bound does not depend on it."""
        window = math.ceil(20 / (1 - q))
        for m in LATENCIES:
            xs = self.base.all[m]
            n = len(xs)
            if n < 5 / (1 - q):
                continue
            recent = sorted(xs[-window:])
            self._tail_log[m] = math.log(
                max(recent[min(len(recent) - 1, int(q * len(recent)))], _FLOOR_S)
            )

    def evidence(self, percentiles: bool = False) -> dict[str, object]:
        """The test's state; with ``percentiles`` also each group's P50/P99 over the step
        (a sort of every observation: for decisions, not for every tick)."""
        alpha = self.policy.alpha / len(self.tests)
        out: dict[str, object] = {
            "step": self.step,
            "batches": self.batches,
            "alpha_per_metric": alpha,
            "candidate": {"requests": self.cand.total, "errors": self.cand.total_errors},
            "baseline": {"requests": self.base.total, "errors": self.base.total_errors},
            "metrics": [t.state(alpha) for t in self.tests.values()],
        }
        for st in out["metrics"]:  # type: ignore[attr-defined]
            name = str(st["metric"])
            if name.endswith("_tail"):
                cut = self._tail_log.get(name.removesuffix("_tail"))
                st["quantile"] = self.tail_q
                st["threshold_ms"] = None if cut is None else math.exp(cut) * 1e3
        if percentiles:
            out["candidate"] = self.cand.summary()
            out["baseline"] = self.base.summary()
        return out

    def enough(self) -> bool:
        """The minimum sample is in: ``min_requests`` of each group, ``min_batches`` batches."""
        return (
            self.cand.total >= self.policy.min_requests
            and self.base.total >= self.policy.min_requests
            and self.batches >= self.policy.min_batches
        )

    def decide(self) -> tuple[Decision, str, dict[str, object]]:
        """(decision, one-line reason, evidence); the evidence of a promote or rollback
        carries the groups' percentiles."""
        ev = self.evidence()
        metrics = ev["metrics"]
        assert isinstance(metrics, list)
        worse = [m for m in metrics if m["verdict"] == "worse"]
        if not self.enough():
            failing = self._failing()
            if failing:
                return "rollback", failing, self.evidence(percentiles=True)
            need = (
                f"{self.cand.total}/{self.policy.min_requests} candidate and "
                f"{self.base.total}/{self.policy.min_requests} baseline requests, "
                f"{self.batches}/{self.policy.min_batches} batches"
            )
            return "continue", f"collecting the minimum sample ({need})", ev
        if worse:
            return (
                "rollback",
                "candidate worse than tolerated: " + ", ".join(_describe(m) for m in worse),
                self.evidence(percentiles=True),
            )
        judged = [m for m in metrics if not self._unmeasured(str(m["metric"]))]
        if all(m["verdict"] == "as_good" for m in judged):
            unmeasured = [str(m["metric"]) for m in metrics if m not in judged]
            return (
                "promote",
                "candidate as good as the baseline on "
                + ", ".join(_describe(m) for m in judged)
                + (f" ({', '.join(unmeasured)}: not measured)" if unmeasured else ""),
                self.evidence(percentiles=True),
            )
        open_ = [str(m["metric"]) for m in metrics if m["verdict"] == "undecided"]
        return "continue", "undecided on " + ", ".join(open_), ev

    def _failing(self) -> str:
        """Before the minimum sample: is the candidate plainly failing? Its error rate's exact
        (Clopper-Pearson) lower bound above the baseline's upper bound plus the tolerance,
        with at least :data:`EARLY_MIN_ERRORS` failed requests (a blip of one or two does not
        decide). The bound is taken at α / metrics / ``min_requests``: a union bound over
        every look up to the minimum sample, after which the paired test decides. A candidate
        that fails outright (its circuits open, routing goes around it) would otherwise never
        reach the minimum sample and wait out ``max_step_s``."""
        c, b = self.cand, self.base
        e, n = c.total_errors, c.total
        if e < EARLY_MIN_ERRORS or n > self.policy.min_requests:
            return ""
        from scipy.stats import beta  # only when a candidate fails: not at the gateway's start

        a = self.policy.alpha / len(self.tests)
        lo = float(beta.ppf(a / self.policy.min_requests, e, n - e + 1))
        hi = 1.0 if not b.total else _upper(b.total_errors, b.total, a)
        if lo <= hi + self.policy.error_tolerance:
            return ""
        return (
            f"candidate failing: {e} of its {n} requests failed (error rate ≥ {lo:.2f}; "
            f"baseline ≤ {hi:.3f} over {b.total}), before the minimum sample"
        )

    def _unmeasured(self, metric: str) -> bool:
        """No request of either group had this latency in the step (TPOT of non-streamed
        answers, TTFT and TPOT of embeddings): nothing to compare, so it does not hold the
        step back. Measured on one side only, it stays undecided."""
        metric = metric.removesuffix("_tail")
        return metric in LATENCIES and not self.cand.all[metric] and not self.base.all[metric]


def _upper(errors: int, n: int, alpha: float) -> float:
    """Clopper-Pearson upper bound of an error rate (one-sided, level ``alpha``)."""
    from scipy.stats import beta

    return 1.0 if errors >= n else float(beta.ppf(1 - alpha, errors + 1, n - errors))


def _describe(m: dict[str, float | int | str]) -> str:
    name = str(m["metric"])
    if name.endswith("_tail"):
        q = float(m["quantile"])
        cut = m.get("threshold_ms")
        at = f" ({float(cut):.4g} ms)" if cut is not None else ""
        return (
            f"{name}: candidate's share above ×{float(m['ratio_tolerated']):.2f} the baseline's "
            f"P{q * 100:g}{at} minus the baseline's share above it {float(m['mean']):+.3f} "
            f"(interval {float(m['low']):+.3f}..{float(m['high']):+.3f}, passes below "
            f"{float(m['margin']):+.3f})"
        )
    if name == "errors":
        return (
            f"errors {float(m['mean']):+.3f} (interval {float(m['low']):+.3f}.."
            f"{float(m['high']):+.3f}, tolerated {float(m['tolerance']):+.3f})"
        )
    return (
        f"{m['metric']} ×{float(m['ratio']):.3f} (interval {float(m['ratio_low']):.3f}.."
        f"{float(m['ratio_high']):.3f}, tolerated ×{float(m['ratio_tolerated']):.3f})"
    )
