"""How fast the simulated engine runs: offline (virtual clock) and real time.

Usage::

    .venv/bin/python benchmarks/sim_speed.py [--skip-offline] [--skip-realtime]
        [--realtime-seconds 10] [--repeat 3] [--rate 128]

1. Offline: the seed's sweep — Qwen2.5-7B-Instruct on A100-80GB, max-model-len 32768,
   gpu-memory-utilization 0.90, max-num-seqs 256, max-num-batched-tokens 8192, random 1024 in /
   128 out, request rates 8, 16, 32, 64, 128, 1000 prompts each — on one core. Prints the
   simulated (virtual) seconds, the wall seconds of the engine loop alone, and of the whole
   ``sim run`` path (plan generation + engine + summary + files), and the ratios.
2. Real time: the simulated server (its own process, as ``start_embedded`` runs it) under
   ``--rate`` req/s of the same workload for ``--realtime-seconds`` of sends, from a plain
   aiohttp client in this process; prints the server's emission lag (token write time −
   simulated step end) p50/p99/p99.9/max, ``--repeat`` times, each with the machine's load
   average (this machine is shared: a figure without its load means little). Two workloads:
   the seed's random prompts (the engine is far past saturation at 128 req/s: few long steps,
   each writing to every running stream), and one shared prompt (prefix-cache hits: short
   decode-only steps, the most writes per second). Requests still running 15 s after the last
   send are cut off (a disconnect aborts them in the engine). ``--writer fanout`` runs the
   server with the opt-in two-thread writer (default: ``plain``, as ``sim serve`` runs).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from servetune.results.schema import BenchConfig
from servetune.sim.config import EngineConfig
from servetune.sim.memory import plan_memory
from servetune.sim.offline import OfflineRun, run_offline
from servetune.workload.arrivals import arrival_offsets
from servetune.workload.plan import Plan, make_plan
from servetune.workload.tokens import load_tokenizer

SEED = EngineConfig(
    gpu="A100-80GB",
    model="Qwen/Qwen2.5-7B-Instruct",
    max_model_len=32768,
    gpu_memory_utilization=0.90,
    max_num_seqs=256,
    max_num_batched_tokens=8192,
)
RATES = (8, 16, 32, 64, 128)
DRAIN_S = 15.0


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f} (5 min {five:.2f}) on {os.cpu_count()} cores"


def offline() -> None:
    r = SEED.resolve()
    mem = plan_memory(r)
    tok = load_tokenizer(None)
    print(
        f"offline sweep (one core): seed baseline, random 1024/128, 1000 prompts per rate; {load()}"
    )
    print(
        f"{'rate':>6}{'virtual s':>11}{'engine s':>10}{'ratio':>9}{'sim run s':>11}"
        f"{'ratio':>8}  {'out tok/s':>10}{'p99 TTFT ms':>13}{'mean TPOT':>11}"
    )
    tot_v = tot_e = tot_full = 0.0
    base = make_plan(
        BenchConfig(num_prompts=1000, random_input_len=1024, random_output_len=128, request_rate=8),
        tok,
    )
    for rate in RATES:
        cfg = BenchConfig(
            num_prompts=1000, random_input_len=1024, random_output_len=128, request_rate=rate
        )
        # the engine alone, on the same dataset with this rate's arrivals
        offs = (arrival_offsets("poisson", rate, 1000, cfg.seed) * 1e9).astype("int64")
        plan = Plan(requests=base.requests, offsets_ns=offs.tolist())
        t = time.perf_counter()
        sim = OfflineRun(plan, cfg, r, mem)
        sim.run()
        te = time.perf_counter() - t
        # the whole `sim run` path: make_plan + engine + summarize + run dir on disk
        with tempfile.TemporaryDirectory() as d:
            t = time.perf_counter()
            res = run_offline(cfg, SEED, Path(d))
            tf = time.perf_counter() - t
        v = sim.eng.now
        tot_v += v
        tot_e += te
        tot_full += tf
        s = res.summary
        print(
            f"{rate:>6}{v:>11.1f}{te:>10.3f}{v / te:>8.0f}x{tf:>11.2f}{v / tf:>7.0f}x  "
            f"{s.output_throughput:>10.0f}{s.ttft.p99 or 0:>13.0f}{s.tpot.mean or 0:>11.1f}"
        )
    print(
        f"{'all':>6}{tot_v:>11.1f}{tot_e:>10.3f}{tot_v / tot_e:>8.0f}x{tot_full:>11.2f}"
        f"{tot_v / tot_full:>7.0f}x"
    )
    print(
        f"engine alone: {tot_v / tot_e:.0f}x faster than real time (target ≥ 500x); "
        f"whole sim run path: {tot_v / tot_full:.0f}x; {load()}"
    )


async def _client(base: str, prompts: list[str], offsets: list[float]) -> tuple[int, int, int]:
    """Send on schedule, read every stream to its end; (completed, failed, cut off)."""
    import aiohttp

    ok = failed = 0
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=conn, timeout=aiohttp.ClientTimeout(total=None)
    ) as s:
        t0 = time.perf_counter()

        async def one(prompt: str, at: float) -> None:
            nonlocal ok, failed
            delay = t0 + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            body = {
                "prompt": prompt,
                "max_tokens": 128,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            try:
                async with s.post(base + "/completions", json=body) as r:
                    async for _ in r.content.iter_any():
                        pass
                ok += 1
            except aiohttp.ClientError:
                failed += 1

        tasks = [asyncio.ensure_future(one(p, a)) for p, a in zip(prompts, offsets, strict=True)]
        _, late = await asyncio.wait(tasks, timeout=offsets[-1] + DRAIN_S)
        for t in late:
            t.cancel()
        await asyncio.gather(*late, return_exceptions=True)
    return ok, failed, len(late)


def _workload(rate: float, seconds: float, shared: bool) -> tuple[list[str], list[float]]:
    n = max(1, int(rate * seconds))
    cfg = BenchConfig(
        num_prompts=n, random_input_len=1024, random_output_len=128, request_rate=rate, seed=0
    )
    plan = make_plan(cfg, load_tokenizer(None))
    prompts = [r.text() for r in plan.requests]
    if shared:
        prompts = [prompts[0]] * n
    return prompts, [o / 1e9 for o in plan.offsets_ns]


def realtime_once(rate: float, seconds: float, shared: bool, writer: str) -> dict[str, Any]:
    import aiohttp

    from servetune.sim.embedded import start_embedded

    prompts, offsets = _workload(rate, seconds, shared)
    srv = start_embedded(SEED, writer=writer)
    try:
        load_before = os.getloadavg()[0]
        t = time.perf_counter()
        ok, failed, cut = asyncio.run(_client(srv.base_url, prompts, offsets))
        wall = time.perf_counter() - t
        load_after = os.getloadavg()[0]

        async def stats() -> dict[str, Any]:
            async with aiohttp.ClientSession() as s, s.get(srv.url + "/sim/stats") as r:
                out: dict[str, Any] = await r.json()
                return out

        st = asyncio.run(stats())
    finally:
        srv.stop()
    return {
        "ok": ok,
        "failed": failed,
        "cut": cut,
        "wall": wall,
        "load": (load_before, load_after),
        "stats": st,
    }


def realtime(seconds: float, rate: float, repeat: int, writer: str = "plain") -> None:
    print(
        f"\nreal-time server: {rate:g} req/s for {seconds:g} s of sends, 1024/128, seed baseline "
        f"config (server in its own process); {os.cpu_count()} cores shared with other sessions"
    )
    for shared in (False, True):
        what = "one shared prompt (prefix-cache hits)" if shared else "seed random prompts"
        print(f"  {what}:")
        p99s = []
        for k in range(repeat):
            res = realtime_once(rate, seconds, shared, writer)
            lag = res["stats"]["emission_lag_ms"]
            st = res["stats"]
            p99s.append(lag["p99"])
            print(
                f"    run {k + 1}: lag p50 {lag['p50']:.3f} ms  p99 {lag['p99']:.3f} ms  "
                f"p99.9 {lag['p999']:.3f} ms  max {lag['max']:.1f} ms over {lag['count']} "
                f"tokens, {st['steps']} steps; {res['ok']} done, {res['failed']} failed, "
                f"{res['cut']} cut off; load {res['load'][0]:.2f} -> {res['load'][1]:.2f}"
            )
            print(
                f"           {st['tokens_per_step_written']:.0f} writes per step at "
                f"{st['write_us_per_token']:.1f} us each; wake-up {st['wake_lag_ms_mean']:.3f} ms "
                "after the step end on average"
            )
            wl, hl = st.get("wake_lag_ms"), st.get("helper_wake_lag_ms")
            if wl:
                helper = f"; helper thread p50 {hl['p50']:.3f} / p99 {hl['p99']:.3f}" if hl else ""
                print(
                    f"           writer: {st.get('writer')}; wake-up p50 {wl['p50']:.3f} / p99 "
                    f"{wl['p99']:.3f} ms{helper}"
                )
            worst = ", ".join(f"{k} {v:.1f}" for k, v in st["worst_ms"].items())
            print(f"           worst ms: {worst}")
            gcs = ", ".join(
                f"{g} {v['count']}x {v['total_ms']:.0f} ms" for g, v in st["gc"].items()
            )
            print(f"           collections while serving: {gcs}")
            wb, ws = st["write_batch_ms"], st["write_batch_size"]
            print(
                f"           a step's writes took p50 {wb['p50']:.2f} / p99 {wb['p99']:.2f} / max "
                f"{wb['max']:.1f} ms for p50 {ws['p50']:.0f} / max {ws['max']:.0f} streams"
            )
        print(
            f"    p99 over runs: median {statistics.median(p99s):.3f} ms, "
            f"min {min(p99s):.3f}, max {max(p99s):.3f} (target < 2 ms)"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--skip-realtime", action="store_true")
    ap.add_argument("--skip-offline", action="store_true")
    ap.add_argument("--realtime-seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=128.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--writer", choices=["plain", "fanout"], default="plain")
    args = ap.parse_args()
    if not args.skip_offline:
        offline()
    if not args.skip_realtime:
        realtime(args.realtime_seconds, args.rate, args.repeat, args.writer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
