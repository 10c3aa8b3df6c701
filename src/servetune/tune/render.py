"""``tune``'s terminal summary."""

from __future__ import annotations

from servetune.results.tune_file import OfatRow, TuneResult, config_text
from servetune.sweep import fmt


def ofat_label(o: OfatRow) -> str:
    """A row of the one-knob table: the knob's step, with its direction on the knob's grid (a
    switch has no up or down: it is turned on or off)."""
    if o.direction == "best":
        return "best"
    if isinstance(o.value, bool):
        return f"{o.knob}={o.value}"
    return f"{o.knob}={o.value} ({o.direction})"


def render_result(r: TuneResult) -> str:
    out = ["", f"servetune tune — {r.spec.model} on {r.spec.engine}: {r.status}"]
    counts: dict[str, int] = {}
    for t in r.trials:
        counts[t.status] = counts.get(t.status, 0) + 1
    out.append("trials: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    if r.spec.calibration_ref is not None:
        out.append(r.spec.calibration_ref.describe())
    refined = [t for t in r.trials if t.role == "refine"]
    if refined:
        around = sorted({t.refined_from for t in refined if t.refined_from is not None})
        out.append(
            f"local refinement: {len(refined)} one-knob neighbours of the best so far (trial "
            + ", ".join(str(n) for n in around)
            + ") measured"
        )
    out.append(r.verdict)
    if r.best_command:
        out.append(f"command: {r.best_command}")
    if r.repeats:
        out.append(f"repeats (ranked by median − {r.spec.mad_k:g}·MAD):")
        for x in r.repeats:
            vals = ", ".join(fmt.num(v) for v in x.values)
            flag = "  UNSTABLE" if x.unstable else ""
            out.append(
                f"  {fmt.num(x.score):>8}  [{vals}]  {config_text(x.config)}{flag}"
                + (f"  ({x.note})" if x.note else "")
            )
    if r.confirmations:
        n = r.confirmations[0].length
        out.append(f"checked on probes {n}× as long (SLO-max req/s, reported → held):")
        for c in r.confirmations:
            held = "failed" if c.sustained is None else fmt.num(c.sustained)
            if c.sustained and c.noise is not None:
                held += f" ({c.draws} draw{'s' if c.draws > 1 else ''})"
            out.append(
                f"  {fmt.num(c.reported):>8} → {held:<8} {config_text(c.config)}"
                + (f"  ({c.note})" if c.note else "")
            )
    if r.ofat:
        at = f"{fmt.num(r.ofat_rate)} req/s, " if r.ofat_rate else ""
        out.append(f"one knob at a time around the best (at {at}the rate it held in every repeat):")
        names = [ofat_label(o) for o in r.ofat]
        width = max(30, *(len(n) + 2 for n in names))
        out.append(
            f"  {'knob':<{width}}{'P50 TTFT':>10}{'P99 TTFT':>10}{'P99 TPOT':>10}{'tok/s':>9}"
            f"{'KV':>6}  SLOs"
        )
        for o, name in zip(r.ofat, names, strict=True):
            f = o.figures
            kv = f.get("kv_cache_usage_mean")
            out.append(
                f"  {name:<{width}}{fmt.ms(f.get('p50_ttft_ms')):>10}"
                f"{fmt.ms(f.get('p99_ttft_ms')):>10}"
                f"{fmt.ms(f.get('p99_tpot_ms')):>10}{fmt.num(f.get('output_throughput')):>9}"
                f"{'–' if kv is None else f'{kv:.0%}':>6}  {o.status}"
            )
    if r.validation:
        out.append("validated on the real engine (SLO-max req/s, simulated → measured):")
        for v in r.validation:
            out.append(
                f"  {fmt.num(v.simulated):>8} → {fmt.num(v.measured):<8} {v.status:<9} "
                f"{config_text(v.config)}" + (f"  [{v.reason}]" if v.reason else "")
            )
    for w in r.warnings:
        out.append(f"warning: {w}")
    return "\n".join(out)
