"""The rule engine: figures + the rules table → ranked findings, and one run's Diagnosis."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servetune.diagnose.action_build import build_action
from servetune.diagnose.actions import PROCEDURE
from servetune.diagnose.conditions import Condition, fmt_ms, render, template_fields
from servetune.diagnose.failures import gate_run
from servetune.diagnose.figure_table import Figures
from servetune.diagnose.figures import compute_figures
from servetune.diagnose.figures_server import MIN_SAMPLES, read_series_tolerant
from servetune.diagnose.knobs import KnownConfig, known_config
from servetune.diagnose.model import KIND_ORDER, Confidence, Diagnosis, Finding, FindingKind
from servetune.diagnose.rules import (
    CAUSES,
    NEAR_CEILING,
    PREFILL_STALLS,
    RULES,
    SPARE_COMPUTE,
    Rule,
)
from servetune.errors import ServetuneError
from servetune.loadgen.runfile import open_run
from servetune.metrics.timeline import TAIL_RATIO
from servetune.results.io import REQUESTS_FILE, read_records
from servetune.results.record import RequestRecord
from servetune.results.schema import RunResult
from servetune.results.server_series import ServerSample


def _extra(fig: Figures) -> dict[str, Any]:
    """Knob values as words, for templates that name them."""
    cfg = fig.config
    return {
        "quantization": cfg.get("quantization") or "bf16",
        "kv_cache_dtype": cfg.get("kv_cache_dtype") or "auto",
    }


def needs(rule: Rule) -> list[str]:
    """Every figure a rule reads (its conditions and its evidence)."""
    names: list[str] = []
    for c in (*rule.when, *rule.unless):
        names += list(c.figures())
    names += list(rule.only_if) + list(rule.require_any)
    for t in (rule.verdict, *rule.evidence):
        names += template_fields(t)
    return list(dict.fromkeys(n for n in names if n in _known_figures()))


def _known_figures() -> set[str]:
    from servetune.diagnose.figure_table import FIGURES

    return set(FIGURES)


def _cond_line(c: Condition, state: bool | None, fig: Figures, extra: dict[str, Any]) -> str:
    mark = {True: "✓", False: "✗", None: "?"}[state]
    text = render(c.text, fig, extra) if c.text else None
    if text is None:
        text = c.describe()
    if state is None:
        why = "; ".join(
            dict.fromkeys(fig.missing.get(f, f"{f} unknown") for f in c.figures() if not fig.has(f))
        )
        return f"{mark} {c.describe()}: {why}"
    return f"{mark} {text}"


def _validity_low(fig: Figures) -> bool:
    if fig.get("client_behind"):
        return True
    excess = fig.get("prefix_cache_excess")
    if excess is not None and excess > 0:  # the run measured the cache
        return True
    samples = fig.get("server_samples")
    return samples is not None and 0 < samples < MIN_SAMPLES


def evaluate_rule(rule: Rule, fig: Figures) -> Finding | None:
    """The rule's finding on these figures: fired, cannot tell, or None (does not apply)."""
    if any(not fig.has(name) for name in rule.only_if):
        return None
    if any(c.evaluate(fig) is True for c in rule.unless):
        return None
    states = [(c, c.evaluate(fig)) for c in rule.when]
    if any(s is False for _, s in states):
        return None
    extra = _extra(fig)
    unknown_required = [c for c, s in states if s is None and c.if_missing == "cannot_tell"]
    unknown_noted = [c for c, s in states if s is None and c.if_missing == "note"]
    need_any_unmet = bool(rule.require_any) and not any(fig.has(n) for n in rule.require_any)
    missing: list[str] = []
    for c in unknown_required + unknown_noted:
        for f in c.figures():
            if not fig.has(f) and f in fig.missing:
                missing.append(fig.missing[f])
    if need_any_unmet:
        missing += [fig.missing[n] for n in rule.require_any if n in fig.missing]
    missing = list(dict.fromkeys(missing))
    evidence = [e for e in (render(t, fig, extra) for t in rule.evidence) if e]
    used = {n: fig.values[n] for n in needs(rule) if n in fig.values}
    conditions = [_cond_line(c, s, fig, extra) for c, s in states]
    kind: FindingKind
    confidence: Confidence
    if unknown_required or need_any_unmet:
        # What held so far — only when it was seen to hold: with a required condition
        # unknown, the phrase would assert what the run could not show.
        so_far = (
            render(rule.cannot_tell, fig, extra)
            if rule.cannot_tell and not unknown_required
            else None
        )
        title = f"{so_far or rule.id.replace('_', ' ')}: cannot tell"
        title = f"{title} — {missing[0]}" if missing else title
        kind, confidence, action_ids = "cannot_tell", "low", rule.fallback_actions
    else:
        title = render(rule.verdict, fig, extra) or rule.verdict.split("{")[0].rstrip(" :(")
        kind, action_ids = rule.kind, rule.actions
        confidence = "medium" if unknown_noted else "high"
        if _validity_low(fig) and rule.id not in ("client_behind", "prefix_cache_inflated"):
            confidence = "low"
    return Finding(
        rule=rule.id,
        kind=kind,
        title=title,
        seed=rule.seed,
        confidence=confidence,
        priority=rule.priority,
        evidence=evidence,
        conditions=conditions,
        missing=missing,
        needs=needs(rule),
        actions=[a for a in (build_action(a, fig) for a in action_ids) if a is not None],
        figures=used,
    )


