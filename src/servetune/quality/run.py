"""The whole quality check: both endpoints opened, the baseline scored twice (the second pass
in reverse order) and the candidate once on the same texts, greedy outputs of both (the
baseline twice), the business samples on all three, then the verdict
(:mod:`servetune.quality.verdict`)."""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from servetune.quality.compare import PairStats, compare_greedy, compare_scored
from servetune.quality.endpoint import Endpoint, Generated, Scored
from servetune.quality.inputs import Sample
from servetune.quality.verdict import MetricResult, Thresholds, overall, paired_metric
from servetune.results.quality_file import (
    EndpointInfo,
    GreedyPair,
    QualityReport,
    SampleResult,
)

Say = Callable[[str], None]


async def _all(coros: Sequence[Any]) -> list[Any]:
    return list(await asyncio.gather(*coros))


def _prompt_of(text: str) -> str:
    words = text.split()
    return " ".join(words[: max(3, len(words) // 2)])


async def check(
    baseline: Endpoint,
    candidate: Endpoint,
    texts: list[str],
    texts_source: str,
    samples: list[Sample],
    thresholds: Thresholds,
    greedy_tokens: int = 32,
    say: Say | None = None,
) -> QualityReport:
    t0 = time.perf_counter()
    tell = say or (lambda _m: None)
    not_run: dict[str, str] = {}
    notes: list[str] = []
    async with baseline, candidate:
        await asyncio.gather(baseline.open(), candidate.open())
        scores: dict[str, list[Scored]] = {}
        can_score = baseline.flavor is not None and candidate.flavor is not None
        if not can_score:
            who = [e for e in (baseline, candidate) if e.flavor is None]
            why = "; ".join(f"{e.name} {e.root}: {e.why_no_logprobs}" for e in who)
            not_run["perplexity"] = not_run["kl"] = not_run["top1"] = why
        else:
            tell(f"scoring {len(texts)} texts: baseline ({baseline.flavor})")
            scores["a"] = await _all([baseline.score(t) for t in texts])
            tell("scoring again: baseline, reverse order (the noise floor)")
            scores["a2"] = list(reversed(await _all([baseline.score(t) for t in reversed(texts)])))
            tell(f"scoring: candidate ({candidate.flavor})")
            scores["b"] = await _all([candidate.score(t) for t in texts])
        prompts = [_prompt_of(t) for t in texts]
        tell(f"greedy outputs of {len(prompts)} prompts ({greedy_tokens} tokens)")
        gen_a = await _all([baseline.generate(p, greedy_tokens) for p in prompts])
        gen_a2 = await _all([baseline.generate(p, greedy_tokens) for p in reversed(prompts)])
        gen_a2.reverse()
        gen_b = await _all([candidate.generate(p, greedy_tokens) for p in prompts])
        sample_out: list[tuple[Generated, Generated, Generated]] = []
        if samples:
            tell(f"business samples: {len(samples)}")
            sa = await _all([baseline.generate(s.prompt, s.max_tokens) for s in samples])
            sa2 = await _all([baseline.generate(s.prompt, s.max_tokens) for s in samples])
            sb = await _all([candidate.generate(s.prompt, s.max_tokens) for s in samples])
            sample_out = list(zip(sa, sa2, sb, strict=True))
    metrics: list[MetricResult] = []
    ppl: dict[str, float | None] = {}
    if scores:
        cand = [compare_scored(a, b) for a, b in zip(scores["a"], scores["b"], strict=True)]
        floor = [compare_scored(a, b) for a, b in zip(scores["a"], scores["a2"], strict=True)]
        metrics += _logprob_metrics(cand, floor, thresholds, notes)
        n = sum(c.tokens for c in cand)
        if n:
            ppl = {
                "baseline": math.exp(sum(c.nll_a for c in cand) / n),
                "baseline_again": math.exp(sum(f.nll_b for f in floor) / n),
                "candidate": math.exp(sum(c.nll_b for c in cand) / sum(c.tokens for c in cand)),
            }
    else:
        for name, label, unit, th in (
            ("perplexity", "perplexity", "share", thresholds.max_ppl_increase),
            ("kl", "KL divergence", "nats", thresholds.max_kl),
            ("top1", "top-1 disagreement", "share", 1 - thresholds.min_top1),
        ):
            metrics.append(
                MetricResult(
                    name=name,
                    label=label,
                    unit=unit,
                    status="not_run",
                    threshold=th,
                    why=not_run.get(name),
                )
            )
    greedy = [
        GreedyPair(
            prompt=p,
            baseline=a.text,
            candidate=b.text,
            **vars(compare_greedy(a, b)),
        )
        for p, a, b in zip(prompts, gen_a, gen_b, strict=True)
    ]
    floor_g = [compare_greedy(a, a2) for a, a2 in zip(gen_a, gen_a2, strict=True)]
    metrics.append(
        paired_metric(
            "greedy",
            "greedy outputs differing",
            "share",
            [0.0 if g.exact else 1.0 for g in greedy],
            [0.0 if g.exact else 1.0 for g in floor_g],
            [1.0] * len(greedy),
            1 - (thresholds.min_greedy_match if thresholds.min_greedy_match is not None else 0.0),
            gated=thresholds.min_greedy_match is not None,
            bounds=(-1.0, 1.0),
        )
    )
    sample_results = [
        _sample(s, a, a2, b) for s, (a, a2, b) in zip(samples, sample_out, strict=True)
    ]
    if samples:
        metrics.append(_samples_metric(sample_results, thresholds))
    verdict, reason = overall(metrics)
    floor_ppl = next((m for m in metrics if m.name == "perplexity"), None)
    if floor_ppl and floor_ppl.floor and abs(floor_ppl.floor) > thresholds.max_ppl_increase / 2:
        notes.append(
            f"the baseline disagrees with itself by {floor_ppl.floor:+.2%} in perplexity: "
            "differences below that cannot be resolved"
        )
    return QualityReport(
        verdict=verdict,
        reason=reason,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        command=["servetune", *sys.argv[1:]],
        baseline=EndpointInfo(
            url=baseline.url,
            model=baseline.model,
            logprobs=baseline.flavor,
            why_no_logprobs=baseline.why_no_logprobs,
        ),
        candidate=EndpointInfo(
            url=candidate.url,
            model=candidate.model,
            logprobs=candidate.flavor,
            why_no_logprobs=candidate.why_no_logprobs,
        ),
        texts=texts_source,
        thresholds=thresholds.model_dump(),
        metrics=[m.model_dump(mode="json") for m in metrics],
        perplexity=ppl,
        greedy=greedy,
        samples=sample_results,
        not_run=not_run,
        notes=notes,
        elapsed_s=time.perf_counter() - t0,
    )


def _logprob_metrics(
    cand: list[PairStats], floor: list[PairStats], th: Thresholds, notes: list[str]
) -> list[MetricResult]:
    out = [
        paired_metric(
            "perplexity",
            "perplexity increase",
            "share",
            [c.nll_b - c.nll_a for c in cand],
            [f.nll_b - f.nll_a for f in floor],
            [c.tokens for c in cand],
            th.max_ppl_increase,
            transform=lambda x: math.exp(x) - 1,
        )
    ]
    both = [(c, f) for c, f in zip(cand, floor, strict=True) if c.aligned and f.aligned]
    if len(both) < len(cand):
        notes.append(
            f"{len(cand) - len(both)} of {len(cand)} texts were tokenized differently by the two "
            "endpoints: KL and top-1 leave them out"
        )
    misses = sum(c.misses_a + c.misses_b for c in cand)
    if misses:
        notes.append(
            f"{misses} token(s) lay beyond every top-k asked: their logprob is taken as the "
            "k-th (perplexity is then a lower bound)"
        )
    if both:
        out.append(
            paired_metric(
                "kl",
                "KL divergence",
                "nats",
                [c.kl_sum for c, _ in both],
                [f.kl_sum for _, f in both],
                [c.kl_n for c, _ in both],
                th.max_kl,
            )
        )
        out.append(
            paired_metric(
                "top1",
                "top-1 disagreement",
                "share",
                [c.top1_n - c.top1_same for c, _ in both],
                [f.top1_n - f.top1_same for _, f in both],
                [c.top1_n for c, _ in both],
                1 - th.min_top1,
                bounds=(-1.0, 1.0),
            )
        )
    return out


def _sample(s: Sample, a: Generated, a2: Generated, b: Generated) -> SampleResult:
    pa, pa2, pb = s.passes(a.text), s.passes(a2.text), s.passes(b.text)
    if pa != pa2:
        outcome = "flaky"
    elif pa and not pb:
        outcome = "regression"
    elif not pa and pb:
        outcome = "improvement"
    elif not pa:
        outcome = "fails_both"
    else:
        outcome = "ok"
    return SampleResult(
        name=s.name,
        check=s.check,
        baseline=pa,
        baseline_again=pa2,
        candidate=pb,
        outcome=outcome,  # type: ignore[arg-type]
        baseline_output=a.text[:500],
        candidate_output=b.text[:500],
    )


def _samples_metric(results: list[SampleResult], th: Thresholds) -> MetricResult:
    reg = sum(r.outcome == "regression" for r in results)
    flaky = sum(r.outcome == "flaky" for r in results)
    judged = len(results) - flaky
    status = "fail" if reg > th.max_sample_regressions else "pass"
    why = f"{reg} regression(s), {flaky} flaky on the baseline (left out), {judged} judged"
    passing = sum(r.outcome in ("ok", "regression") for r in results)
    if status == "pass" and judged < max(1, len(results) // 2):
        status = "inconclusive"
        why += ": most samples disagree with themselves on the baseline"
    elif status == "pass" and passing == 0:
        # a candidate cannot regress on samples the baseline fails: nothing was checked
        status = "inconclusive"
        why += ": the baseline passes none of them, so none can show a regression"
    return MetricResult(
        name="samples",
        label="business samples",
        unit="count",
        status=status,  # type: ignore[arg-type]
        candidate=float(reg),
        floor=float(flaky),
        excess=None,
        threshold=float(th.max_sample_regressions),
        texts=len(results),
        why=why,
    )
