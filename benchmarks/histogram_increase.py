"""How long ``metrics.histograms.increase`` takes over a run's snapshots of one histogram.

Usage::

    .venv/bin/python benchmarks/histogram_increase.py [--snapshots 600] [--buckets 20]
        [--repeat 50] [--baseline-src DIR]

Builds ``--snapshots`` cumulative snapshots of a ``--buckets``-bucket histogram (counts
growing at random, seeded), times ``increase`` over them ``--repeat`` times (CPU time), and
with ``--baseline-src DIR`` (``src`` of an older checkout) times that code in a child process
on the same snapshots, interleaved: before and after side by side, with the ratio and whether
both gave the same histogram.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time


def measure(snapshots: int, buckets: int, repeat: int) -> dict[str, object]:
    from servetune.metrics.histograms import increase
    from servetune.results.server_series import Histogram

    rng = random.Random(1)
    bounds = [0.001 * 2**i for i in range(buckets)] + [float("inf")]
    cum = [0] * (buckets + 1)
    snaps = []
    for t in range(snapshots):
        cum = sorted(c + rng.randint(0, 3) for c in cum)
        pairs = list(zip(bounds, cum, strict=True))
        snaps.append(Histogram.model_construct(buckets=pairs, sum=float(t), count=cum[-1]))
    t0 = time.process_time()
    for _ in range(repeat):
        got = increase(snaps)
    ms = (time.process_time() - t0) / repeat * 1e3
    assert got is not None
    return {"ms": ms, "result": [got.count, got.sum, [list(b) for b in got.buckets]]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snapshots", type=int, default=600)
    ap.add_argument("--buckets", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--baseline-src")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(measure(a.snapshots, a.buckets, a.repeat)))
        return 0
    this = measure(a.snapshots, a.buckets, a.repeat)
    print(f"increase over {a.snapshots} snapshots x {a.buckets} buckets: {this['ms']:.3f} ms")
    if a.baseline_src:
        env = {**os.environ, "PYTHONPATH": os.path.abspath(a.baseline_src)}
        args = [sys.executable, __file__, "--child", f"--snapshots={a.snapshots}"]
        args += [f"--buckets={a.buckets}", f"--repeat={a.repeat}"]
        out = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
        base = json.loads(out.stdout)
        ratio = float(base["ms"]) / float(this["ms"])  # type: ignore[arg-type]
        same = base["result"] == this["result"]
        print(f"baseline ({a.baseline_src}): {base['ms']:.3f} ms; this code is {ratio:.2f}x faster")
        print(f"the same histogram: {'yes' if same else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
