"""``tune``'s terminal summary."""

from __future__ import annotations

from servetune.results.tune_file import TuneResult, config_text
from servetune.sweep import fmt


def render_result(r: TuneResult) -> str:
    out = ["", f"servetune tune — {r.spec.model} on {r.spec.engine}: {r.status}"]
    counts: dict[str, int] = {}
    for t in r.trials:
        counts[t.status] = counts.get(t.status, 0) + 1
    out.append("trials: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
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
    if r.ofat:
        at = f"{fmt.num(r.ofat_rate)} req/s, " if r.ofat_rate else ""
        out.append(f"one knob at a time around the best (at {at}the rate it held in every repeat):")
        out.append(
            f"  {'knob':<30}{'P50 TTFT':>10}{'P99 TTFT':>10}{'P99 TPOT':>10}{'tok/s':>9}"
            f"{'KV':>6}  SLOs"
        )
        for o in r.ofat:
            f = o.figures
            kv = f.get("kv_cache_usage_mean")
            name = "best" if o.direction == "best" else f"{o.knob}={o.value} ({o.direction})"
            out.append(
                f"  {name:<30}{fmt.ms(f.get('p50_ttft_ms')):>10}{fmt.ms(f.get('p99_ttft_ms')):>10}"
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
