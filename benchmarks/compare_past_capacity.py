"""compare's run comparison past capacity, checked by repetition: how often two runs of one
configuration (seeds ``s`` and ``s + 1``) come out "different" at a level just past and far
past the server's capacity, and how often a real change does.

Usage::

    nice -n 10 .venv/bin/python benchmarks/compare_past_capacity.py --pairs 20 --power-pairs 6

Runs come from the simulated engine's offline path (as ``servetune bench --sim-offline``) and
are kept under ``--cache`` (default a temporary directory), so that a second invocation on other
code compares the same runs. Per case: the A/A pairs called different on a headline figure
(and the figures), the pairs the comparison cannot tell, and — for the real change (A's and
B's engine overrides) — the pairs called different. Prints one line per pair and a table;
``--out`` writes every pair as a JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scipy.stats import beta, binom

from servetune.compare.inputs import RunInput, load_run
from servetune.compare.runs import compare_runs
from servetune.results.schema import BenchConfig, Slo
from servetune.sim.config import EngineConfig
from servetune.sim.offline import simulate

LLAMA = dict(gpu="L4", model="meta-llama/Llama-3.1-8B-Instruct", max_model_len=4096)
MISTRAL = dict(gpu="A10G", model="mistralai/Mistral-7B-Instruct-v0.3", max_model_len=4096)


@dataclass
class Case:
    rate: float
    bench: dict[str, Any]
    engine: dict[str, Any]
    slo: Slo
    change: tuple[dict[str, Any], dict[str, Any]]
    num_prompts: int = 400


CASES: dict[str, Case] = {
    # capacity ~3.2 req/s (compare_sweep_calibration.py's llama8b-l4)
    "llama8b-l4-4.0": Case(
        4.0,
        dict(random_input_len=512, random_output_len=128),
        LLAMA,
        Slo(ttft=1000, tpot=100),
        (dict(max_num_seqs=16), dict(max_num_seqs=128)),
    ),
    "llama8b-l4-5.0": Case(
        5.0,
        dict(random_input_len=512, random_output_len=128),
        LLAMA,
        Slo(ttft=1000, tpot=100),
        (dict(max_num_seqs=16), dict(max_num_seqs=128)),
    ),
    "llama8b-l4-8.0": Case(
        8.0,
        dict(random_input_len=512, random_output_len=128),
        LLAMA,
        Slo(ttft=1000, tpot=100),
        (dict(max_num_seqs=16), dict(max_num_seqs=128)),
    ),
    # capacity ~1.2 req/s (mistral-a10g-prefill)
    "mistral-a10g-1.25": Case(
        1.25,
        dict(random_input_len=2048, random_output_len=64),
        MISTRAL,
        Slo(ttft=4000, tpot=250),
        (dict(), dict(gpu="A10")),
    ),
    "mistral-a10g-1.5": Case(
        1.5,
        dict(random_input_len=2048, random_output_len=64),
        MISTRAL,
        Slo(ttft=4000, tpot=250),
        (dict(), dict(gpu="A10")),
    ),
    "mistral-a10g-2.5": Case(
        2.5,
        dict(random_input_len=2048, random_output_len=64),
        MISTRAL,
        Slo(ttft=4000, tpot=250),
        (dict(), dict(gpu="A10")),
    ),
    # tests/compare/test_calibration.py's far-past level: Qwen2.5-7B / A100-80GB 1024/128,
    # capacity ~10 req/s, 1000 requests
    "qwen7b-a100-32": Case(
        32.0,
        dict(random_input_len=1024, random_output_len=128),
        {},
        Slo(ttft=1000, tpot=50),
        (dict(max_num_seqs=16), dict(max_num_seqs=128)),
        num_prompts=1000,
    ),
}


def run(cache: Path, name: str, c: Case, seed: int, engine: dict[str, Any]) -> RunInput:
    tag = "-".join(f"{k}={v}" for k, v in sorted(engine.items()) if k not in ("model",))
    path = cache / name / f"{seed}-{tag}"
    if not (path / "run.json").exists():
        cfg = BenchConfig(
            request_rate=c.rate, num_prompts=c.num_prompts, seed=seed, goodput=c.slo, **c.bench
        )
        simulate(cfg, EngineConfig(**engine), path)
    return load_run(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="*", default=list(CASES))
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--power-pairs", type=int, default=6)
    ap.add_argument("--replicates", type=int, default=2000)
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    cache = args.cache or Path(tempfile.mkdtemp(prefix="cmp-past-"))
    out = args.out.open("w") if args.out else None
    rows = []
    for name in args.cases:
        c = CASES[name]
        jobs = [("aa", i) for i in range(args.pairs)]
        jobs += [("change", i) for i in range(args.power_pairs)]
        tally = {"aa": [0, 0, 0], "change": [0, 0, 0]}  # different, cannot tell, pairs
        for kind, i in jobs:
            seed = (50000 if kind == "aa" else 51000) + 2 * i
            ea, eb = dict(c.engine), dict(c.engine)
            if kind == "change":
                ea.update(c.change[0])
                eb.update(c.change[1])
            a = run(cache, name, c, seed, ea)
            b = run(cache, name, c, seed + 1, eb)
            pc = compare_runs(a, b, c.slo, replicates=args.replicates, seed=i, force=True)
            diff = sorted(k for k, f in pc.figures.items() if f.headline and f.significant)
            cannot = pc.method.too_short
            t = tally[kind]
            t[0] += bool(diff)
            t[1] += cannot
            t[2] += 1
            m = pc.method
            line = dict(
                case=name,
                kind=kind,
                seed=seed,
                different=diff,
                cannot_tell=cannot,
                block_s=round(m.block_windows * m.window_s[0], 2),
                decode_s=round(m.decode_s, 2),
                arrival_blocks=m.arrival_blocks,
            )
            print(json.dumps(line), flush=True)
            if out:
                out.write(json.dumps(line) + "\n")
        rows.append((name, tally))
    print()
    print("| case | A/A different | 95% CI | P(≥ that ∣ 5%) | A/A cannot tell | change found |")
    print("|---|---|---|---|---|---|")
    for name, t in rows:
        k, ct, n = t["aa"]
        lo = beta.ppf(0.025, k, n - k + 1) if k else 0.0
        hi = beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
        p = binom.sf(k - 1, n, 0.05) if n else 1.0
        kc, cc, nc = t["change"]
        print(
            f"| {name} | {k}/{n} | {lo:.0%}–{hi:.0%} | {p:.3f} | {ct}/{n} | "
            f"{kc}/{nc} ({cc} cannot tell) |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
