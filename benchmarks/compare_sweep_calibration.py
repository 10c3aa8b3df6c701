"""compare's sweep shifts checked by repetition: how often two sweeps of one configuration
(different seeds) come out "moved", and how often a real change does.

Usage::

    nice -n 10 .venv/bin/python benchmarks/compare_sweep_calibration.py            # all
    nice -n 10 .venv/bin/python benchmarks/compare_sweep_calibration.py \\
        --scenarios qwen14b-h100-long --pairs 20 --power-pairs 6 --out /tmp/cal.jsonl

Each scenario sweeps one model × GPU of the simulated engine's catalogue on its virtual
clock (the sweep runner with ``offline_runner``, as ``servetune sweep --sim-offline``), its
rate ladder crossing the engine's capacity. Per scenario:

* ``--pairs`` A/A pairs: the same configuration with seeds ``s`` and ``s + 1``, compared with
  :func:`servetune.compare.sweeps.compare_sweeps` (levels too). Counted: the knee called
  moved, the SLO-max called moved, the SLO-max's interval alone excluding 0 (before the level
  check holds it back), and the levels whose run comparison calls a headline figure
  different (and those it cannot tell).
* ``--power-pairs`` pairs with a real change (the scenario's ``change``: max-num-seqs or
  the GPU): the share called moved.
* For every level, the swap null's block (seconds) against the longer run's median decode
  (first to last token): blocks shorter than a request's life share their load with the next.

Prints one line per pair and a table per scenario: the false-"moved" share with its exact
(Clopper–Pearson) 95% interval and the one-sided p-value of seeing that many or more were
the true rate 5%. ``--out`` also writes every pair as a JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from scipy.stats import beta, binom

from servetune.compare.inputs import SweepInput, load
from servetune.compare.runs import paired_windows
from servetune.compare.swap import LevelSwap
from servetune.compare.sweeps import CURVE_FIGS, _by_load, compare_sweeps
from servetune.results.schema import BenchConfig, Slo
from servetune.results.sweep_schema import SweepConfig
from servetune.sim.config import EngineConfig
from servetune.sweep.runner import run_sweep
from servetune.sweep.targets import offline_runner


@dataclass
class Scenario:
    bench: dict[str, Any]
    engine: dict[str, Any]
    rates: list[float]
    slo: Slo
    change: tuple[dict[str, Any], dict[str, Any]]
    """A's and B's engine overrides for the power pairs."""
    num_prompts: int = 400


SCENARIOS: dict[str, Scenario] = {
    # short requests on a small GPU: capacity ~2.9 req/s
    "llama8b-l4": Scenario(
        bench=dict(random_input_len=512, random_output_len=128),
        engine=dict(gpu="L4", model="meta-llama/Llama-3.1-8B-Instruct", max_model_len=4096),
        rates=[0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0],
        slo=Slo(ttft=1000, tpot=100),
        change=(dict(max_num_seqs=16), dict(max_num_seqs=128)),
    ),
    # long outputs: a request decodes for 30-90 s, as long as a swap block or longer
    "qwen14b-h100-long": Scenario(
        bench=dict(random_input_len=256, random_output_len=1024),
        engine=dict(gpu="H100-SXM", model="Qwen/Qwen2.5-14B-Instruct"),
        rates=[0.5, 1.0, 2.0, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0],
        slo=Slo(ttft=1000, tpot=20),
        change=(dict(max_num_seqs=32), dict(max_num_seqs=128)),
    ),
    # long prompts, short outputs: prefill-bound, capacity ~1.2 req/s
    "mistral-a10g-prefill": Scenario(
        bench=dict(random_input_len=2048, random_output_len=64),
        engine=dict(gpu="A10G", model="mistralai/Mistral-7B-Instruct-v0.3", max_model_len=4096),
        rates=[0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5],
        slo=Slo(ttft=4000, tpot=250),
        change=(dict(), dict(gpu="A10")),
    ),
}


def sweep(path: Path, sc: Scenario, seed: int, engine: dict[str, Any]) -> SweepInput:
    cfg = SweepConfig(
        bench=BenchConfig(num_prompts=sc.num_prompts, seed=seed, goodput=sc.slo, **sc.bench),
        request_rates=list(sc.rates),
        target="offline",
    )
    run_sweep(cfg, path, offline_runner(EngineConfig(**engine)), echo=lambda _m: None)
    got = load(path)
    assert isinstance(got, SweepInput)
    return got


@dataclass
class PairResult:
    scenario: str
    kind: str
    seed: int
    knee_moved: bool
    slo_moved: bool
    slo_interval_excludes_0: bool
    knee: tuple[float | None, float | None, float | None]
    slo_max: tuple[float | None, float | None, float | None]
    levels: int
    levels_different: list[str] = field(default_factory=list)
    levels_cannot_tell: int = 0
    blocks: list[tuple[float, float, float, int]] = field(default_factory=list)
    """Per level: load, swap block (s), median decode (s), blocks over the run."""
    seconds: float = 0.0


def swap_blocks(a: SweepInput, b: SweepInput, slo: Slo) -> list[tuple[float, float, float, int]]:
    la, lb = _by_load(a.result.rows), _by_load(b.result.rows)
    out = []
    for load_ in sorted(la.keys() & lb.keys()):
        wa, wb = paired_windows(a.level_run(la[load_]), b.level_run(lb[load_]), slo)
        lv = LevelSwap(wa, wb, CURVE_FIGS)
        decode = max(wa.decode_s, wb.decode_s)
        out.append((load_, lv.block * wa.width_s, decode, lv.k))
    return out


def one_pair(
    name: str, sc: Scenario, kind: str, seed: int, cmp_seed: int, root: Path, levels: bool = True
) -> PairResult:
    t0 = time.monotonic()
    ea, eb = dict(sc.engine), dict(sc.engine)
    if kind == "change":
        ea.update(sc.change[0])
        eb.update(sc.change[1])
    a = sweep(root / f"{name}-{kind}-{seed}-a", sc, seed, ea)
    b = sweep(root / f"{name}-{kind}-{seed}-b", sc, seed + 1, eb)
    c = compare_sweeps(a, b, sc.slo, seed=cmp_seed, levels=levels and kind == "aa", force=True)
    sm = c.slo_max_shift
    excl = sm.low is not None and sm.high is not None and (sm.low > 0 or sm.high < 0)
    res = PairResult(
        scenario=name,
        kind=kind,
        seed=seed,
        knee_moved="knee moved" in c.verdict,
        slo_moved="SLO-max moved" in c.verdict,
        slo_interval_excludes_0=bool(excl),
        knee=(c.knee_shift.value, c.knee_shift.low, c.knee_shift.high),
        slo_max=(sm.value, sm.low, sm.high),
        levels=sum(row.comparison is not None for row in c.rows),
    )
    for row in c.rows:
        pc = row.comparison
        if pc is None:
            continue
        if pc.method.too_short:
            res.levels_cannot_tell += 1
        if any(f.significant for f in pc.figures.values() if f.headline):
            res.levels_different.append(str(row.load))
    if kind == "aa":
        res.blocks = swap_blocks(a, b, sc.slo)
    res.seconds = time.monotonic() - t0
    return res


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    lo = 0.0 if k == 0 else float(beta.ppf(0.025, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(0.975, k + 1, n - k))
    return lo, hi


def rate_line(what: str, k: int, n: int) -> str:
    if n == 0:
        return f"  {what}: no pairs"
    lo, hi = clopper_pearson(k, n)
    p = float(binom.sf(k - 1, n, 0.05)) if k > 0 else 1.0
    return (
        f"  {what}: {k}/{n} = {k / n:.1%} (95% CI {lo:.1%}–{hi:.1%}; P(≥{k} | true 5%) = {p:.3f})"
    )


def summary(name: str, results: list[PairResult]) -> list[str]:
    aa = [r for r in results if r.kind == "aa"]
    ch = [r for r in results if r.kind == "change"]
    lines = [f"{name}: {len(aa)} A/A pairs, {len(ch)} changed pairs"]
    lines.append(rate_line("knee moved (A/A)", sum(r.knee_moved for r in aa), len(aa)))
    lines.append(rate_line("SLO-max moved (A/A)", sum(r.slo_moved for r in aa), len(aa)))
    lines.append(
        rate_line(
            "SLO-max interval excludes 0 (A/A, before the level check)",
            sum(r.slo_interval_excludes_0 for r in aa),
            len(aa),
        )
    )
    lines.append(
        rate_line("either moved (A/A)", sum(r.knee_moved or r.slo_moved for r in aa), len(aa))
    )
    nlev = sum(r.levels for r in aa)
    if nlev:  # (not with --no-levels)
        lines.append(
            rate_line("levels differing (A/A)", sum(len(r.levels_different) for r in aa), nlev)
            + f"; cannot tell at {sum(r.levels_cannot_tell for r in aa)}"
        )
        lines.append(
            rate_line(
                "sweeps with any level differing (A/A)",
                sum(bool(r.levels_different) for r in aa),
                len(aa),
            )
        )
    if aa:
        per_load: dict[float, list[tuple[float, float, int]]] = {}
        for r in aa:
            for load_, blk, dec, k in r.blocks:
                per_load.setdefault(load_, []).append((blk, dec, k))
        for load_, xs in sorted(per_load.items()):
            blk = sorted(x[0] for x in xs)[len(xs) // 2]
            dec = sorted(x[1] for x in xs)[len(xs) // 2]
            k = sorted(x[2] for x in xs)[len(xs) // 2]
            short = sum(x[0] < x[1] for x in xs)
            lines.append(
                f"    load {load_:g}: swap block {blk:.1f} s, decode {dec:.1f} s "
                f"(median), {k} blocks; block < decode in {short}/{len(xs)}"
            )
    if ch:
        lines.append(
            f"  changed {ch[0].scenario}: knee moved {sum(r.knee_moved for r in ch)}/"
            f"{len(ch)}, SLO-max moved {sum(r.slo_moved for r in ch)}/{len(ch)}, "
            f"either {sum(r.knee_moved or r.slo_moved for r in ch)}/{len(ch)}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--pairs", type=int, default=20)
    p.add_argument("--power-pairs", type=int, default=5)
    p.add_argument("--first-seed", type=int, default=50000)
    p.add_argument("--out", type=Path)
    p.add_argument(
        "--no-levels",
        action="store_true",
        help="skip the level-by-level run comparisons (the shifts only: faster)",
    )
    args = p.parse_args(argv)
    names = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in names if s not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}")
    out = args.out.open("a") if args.out else None
    report: list[str] = []
    for name in names:
        sc = SCENARIOS[name]
        results: list[PairResult] = []
        jobs = [("aa", i) for i in range(args.pairs)] + [
            ("change", i) for i in range(args.power_pairs)
        ]
        for kind, i in jobs:
            seed = args.first_seed + 2 * i + (1000 if kind == "change" else 0)
            with tempfile.TemporaryDirectory(prefix="cmpcal-") as tmp:
                r = one_pair(name, sc, kind, seed, i, Path(tmp), not args.no_levels)
            results.append(r)
            print(
                f"{name} {kind} seed {seed}: knee {'MOVED' if r.knee_moved else '-'} "
                f"{_fmt(r.knee)}; SLO-max {'MOVED' if r.slo_moved else '-'} {_fmt(r.slo_max)}"
                f"{' (interval excl. 0)' if r.slo_interval_excludes_0 else ''}; levels "
                f"different {r.levels_different or '-'} cannot tell {r.levels_cannot_tell}"
                f"/{r.levels}; {r.seconds:.0f} s",
                flush=True,
            )
            if out:
                out.write(json.dumps(asdict(r)) + "\n")
                out.flush()
        lines = summary(name, results)
        print("\n".join(lines), flush=True)
        report += lines
    print("\n=== summary ===\n" + "\n".join(report))
    return 0


def _fmt(e: tuple[float | None, float | None, float | None]) -> str:
    v, lo, hi = e
    if v is None:
        return "n/a"
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return f"{v:+.2f}"
    return f"{v:+.2f} [{lo:+.2f}, {hi:+.2f}]"


if __name__ == "__main__":
    sys.exit(main())
