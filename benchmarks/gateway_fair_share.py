"""Fair share without per-tenant caps: a light tenant's P99 TTFT under a 10× flood of another
tenant at the same priority, with and without the share rule, side by side in one run.

The upstream is servetune's scripted server (first token after 20 ms, then 16 tokens 5 ms apart:
~100 ms a request), admitted 4 at a time by the gateway (~40 req/s). Two tenants, the same
priority class and weight, **no concurrency cap or rate quota on either**: ``light`` sends
Poisson 5 req/s (an eighth of the capacity), ``flood`` 50 req/s (10×, more than the upstream
serves: its queue in the gateway stays full). Two gateway processes on the same upstream:

- ``before`` — ``queue.fair_share_s: 0``: fair queueing alone (the VTC order of waiting
  requests; a freed slot goes to the waiting request with the smallest counter);
- ``after`` — ``queue.fair_share_s: 10`` (the default): a tenant at its share leaves a slot
  free for each other active tenant below its share (:mod:`servetune.gateway.shares`).

Rounds alternate the two gateways and, within each, a quiet phase (light alone) and a flooded
phase (light + flood), so a slow minute of the shared box hits both. Light's TTFT is measured
by this process (request sent → first token chunk); the flood is sent by a child process at
nice 10 (its clients would be other machines). The unloaded P99 of a gateway is the lower of the
pooled quiet P99 and the median of its quiet rounds' P99s (a noisy quiet round cannot raise the
denominator); the target is flooded P99 ≤ 2 × unloaded.

    .venv/bin/python benchmarks/gateway_fair_share.py [--rounds 3] [--phase-s 15]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import yaml

from gateway_overhead import MODEL, Proc, upstream
from servetune.gateway.keys import hash_key

LIGHT_KEY = "st-light-" + "l" * 40
FLOOD_KEY = "st-flood-" + "f" * 40
LIGHT_RATE = 5.0
FLOOD_RATE = 50.0
BODY = {"model": MODEL, "prompt": "the cat sat", "max_tokens": 16, "stream": True}


def gateway(
    tmp: Path, name: str, upstream_port: int, fair_share_s: float, ahead: int = 2, burst: int = 1
) -> tuple[Proc, int]:
    cfg = {
        "listen": "127.0.0.1:0",
        "audit_log": str(tmp / f"{name}-audit.jsonl"),
        "groups": [
            {
                "name": "g",
                "urls": [f"http://127.0.0.1:{upstream_port}/v1"],
                "max_concurrency": 4,
                "adaptive": False,
            }
        ],
        "tenants": [
            {"name": "light", "keys": [hash_key(LIGHT_KEY)]},
            {"name": "flood", "keys": [hash_key(FLOOD_KEY)]},
        ],
        "queue": {
            "fair_share_s": fair_share_s,
            "fair_share_ahead": ahead,
            "fair_share_burst": burst,
            "max_queued_per_tenant": 256,
        },
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    p = Proc(
        [sys.executable, "-m", "servetune.cli", "gateway", "--config", str(path),
         "--log-level", "warning"],
        r"listening on http://127\.0\.0\.1:(\d+)",
    )  # fmt: skip
    assert p.match is not None
    return p, int(p.match.group(1))


async def poisson(
    url: str, key: str, rate: float, duration_s: float, seed: int, ttfts: list[float] | None
) -> dict[int, int]:
    """Open-loop Poisson requests for ``duration_s``; each one's TTFT into ``ttfts``."""
    rng = random.Random(seed)
    codes: dict[int, int] = {}
    timeout = aiohttp.ClientTimeout(total=60)
    headers = {"Authorization": f"Bearer {key}"}
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=conn) as s:

        async def one() -> None:
            t0 = time.perf_counter()
            try:
                async with s.post(url, json=BODY, headers=headers) as r:
                    first = None
                    async for chunk in r.content.iter_any():
                        if first is None and b'"text"' in chunk:
                            first = time.perf_counter() - t0
                    codes[r.status] = codes.get(r.status, 0) + 1
                    if r.status == 200 and first is not None and ttfts is not None:
                        ttfts.append(first)
            except (aiohttp.ClientError, TimeoutError):
                codes[-1] = codes.get(-1, 0) + 1

        tasks: list[asyncio.Task[None]] = []
        start = time.perf_counter()
        due = start
        while True:
            due += rng.expovariate(rate)
            if due - start > duration_s:
                break
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            tasks.append(asyncio.create_task(one()))
        if ttfts is None:  # the flood: stop at the end of its phase (its queue is dropped)
            for t in tasks:
                t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return codes


