"""How often does `servetune watch` call a server past capacity — below and above capacity?

Traces on the simulated engine's virtual clock (``servetune sim run``: Poisson arrivals, the
server scraped every 0.5 s; every other scrape kept, i.e. watch's default 1-s scrape), two
workloads on the simulated A100 / Qwen2.5-7B:

- A: 1024 prompt / 128 output tokens, fixed (capacity ≈ 10.2 req/s, compute-bound prefill);
- B: 256 / 512 tokens ±50% (capacity ≈ 9.8 req/s, decode-bound, E2E ≈ 10 s near capacity);

each at 20%, 50%, 78%, 88%, 1.08× and 1.27× of its capacity, ``--seeds`` seeds, ``--duration``
seconds of sending. Over each trace a window of W seconds slides in 1-s steps through the
sending period and ``diagnose.window.evaluate_window`` (what watch runs) judges it; a window
*fires* when the ``overloaded`` rule does. The finding (what watch shows and records) is the
rule through ``watch.hold.Hold`` with the hold time H (``--for``): it starts once the rule held
for H and stops once absent for H. Printed per load: the share of windows that fire, and the
share in which the finding is active (from the first window on; the first W + H seconds of an
overload cannot show it), with the number of starts. The latency histograms are left out of
the replayed samples: the ``overloaded`` rule's conditions read none of them (only its
evidence lines do), and they take most of an evaluation's time.

    .venv/bin/python benchmarks/watch_overload.py [--seeds 4] [--duration 600]
        [--windows 30,10] [--holds 0,60] [--cache DIR] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from servetune.diagnose.window import evaluate_window
from servetune.results.io import read_records
from servetune.results.server_series import ServerSample
from servetune.watch.hold import Hold

WORKLOADS = {
    "A 1024/128": ((2, 5, 8, 9, 11, 13), []),
    "B 256/512 ±50%": (
        (2, 4.9, 7.6, 8.6, 10.6, 12.4),
        ["--random-input-len", "256", "--random-output-len", "512", "--random-range-ratio", "0.5"],
    ),
}
LOADS = ("20%", "50%", "78%", "88%", "1.08×", "1.27×")


def trace(cache: Path, wl: str, rate: float, seed: int, duration: float) -> Path:
    d = cache / f"{wl.split()[0]}_r{rate:g}_s{seed}_d{duration:g}"
    if not (d / "server_metrics.jsonl").exists():
        args = WORKLOADS[wl][1]
        cmd = [sys.executable, "-m", "servetune.cli", "sim", "run", "--request-rate", f"{rate:g}"]
        cmd += ["--num-prompts", str(round(rate * duration)), "--seed", str(seed), *args]
        cmd += ["--result-dir", str(d), "--no-progress", "--overwrite"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return d


def windows(d: Path, window_s: float) -> list[tuple[float, bool]]:
    """(window end, whether `overloaded` fired) over the sending period, 1-s scrapes."""
    samples = []
    for line in (d / "server_metrics.jsonl").open():
        s = ServerSample.model_validate(json.loads(line))
        if abs(s.t - round(s.t)) < 1e-6:
            samples.append(s.model_copy(update={"histograms": {}}))
    last_send = max(r.send_ns for r in read_records(d)) / 1e9
    out = []
    i = 0
    t = window_s
    while t <= last_send:
        while i < len(samples) and samples[i].t <= t + 1e-9:
            i += 1
        seen = [s for s in samples[:i] if s.t >= t - window_s - 1e-9]
        _, found = evaluate_window(seen, seen[-1].t - window_s, seen[-1].t)
        out.append((t, any(f.rule == "overloaded" and f.kind == "bottleneck" for f in found)))
        t += 1.0
    return out


def held(series: list[tuple[float, bool]], hold_s: float) -> tuple[int, int]:
    """(windows with the finding active, starts) through a Hold of HOLD_S."""
    h: Hold[bool] = Hold(hold_s)
    on = starts = 0
    for t, fired in series:
        starts += sum(
            c.event == "start" for c in h.update(t, {"overloaded": True} if fired else {})
        )
        on += "overloaded" in h.active
    return on, starts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--duration", type=float, default=600.0, help="seconds of sending")
    ap.add_argument("--windows", default="30,10")
    ap.add_argument("--holds", default="0,60")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/servetune-watch-overload"))
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    seeds = range(1, a.seeds + 1)
    holds = [float(x) for x in a.holds.split(",")]
    print(f"{a.seeds} seeds × {a.duration:g} s of sending per load; % of windows (starts)")
    for w in (float(x) for x in a.windows.split(",")):
        head = f"| window {w:g} s | " + " | ".join(LOADS) + " |"
        print("\n" + head + "\n|" + "---|" * (len(LOADS) + 1))
        for wl, (rates, _) in WORKLOADS.items():
            # the traces (kept in --cache), then their windows in parallel
            dirs = [trace(a.cache, wl, r, s, a.duration) for r in rates for s in seeds]
            with ProcessPoolExecutor(a.jobs) as pool:
                flat = list(pool.map(windows, dirs, [w] * len(dirs)))
            series = [flat[i * len(seeds) : (i + 1) * len(seeds)] for i in range(len(rates))]
            cells = []
            for per_seed in series:
                n = sum(len(x) for x in per_seed)
                cells.append(f"{100 * sum(f for x in per_seed for _, f in x) / n:.1f}%")
            print(f"| {wl}: rule fires | " + " | ".join(cells) + " |")
            for h in holds:
                cells = []
                for per_seed in series:
                    n = sum(len(x) for x in per_seed)
                    on, st = (sum(v) for v in zip(*(held(x, h) for x in per_seed), strict=True))
                    cells.append(f"{100 * on / n:.1f}% ({st})")
                print(f"| {wl}: finding, --for {h:g} | " + " | ".join(cells) + " |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
