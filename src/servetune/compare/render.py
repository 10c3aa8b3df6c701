"""``compare`` for a person: the terminal text (the HTML page is :mod:`.html`)."""

from __future__ import annotations

import math

from servetune.compare.figures import FIGURES
from servetune.compare.model import Estimate, FigureResult, PairComparison, SweepComparison
from servetune.sweep import fmt

_ORDER = [f.key for f in FIGURES]


def value(v: float | None, unit: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if unit == "ms":
        return fmt.ms(v)
    if unit == "0–1":
        return f"{v:.1%}"
    return fmt.num(v)


def signed(v: float | None, unit: str) -> str:
    if v is None:
        return "–"
    text = value(abs(v), unit)
    return ("+" if v >= 0 else "−") + text


def interval(f: FigureResult) -> str:
    if f.ci_low is None or f.ci_high is None:
        return ""
    return f"[{signed(f.ci_low, f.unit)} … {signed(f.ci_high, f.unit)}]"


def _mark(f: FigureResult) -> str:
    return {
        "better": "better",
        "worse": "WORSE",
        "same": "·",
        "not measured": "",
        "past capacity": "(past capacity: not tested)",
        "cannot tell": "(run too short: not tested)",
    }[f.verdict]


def figure_table(figures: dict[str, FigureResult], headline_only: bool = False) -> list[str]:
    rows = [(k, figures[k]) for k in _ORDER if k in figures]
    if headline_only:
        rows = [(k, f) for k, f in rows if f.headline]
    lines = [f"  {'figure':<18}{'A':>11}{'B':>11}{'B − A':>12}{'':>9}  {'95% interval':<26}verdict"]
    for _key, f in rows:
        rel = "" if f.rel is None else f"({f.rel:+.1%})".replace("-", "−")
        lines.append(
            f"  {f.label:<18}{value(f.a, f.unit):>11}{value(f.b, f.unit):>11}"
            f"{signed(f.delta, f.unit):>12}{rel:>9}  {interval(f):<26}{_mark(f)}"
        )
    return lines


def render_pair(pc: PairComparison, detail: bool = True) -> str:
    out = [f"servetune compare — A: {pc.a}   B: {pc.b}"]
    refusals = [d for d in pc.differences if d.severity == "refuse"]
    notes = [d for d in pc.differences if d.severity != "refuse"]
    if refusals:
        out.append(
            ("NOT COMPARABLE" if not pc.forced else "not comparable (compared anyway: --force)")
            + ":"
        )
        out += [f"  - {d.text()}" for d in refusals]
    else:
        out.append("comparable: same workload, arrivals, model and warm-up")
    out += [f"  note: {d.text()}" for d in notes]
    if pc.flags:
        out.append("engine flags that differ:")
        out += [
            f"  {d.flag}: {d.a if d.a is not None else 'unset'} → "
            f"{d.b if d.b is not None else 'unset'}  ({d.source})"
            for d in pc.flags
        ]
    elif pc.flags_recorded:
        out.append("engine flags: none of those recorded differ")
    else:
        out.append(
            "engine flags: not recorded by either run (no simulated-engine config, server "
            "command or /metrics cache info)"
        )
    if not pc.comparable:
        out.append(pc.verdict)
        return "\n".join(out)
    if pc.slo:
        out.append("goodput SLO: " + ", ".join(f"{k} ≤ {v:g} ms" for k, v in pc.slo.items()))
    out.append("")
    out.append("headline figures (their intervals hold together at 95%):")
    out += figure_table(pc.figures, headline_only=True)
    if detail:
        rest = {k: f for k, f in pc.figures.items() if not f.headline}
        if rest:
            out.append("other figures (a second family, same rule):")
            out += figure_table(rest)[1:]
    out.append("")
    out.append(f"verdict: {pc.verdict}")
    for w in pc.warnings:
        out.append(f"warning: {w}")
    m = pc.method
    crit = ", ".join(f"{k} c={v:.2f} ({m.rule.get(k, '')})" for k, v in m.family_critical.items())
    flips = any(r.startswith("sign-flip") for r in m.rule.values())
    tested = (
        "nothing tested: too few blocks"
        if m.too_short
        else (f"{m.replicates} sign patterns" if flips else "Student's t")
    )
    out.append(
        f"method: {m.windows} windows of {m.window_s[0]:.2f}/{m.window_s[1]:.2f} s, "
        f"{m.blocks} aligned blocks of {m.block_windows} ({m.arrival_blocks} over the "
        f"arrivals; ≥ 2 decodes of {m.decode_s:.1f} s unless both runs were past capacity); "
        f"{m.name} ({tested}{'; ' + crit if crit else ''})"
    )
    return "\n".join(out)


def estimate(e: Estimate, unit: str) -> str:
    if e.value is None:
        return e.status or "–"
    text = f"{fmt.num(e.value)} {unit}"
    if e.low is not None and e.high is not None:
        text += f" [{fmt.num(e.low)} … {fmt.num(e.high)}]"
    if e.status:
        text += f" ({e.status})"
    return text


def shift(e: Estimate, unit: str) -> str:
    if e.value is None:
        return e.status or "–"
    text = f"{e.value:+.3g} {unit}"
    if e.low is not None and e.high is not None:
        text += f" [{e.low:+.3g} … {e.high:+.3g}]"
    return text


def render_sweep(sc: SweepComparison) -> str:
    unit = "req/s" if sc.mode == "rate" else "(concurrency)"
    out = [f"servetune compare — sweep A: {sc.a}   sweep B: {sc.b}"]
    refusals = [d for d in sc.differences if d.severity == "refuse"]
    if refusals:
        out.append("NOT COMPARABLE:" if not sc.forced else "not comparable (--force):")
        out += [f"  - {d.text()}" for d in refusals]
    out += [f"  note: {d.text()}" for d in sc.differences if d.severity != "refuse"]
    if sc.flags:
        out.append("engine flags that differ:")
        out += [f"  {d.flag}: {d.a} → {d.b}  ({d.source})" for d in sc.flags]
    if not sc.comparable:
        out.append(sc.verdict)
        return "\n".join(out)
    out.append("")
    out.append(
        f"  {'load':>8} | {'req/s A':>8} {'B':>8} | {'P99 TTFT A':>10} {'B':>9} | "
        f"{'P99 TPOT A':>10} {'B':>9} | {'P99 E2E A':>10} {'B':>9} | differs"
    )
    for r in sc.rows:
        load = r.load if isinstance(r.load, str) else fmt.num(r.load)
        sig = [k for k, v in r.significant.items() if v]
        out.append(
            f"  {load:>8} | {fmt.num(r.a.get('request_throughput')):>8} "
            f"{fmt.num(r.b.get('request_throughput')):>8} | "
            f"{fmt.ms(r.a.get('p99_ttft_ms')):>10} {fmt.ms(r.b.get('p99_ttft_ms')):>9} | "
            f"{fmt.ms(r.a.get('p99_tpot_ms')):>10} {fmt.ms(r.b.get('p99_tpot_ms')):>9} | "
            f"{fmt.ms(r.a.get('p99_e2el_ms')):>10} {fmt.ms(r.b.get('p99_e2el_ms')):>9} | "
            f"{', '.join(sig) if sig else '·'}"
        )
    out.append("")
    out.append(f"knee A      {estimate(sc.knee_a, 'req/s')}")
    out.append(f"knee B      {estimate(sc.knee_b, 'req/s')}")
    out.append(f"knee shift  {shift(sc.knee_shift, 'req/s')}")
    if sc.slo:
        out.append("SLO: " + ", ".join(f"P99 {k} ≤ {v:g} ms" for k, v in sc.slo.items()))
        out.append(f"SLO-max A      {estimate(sc.slo_max_a, unit)}")
        out.append(f"SLO-max B      {estimate(sc.slo_max_b, unit)}")
        out.append(f"SLO-max shift  {shift(sc.slo_max_shift, unit)}")
    out.append(
        "  (A's and B's intervals: within each sweep's runs, a lower bound; the shifts': "
        "against run-to-run noise)"
    )
    out.append("")
    out.append(f"verdict: {sc.verdict}")
    for w in sc.warnings:
        out.append(f"warning: {w}")
    return "\n".join(out)