def _limiter(found: dict[str, Finding], fig: Figures) -> str:
    """What limits a saturated server, in words, from the other findings and the figures."""
    for rule in CAUSES:
        if rule in found and found[rule].kind == "bottleneck":
            return {
                "kv_pool_full": "the KV pool (see: KV pool full)",
                "batch_capped": "the --max-num-seqs cap (see: batch capped)",
                "prefill_blocked": "long prefills (see: long prefills stall the decodes)",
                "prefill_chunks_stall": "prefill chunks (see: prefill chunks stall the decodes)",
                "short_prompts_wait": "long prefills (see: short prompts wait)",
            }[rule]
    capped = found.get("batch_capped")
    if capped is not None and capped.kind == "cannot_tell":
        cap = fig.get("running_cap")
        return (
            f"the --max-num-seqs cap ({cap:.0f}) as far as the metrics show — whether the GPU "
            "has compute for a bigger batch cannot be told"
            if cap is not None
            else _cap_unknown(fig)
        )
    util = fig.get("gpu_utilization_mean")
    est = fig.get("compute_use_est")
    if (util is not None and util >= 0.9) or (est is not None and est >= SPARE_COMPUTE):
        if est is not None:
            return compute_words(est, fig.get("compute_ceiling"))
        return f"the engine's step time (GPU utilisation {util:.0%})"
    return "not identified from the metrics available"


def compute_near_ceiling(fig: Figures) -> bool:
    """Whether the estimated compute load is near what the engine reaches at best."""
    share = fig.get("compute_of_ceiling")
    return share is not None and share >= NEAR_CEILING


def compute_words(est: float, ceiling: float | None) -> str:
    """The compute limit in words that match the figures: "near its ceiling" only when the
    load is within 15% of what the engine reaches at best (its calibrated MFU)."""
    if ceiling:
        share = est / ceiling
        if share >= NEAR_CEILING:
            return (
                f"the engine's step time: compute is near its ceiling (estimated compute load "
                f"{est:.0%} of peak, {share:.0%} of the ~{ceiling:.0%} this engine reaches on "
                "this GPU)"
            )
        return (
            f"the engine's step time: compute-heavy steps (estimated compute load {est:.0%} of "
            f"peak, {share:.0%} of the ~{ceiling:.0%} this engine reaches — not at its ceiling)"
        )
    return (
        f"the engine's step time (estimated compute load {est:.0%} of peak; what this GPU "
        "reaches at best is unknown)"
    )


def _cap_unknown(fig: Figures) -> str:
    peak = fig.get("running_max")
    seen = f": running requests peaked at {peak:.0f}" if peak is not None else ""
    return (
        f"not identified from the metrics available{seen}, and whether that is the server's "
        '--max-num-seqs is unknown (pass --server-cmd "vllm serve MODEL …")'
    )


