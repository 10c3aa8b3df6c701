"""``servetune sim calibrate RUN_OR_SWEEP... [--out PROFILE]``: print and write the profile."""

from __future__ import annotations

import argparse
import sys

from servetune.results.calibration_file import FIGURES, CalibrationProfile, write_calibration

_SHORT = {
    "output_throughput": "tok/s",
    "mean_ttft_ms": "TTFT",
    "p99_ttft_ms": "P99 TTFT",
    "mean_tpot_ms": "TPOT",
    "p99_tpot_ms": "P99 TPOT",
}


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1%}"


def _abs(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def render(p: CalibrationProfile) -> list[str]:
    cal = p.calibration
    dep = cal.deployment
    lines = [
        f"calibration {cal.id}: {dep.engine} serving {dep.model} on {dep.device.name}"
        f" (TP {dep.tensor_parallel_size})",
    ]
    if dep.device.kind == "cpu":
        lines.append(
            f"  device: {dep.device.peak_tflops * 1e3:.1f} GFLOP/s, {dep.device.memory_gb_s:.1f} "
            f"GB/s ({dep.device.source})"
        )
    if cal.kv_cache_tokens:
        lines.append(f"  KV pool: {cal.kv_cache_tokens} tokens (as the server reported it)")
    lines.append("constants:")
    for c in p.fitted:
        se = ""
        if c.std_error is not None and c.value:
            se = f" ± {c.std_error / abs(c.value):.0%}"
        how = "" if c.how == "fitted" else f"  ({c.how}: not identified)"
        note = f"  — {c.note}" if c.how == "fitted" and c.note else ""
        lines.append(f"  {c.name:<26}{c.value:>12.4g}{se:>8}{how}{note}")
    lines.append("evidence:")
    for e in p.evidence:
        why = f" — {e.reason}" if e.reason else ""
        lines.append(f"  {e.role:<9} {e.label} ({e.requests} requests){why}")
    lines.append(p.holdout)
    head = f"  {'run':<28}{'role':<10}" + "".join(f"{_SHORT[f]:>10}" for f in FIGURES)
    lines.append("error (simulated vs measured):")
    lines.append(head)
    for err in p.errors:
        lines.append(
            f"  {err.label[:27]:<28}{err.role:<10}"
            + "".join(f"{_pct(err.error[f]):>10}" for f in FIGURES)
        )
    lines.append(
        f"  {'median |error| in-sample':<38}"
        + "".join(f"{_abs(p.in_sample.get(f)):>10}" for f in FIGURES)
    )
    lines.append(
        f"  {'median |error| held out':<38}"
        + "".join(f"{_abs(p.held_out.get(f)):>10}" for f in FIGURES)
    )
    if any(v is not None for v in p.catalog_held_out.values()):
        lines.append(
            f"  {'held out, catalog constants':<38}"
            + "".join(f"{_abs(p.catalog_held_out.get(f)):>10}" for f in FIGURES)
        )
    if any(v is not None for v in p.noise.values()):
        lines.append(
            f"  {'run-to-run noise (repeats)':<38}"
            + "".join(f"{_abs(p.noise.get(f)):>10}" for f in FIGURES)
        )
    for w in p.warnings:
        lines.append(f"warning: {w}")
    lines.append(f"took {p.took_s:.1f} s")
    return lines


def run_calibrate(args: argparse.Namespace) -> int:
    from servetune.calibrate import calibrate

    say = (lambda _m: None) if args.no_progress else (lambda m: print(m, file=sys.stderr))
    profile = calibrate(
        args.runs,
        server_cmd=args.server_cmd,
        gpu=args.gpu,
        model=args.model,
        engine_version=args.engine_version,
        holdout=args.hold_out,
        name=args.name,
        progress=say,
    )
    path = write_calibration(args.out, profile)
    if args.json:
        print(profile.model_dump_json(indent=2))
    else:
        print("\n".join(render(profile)))
    print(f"profile: {path}  (use it: --calibration {path})")
    return 0
