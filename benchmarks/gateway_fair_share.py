"""Fair share without per-tenant caps: a light tenant's P99 TTFT under a 10× flood of another
tenant at the same priority, with and without the share rule, side by side in one run — and
the flood's throughput with the light tenant idle (work conservation) and active (the cost).

The upstream is servetune's scripted server (first token after 20 ms, then 16 tokens 5 ms apart:
~100 ms a request), admitted 4 at a time by the gateway (~40 req/s). Two tenants, the same
priority class and weight, **no concurrency cap or rate quota on either**: ``light`` sends
Poisson 5 req/s (an eighth of the capacity), ``flood`` 50 req/s (10×, more than the upstream
serves: its queue in the gateway stays full). Gateway processes on the same upstream:

- ``off`` — ``queue.fair_share_s: 0``: fair queueing alone (the VTC order of waiting
  requests; a freed slot goes to the waiting request with the smallest counter);
- ``on`` — the share rule as configured by default (``fair_share_s`` 10, reservation = the
  0.99 quantile of a tenant's concurrency up to its share, ``fair_share_burst`` 1;
  :mod:`servetune.gateway.shares`);
- ``earlier`` (with ``--before-src DIR``, another checkout's ``src/``): that version's own
  default share rule, in the same rounds.

Each round, for each gateway in turn (the order alternates, so a slow minute of the shared box
hits all): a quiet phase (light alone), ``fair_share_s`` + 1 s of nothing (light is forgotten),
a flood-alone phase (the flood's completions a second: what it gets with light idle), then the
flooded phase (light + flood; the flood's completions a second there are the share's cost).
Light's TTFT is measured by this process (request sent → first token chunk); the flood is sent
by a child process at nice 10 (its clients would be other machines). The unloaded P99 of a
gateway is the lower of the pooled quiet P99 and the median of its quiet rounds' P99s (a noisy
quiet round cannot raise the denominator); the target is flooded P99 ≤ 2 × unloaded.

    .venv/bin/python benchmarks/gateway_fair_share.py [--rounds 3] [--phase-s 15]
        [--before-src DIR] [--ahead N] [--burst N]
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
from typing import Any

import aiohttp
import yaml

from gateway_overhead import MODEL, Proc, upstream
from servetune.gateway.keys import hash_key

LIGHT_KEY = "st-light-" + "l" * 40
FLOOD_KEY = "st-flood-" + "f" * 40
LIGHT_RATE = 5.0
FLOOD_RATE = 50.0
WINDOW_S = 10.0
BODY = {"model": MODEL, "prompt": "the cat sat", "max_tokens": 16, "stream": True}


def gateway(
    tmp: Path, name: str, upstream_port: int, queue: dict[str, Any], src: str | None = None
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
        "queue": {"max_queued_per_tenant": 256, **queue},
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    p = Proc(
        [sys.executable, "-m", "servetune.cli", "gateway", "--config", str(path),
         "--log-level", "warning"],
        r"listening on http://127\.0\.0\.1:(\d+)",
        env={"PYTHONPATH": src} if src else None,
    )  # fmt: skip
    assert p.match is not None
    return p, int(p.match.group(1))


async def poisson(
    url: str,
    key: str,
    rate: float,
    duration_s: float,
    seed: int,
    ttfts: list[float] | None,
    done: list[float] | None = None,
) -> dict[int, int]:
    """Open-loop Poisson requests for ``duration_s``; each one's TTFT into ``ttfts``, the
    wall-clock time each 200 ended into ``done``."""
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
                    if r.status == 200 and done is not None:
                        done.append(time.time())
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
    done: list[float] = []
    codes = asyncio.run(poisson(url, FLOOD_KEY, FLOOD_RATE, duration_s, seed, None, done))
    print(json.dumps({"codes": codes, "done": done}))


def rate_between(done: list[float], t0: float, t1: float) -> float:
    return sum(1 for t in done if t0 <= t < t1) / (t1 - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--phase-s", type=float, default=15.0)
    ap.add_argument("--alone-s", type=float, default=8.0, help="the flood-alone phase")
    ap.add_argument("--ahead", type=int, help="queue.fair_share_ahead of 'on' (default: none)")
    ap.add_argument("--burst", type=int, help="queue.fair_share_burst of 'on' (default: 1)")
    ap.add_argument("--before-src", help="another checkout's src/: its share rule as 'earlier'")
    ap.add_argument("--flood-child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.flood_child:
        flood_child(args.flood_child[0], float(args.flood_child[1]), int(args.flood_child[2]))
        return
    print(f"load average at start: {os.getloadavg()}")
    up, up_port = upstream({"ttft_ms": 20, "tpot_ms": 5})
    tmp = Path(tempfile.mkdtemp(prefix="fair-share-"))
    on: dict[str, Any] = {"fair_share_s": WINDOW_S}
    if args.ahead is not None:
        on["fair_share_ahead"] = args.ahead
    if args.burst is not None:
        on["fair_share_burst"] = args.burst
    labels = {"off": "fair_share_s 0", "on": ", ".join(f"{k} {v}" for k, v in on.items())}
    gws = {
        "off": gateway(tmp, "off", up_port, {"fair_share_s": 0.0}),
        "on": gateway(tmp, "on", up_port, on),
    }
    if args.before_src:
        gws["earlier"] = gateway(
            tmp, "earlier", up_port, {"fair_share_s": WINDOW_S}, args.before_src
        )
        labels["earlier"] = f"{args.before_src}, its defaults"
    quiet: dict[str, list[list[float]]] = {k: [] for k in gws}
    flooded: dict[str, list[list[float]]] = {k: [] for k in gws}
    flood_codes: dict[str, dict[str, int]] = {k: {} for k in gws}
    alone_rate: dict[str, list[float]] = {k: [] for k in gws}
    shared_rate: dict[str, list[float]] = {k: [] for k in gws}
    try:
        for rnd in range(args.rounds):
            order = list(gws) if rnd % 2 == 0 else list(reversed(gws))
            for i, name in enumerate(order):
                url = f"http://127.0.0.1:{gws[name][1]}/v1/completions"
                seed = 1000 * rnd + 10 * i
                alone: list[float] = []
                asyncio.run(poisson(url, LIGHT_KEY, LIGHT_RATE, args.phase_s, seed, alone))
                time.sleep(WINDOW_S + 1.0)  # light is idle: the gateway forgets it
                lead = 2.0  # the flood's queue fills before anything is counted
                total = lead + args.alone_s + args.phase_s + 1.0
                child = subprocess.Popen(
                    ["nice", "-n", "10", sys.executable, __file__, "--flood-child", url,
                     str(total), str(seed + 3)],
                    stdout=subprocess.PIPE, text=True,
                )  # fmt: skip
                t_start = time.time()
                time.sleep(lead + args.alone_s)
                t_light = time.time()
                under: list[float] = []
                asyncio.run(poisson(url, LIGHT_KEY, LIGHT_RATE, args.phase_s, seed + 7, under))
                t_end = time.time()
                out, _ = child.communicate(timeout=120)
                got = json.loads(out.strip().splitlines()[-1])
                for k, v in got["codes"].items():
                    flood_codes[name][k] = flood_codes[name].get(k, 0) + v
                a = rate_between(got["done"], t_start + lead, t_light)
                b = rate_between(got["done"], t_light + 1.0, t_end)
                alone_rate[name].append(a)
                shared_rate[name].append(b)
                quiet[name].append(alone)
                flooded[name].append(under)
                print(
                    f"round {rnd + 1} {name:7s}: light P99 TTFT alone {p99(alone) * 1e3:6.1f} ms"
                    f" ({len(alone)}), flooded {p99(under) * 1e3:6.1f} ms ({len(under)}); flood"
                    f" {a:5.1f} req/s alone, {b:5.1f} with light; load {os.getloadavg()[0]:.1f}",
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
        "| flood req/s, light idle | flood req/s, light active | flood 200 / 429 |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in gws:
        pooled_q = [x for r in quiet[name] for x in r]
        pooled_f = [x for r in flooded[name] for x in r]
        unloaded = min(p99(pooled_q), statistics.median(p99(r) for r in quiet[name]))
        ratio = p99(pooled_f) / unloaded
        fc = flood_codes[name]
        print(
            f"| {name} ({labels[name]}) | {unloaded * 1e3:.1f} | {p99(pooled_f) * 1e3:.1f} |"
            f" **{ratio:.2f}×** {'met' if ratio <= 2 else 'missed'} |"
            f" {statistics.mean(alone_rate[name]):.1f} | {statistics.mean(shared_rate[name]):.1f} |"
            f" {fc.get('200', 0)} / {fc.get('429', 0)} |"
        )
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