def p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))] if xs else float("nan")


def flood_child(url: str, duration_s: float, seed: int) -> None:
    codes = asyncio.run(poisson(url, FLOOD_KEY, FLOOD_RATE, duration_s, seed, None))
    print(json.dumps(codes))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--phase-s", type=float, default=15.0)
    ap.add_argument("--ahead", type=int, default=2, help="queue.fair_share_ahead of 'after'")
    ap.add_argument("--burst", type=int, default=1, help="queue.fair_share_burst of 'after'")
    ap.add_argument("--flood-child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.flood_child:
        flood_child(args.flood_child[0], float(args.flood_child[1]), int(args.flood_child[2]))
        return
    print(f"load average at start: {os.getloadavg()}")
    up, up_port = upstream({"ttft_ms": 20, "tpot_ms": 5})
    tmp = Path(tempfile.mkdtemp(prefix="fair-share-"))
    gws = {
        "before": gateway(tmp, "before", up_port, 0.0),
        "after": gateway(tmp, "after", up_port, 10.0, args.ahead, args.burst),
    }
    quiet: dict[str, list[list[float]]] = {k: [] for k in gws}
    flooded: dict[str, list[list[float]]] = {k: [] for k in gws}
    flood_codes: dict[str, dict[str, int]] = {k: {} for k in gws}
    try:
        for rnd in range(args.rounds):
            order = list(gws) if rnd % 2 == 0 else list(reversed(gws))
            for name in order:
                url = f"http://127.0.0.1:{gws[name][1]}/v1/completions"
                seed = 1000 * rnd + (0 if name == "before" else 1)
                alone: list[float] = []
                asyncio.run(poisson(url, LIGHT_KEY, LIGHT_RATE, args.phase_s, seed, alone))
                time.sleep(1.0)
                child = subprocess.Popen(
                    ["nice", "-n", "10", sys.executable, __file__, "--flood-child", url,
                     str(args.phase_s + 3), str(seed)],
                    stdout=subprocess.PIPE, text=True,
                )  # fmt: skip
                time.sleep(3.0)  # the flood's queue fills before light's phase starts
                under: list[float] = []
                asyncio.run(poisson(url, LIGHT_KEY, LIGHT_RATE, args.phase_s, seed + 7, under))
                out, _ = child.communicate(timeout=120)
                for k, v in json.loads(out.strip().splitlines()[-1]).items():
                    flood_codes[name][k] = flood_codes[name].get(k, 0) + v
                quiet[name].append(alone)
                flooded[name].append(under)
                print(
                    f"round {rnd + 1} {name:6s}: light P99 TTFT alone {p99(alone) * 1e3:6.1f} ms"
                    f" ({len(alone)}), flooded {p99(under) * 1e3:6.1f} ms ({len(under)}); load "
                    f"{os.getloadavg()[0]:.1f}",
                    flush=True,
                )
                time.sleep(2.0)
    finally:
        for p, _ in gws.values():
            p.stop()
        up.stop()
    print()
    print(
        "| gateway | light P99 TTFT alone (ms) | flooded (ms) | ratio (target ≤ 2) "
        "| flood served / 429 |"
    )
    print("|---|---|---|---|---|")
    after_label = f"ahead {args.ahead}, burst {args.burst}"
    for name in gws:
        pooled_q = [x for r in quiet[name] for x in r]
        pooled_f = [x for r in flooded[name] for x in r]
        unloaded = min(p99(pooled_q), statistics.median(p99(r) for r in quiet[name]))
        ratio = p99(pooled_f) / unloaded
        fc = flood_codes[name]
        print(
            f"| {name} ({'fair_share_s 0' if name == 'before' else after_label}) |"
            f" {unloaded * 1e3:.1f} |"
            f" {p99(pooled_f) * 1e3:.1f} | **{ratio:.2f}×** {'met' if ratio <= 2 else 'missed'} |"
            f" {fc.get('200', 0)} / {fc.get('429', 0)} |"
        )
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