def rank(findings: Sequence[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (KIND_ORDER.get(f.kind, 9), -f.priority))


def evaluate(fig: Figures, rules: Sequence[Rule] = RULES) -> list[Finding]:
    """Every rule on one run's figures, ranked; a ``healthy`` finding when no verdict fires."""
    found: dict[str, Finding] = {}
    for rule in rules:
        f = evaluate_rule(rule, fig)
        if f is not None:
            found[rule.id] = f
    over = found.get("overloaded")
    if over is not None and over.kind == "bottleneck":
        over.cause = _limiter(found, fig)
        over.title += f"; limited by {over.cause}"
        if any(found.get(c) is not None and found[c].kind == "bottleneck" for c in CAUSES):
            # The cause's finding carries the cost-ordered fixes; here only what is left.
            over.actions = [a for a in over.actions if a.cost_step >= 3]
    tail = tail_finding(fig, found)
    if tail is not None:
        found[tail.rule] = tail
    findings = rank(list(found.values()))
    if not any(f.kind in ("bottleneck", "warning") for f in findings):
        findings.insert(0, healthy_finding(fig, findings))
    return findings


TAIL_EXPLAINED_BY = (
    "prefill_blocked",
    "prefill_chunks_stall",
    "short_prompts_wait",
    "kv_pool_full",
    "overloaded",
    "burst",
    "client_behind",
)
"""Verdicts that explain a long TPOT/ITL tail themselves (stalls, preemptions, queueing, a
burst, a client that could not keep up)."""


def tail_finding(fig: Figures, found: dict[str, Finding]) -> Finding | None:
    """A P99 TPOT or ITL ≥ 5× its median is never left unexplained: when no verdict that
    explains it fired, say where the slow gaps come from (prefills in the same steps), or that
    the client's data does not show it — a warning, so the run is not called healthy."""
    ratios = {
        "TPOT": (fig.get("tpot_tail_ratio"), fig.get("tpot_p99_ms"), fig.get("tpot_p50_ms")),
        "ITL": (fig.get("itl_tail_ratio"), fig.get("itl_p99_ms"), fig.get("itl_p50_ms")),
    }
    over = {k: v for k, v in ratios.items() if v[0] is not None and v[0] >= TAIL_RATIO}
    if not over:
        return bunched_finding(fig)
    if any(found.get(r) is not None and found[r].kind == "bottleneck" for r in TAIL_EXPLAINED_BY):
        return None
    if any(found.get(r) is not None and found[r].kind == "warning" for r in TAIL_EXPLAINED_BY):
        return None
    parts = [
        f"P99 {name} {fmt_ms(p99 or 0)} = {ratio:.1f}× its median ({fmt_ms(p50 or 0)})"
        for name, (ratio, p99, p50) in over.items()
    ]
    evidence = list(parts)
    for template in (
        "slow gaps (≥ 5× the P50 ITL): {slow_gaps:int}, of which {slow_gaps_at_prefill_share:pct} "
        "came while another request was prefilled",
        "stalls ≥ {stall_limit_ms:ms}: {stalls:int}; {stall_examples}",
        "step budget --max-num-batched-tokens {max_num_batched_tokens:tok}; chunked prefill "
        "{enable_chunked_prefill:flag}",
    ):
        line = render(template, fig)
        if line:
            evidence.append(line)
    share = fig.get("slow_gaps_at_prefill_share")
    seed = "(measurement validity) a tail is a finding: P99 TPOT or ITL ≥ 5× its median"
    if share is not None and share >= PREFILL_STALLS:
        budget = fig.get("max_num_batched_tokens")
        steps = f"of up to {budget:,.0f} tokens " if budget else ""
        title = (
            "; ".join(parts)
            + f": the slow gaps come when prefills {steps}run in the same engine steps as the "
            "decodes (no stall long enough to be a bottleneck)"
        )
        actions = [
            a
            for a in (
                build_action(i, fig) for i in ("shrink_prefill_steps", "long_prefill_threshold")
            )
            if a is not None
        ]
        return Finding(
            rule="latency_tail",
            kind="advisory",
            title=title,
            seed=seed,
            confidence="medium",
            priority=40,
            evidence=evidence,
            actions=actions,
            figures={k: fig.values[k] for k in ("tpot_tail_ratio", "itl_tail_ratio") if fig.has(k)},
        )
    why = (
        "the slow gaps do not line up with prefills"
        if share is not None
        else "the streams' gaps could not be attributed (no per-token times)"
    )
    return Finding(
        rule="latency_tail",
        kind="warning",
        title="; ".join(parts)
        + f": a latency tail whose cause the run's data does not show ({why}) — look for "
        "preemptions, host pauses or another tenant in the server's log before trusting the "
        "median",
        seed=seed,
        confidence="low",
        priority=45,
        evidence=evidence,
        figures={k: fig.values[k] for k in ("tpot_tail_ratio", "itl_tail_ratio") if fig.has(k)},
    )


def bunched_finding(fig: Figures) -> Finding | None:
    """A median ITL of 0 — most chunk gaps are 0: chunks arrived together, several in one
    read — makes the ITL tail's ratio to its median unbounded; it is named, not skipped: the
    tokens come in bunches (the server writes several at once, or they queued before the
    client read them), so ITL shows the bunches' cadence and TPOT is the per-token pace."""
    p50, p99, share = fig.get("itl_p50_ms"), fig.get("itl_p99_ms"), fig.get("itl_zero_share")
    if p50 is None or p50 > 0 or not p99 or share is None:
        return None
    tpot = render("P99 TPOT {tpot_p99_ms:ms} = {tpot_tail_ratio:x} its median", fig)
    return Finding(
        rule="latency_tail",
        kind="advisory",
        title=f"P50 ITL 0, P99 ITL {fmt_ms(p99)}: {share:.0%} of the chunk gaps are 0 — tokens "
        "arrive in bunches, so ITL shows the bunches' cadence and TPOT the per-token pace",
        seed="(measurement validity) a tail is a finding: P99 TPOT or ITL ≥ 5× its median",
        confidence="medium",
        priority=40,
        evidence=[
            f"{share:.0%} of the gaps between content chunks are 0: the chunks arrived together "
            "(the server writes several tokens at once — a stream interval above 1 — or they "
            "queued before the client read them)",
            *([tpot] if tpot else []),
        ],
        figures={k: fig.values[k] for k in ("itl_zero_share", "tpot_tail_ratio") if fig.has(k)},
    )


def healthy_finding(fig: Figures, others: Sequence[Finding]) -> Finding:
    parts = []
    for name, text in (
        ("kv_mean", "KV-cache use mean {kv_mean:pct}"),
        ("preemptions", "{preemptions:int} preemptions"),
        ("served_sent_ratio", "kept up with the offered load"),
        ("ttft_p99_ms", "P99 TTFT {ttft_p99_ms:ms}"),
        ("tpot_p99_ms", "P99 TPOT {tpot_p99_ms:ms}"),
    ):
        if fig.has(name):
            line = render(text, fig)
            if line:
                parts.append(line)
    unknown = [f for f in others if f.kind == "cannot_tell"]
    tail = next((f for f in others if f.rule == "latency_tail"), None)
    if tail is not None:
        parts = [p for p in parts if not p.startswith("P99 TPOT")] + [tail.title]
    title = "Healthy: no bottleneck found"
    if unknown:
        title += f" (but {len(unknown)} rule(s) could not be evaluated)"
    return Finding(
        rule="healthy",
        kind="healthy",
        title=title + (" — " + ", ".join(parts) if parts else ""),
        seed="find the bottleneck before you tune: none of the seed's rules fired",
        evidence=parts,
        confidence="high" if not unknown else "medium",
    )


def headline(findings: Sequence[Finding]) -> str:
    if not findings:
        return "no finding"
    top = findings[0]
    line = top.title
    if top.kind in ("bottleneck", "warning") and top.actions:
        line += f" → {top.actions[0].title}"
    return line


def run_diagnosis(
    findings: list[Finding],
    fig: Figures,
    known: KnownConfig,
    notes: list[str],
    path: str | None,
) -> Diagnosis:
    """The diagnosis of one run (or one recorded window): its ranked findings, every figure
    and why the missing ones are missing, the knobs known, the seed's procedure."""
    return Diagnosis(
        kind="run",
        path=path,
        headline=headline(findings),
        healthy=findings[0].kind == "healthy" if findings else True,
        findings=findings,
        figures=dict(fig.values),
        missing=dict(fig.missing),
        knobs=dict(known.values),
        procedure=list(PROCEDURE),
        notes=notes,
    )


def diagnose_loaded(
    run: RunResult,
    records: Sequence[RequestRecord],
    samples: Sequence[ServerSample],
    config: KnownConfig | None = None,
    series_error: str | None = None,
    path: str | None = None,
    records_error: str | None = None,
) -> Diagnosis:
    """Diagnose one run already in memory (``records_error``: why requests.jsonl could not be
    read, when it could not)."""
    known = known_config(run, config)
    fig = compute_figures(run, records, samples, known, series_error, records_error)
    findings = evaluate(fig)
    notes = []
    if records_error:
        notes.append(records_error)
    if series_error:
        notes.append(series_error)
    if known.defaults_assumed:
        notes.append(
            "knobs not on the command line taken at vLLM's defaults for the GPU: "
            + ", ".join(f"{k}={v}" for k, v in known.defaults_assumed.items())
        )
    if known.known:
        notes.append(f"engine configuration from {known.source}")
    diag = run_diagnosis(findings, fig, known, notes, path)
    # Failures above --max-failure-rate are the finding (no capacity advice); a cut-short
    # run says so first.
    return gate_run(diag, run)


def load_run(
    run_dir: Path,
) -> tuple[RunResult, list[RequestRecord], list[ServerSample], str | None, str | None]:
    """The run, its records, its server series, and why the series / the records could not
    be read (diagnose goes on without them, and says so)."""
    run = open_run(run_dir)  # a run cut short: summarised from its records
    records_error = None
    try:
        records = read_records(run_dir)
    except ServetuneError as exc:
        records = []
        records_error = f"{REQUESTS_FILE} could not be read ({exc.message})"
    samples, err = read_series_tolerant(run_dir)
    return run, records, samples, err, records_error


def diagnose_run(run_dir: str | Path, config: KnownConfig | None = None) -> Diagnosis:
    """Diagnose one RUN_DIR."""
    d = Path(run_dir).expanduser()
    run, records, samples, err, records_err = load_run(d)
    return diagnose_loaded(
        run, records, samples, config, err, path=str(d), records_error=records_err
    )
