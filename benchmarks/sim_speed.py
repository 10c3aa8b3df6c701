"""How fast the simulated engine runs: offline (virtual clock) and real time.

Usage::

    .venv/bin/python benchmarks/sim_speed.py [--skip-realtime] [--realtime-seconds 10]

1. Offline: the seed's sweep — Qwen2.5-7B-Instruct on A100-80GB, max-model-len 32768,
   gpu-memory-utilization 0.90, max-num-seqs 256, max-num-batched-tokens 8192, random 1024 in /
   128 out, request rates 8, 16, 32, 64, 128, 1000 prompts each — on one core. Prints the
   simulated (virtual) seconds, the wall seconds of the engine loop alone, and of the whole
   ``sim run`` path (plan generation + engine + summary + files), and the ratios.
2. Real time: the simulated server (its own process) under 128 req/s of the same workload
   from a plain aiohttp client in this process; prints the server's emission lag (token write
   time − simulated step end), p50/p99/p99.9/max.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import tempfile
import time
from pathlib import Path

from servetune.results.schema import BenchConfig
from servetune.sim.config import EngineConfig
from servetune.sim.memory import plan_memory
from servetune.sim.offline import OfflineRun, build_result, environment, run_offline
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


def offline() -> None:
    r = SEED.resolve()
    mem = plan_memory(r)
    tok = load_tokenizer(None)
    print("offline sweep (one core): seed baseline, random 1024/128, 1000 prompts per rate")
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
        f"whole sim run path: {tot_v / tot_full:.0f}x"
    )
    _ = build_result, environment  # the run path above builds the RunResult


async def _client(base: str, rate: float, seconds: float) -> tuple[int, int]:
    import aiohttp

    n = int(rate * seconds)
    offs = arrival_offsets("poisson", rate, n, 0)
    body = {
        "prompt": "the " * 1024,
        "max_tokens": 128,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    ok = 0
    failed = 0
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=conn, timeout=aiohttp.ClientTimeout(total=None)
    ) as s:
        t0 = time.perf_counter()

        async def one(at: float) -> None:
            nonlocal ok, failed
            delay = t0 + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                async with s.post(base + "/completions", json=body) as r:
                    async for _ in r.content.iter_any():
                        pass
                ok += 1
            except aiohttp.ClientError:
                failed += 1

        await asyncio.gather(*[one(float(x)) for x in offs])
    return ok, failed


def realtime(seconds: float, rate: float) -> None:
    import aiohttp

    from servetune.sim.embedded import start_embedded

    print(
        f"\nreal-time server: {rate:g} req/s for {seconds:g} s of sends, random 1024/128, "
        "seed baseline config (server in its own process)"
    )
    srv = start_embedded(SEED)
    try:
        t = time.perf_counter()
        ok, failed = asyncio.run(_client(srv.base_url, rate, seconds))
        wall = time.perf_counter() - t

        async def stats() -> dict:  # type: ignore[type-arg]
            async with aiohttp.ClientSession() as s, s.get(srv.url + "/sim/stats") as r:
                return await r.json()  # type: ignore[no-any-return]

        st = asyncio.run(stats())
    finally:
        srv.stop()
    lag = st["emission_lag_ms"]
    print(
        f"  {ok} requests completed, {failed} failed in {wall:.1f} s; "
        f"{st['generation_tokens']} tokens in {st['steps']} engine steps"
    )
    print(
        f"  emission lag (token write − simulated step end) over {lag['count']} tokens: "
        f"p50 {lag['p50']:.3f} ms  p99 {lag['p99']:.3f} ms  p99.9 {lag['p999']:.3f} ms  "
        f"max {lag['max']:.3f} ms  (target p99 < 2 ms)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-realtime", action="store_true")
    ap.add_argument("--skip-offline", action="store_true")
    ap.add_argument("--realtime-seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=128.0)
    args = ap.parse_args()
    if not args.skip_offline:
        offline()
    if not args.skip_realtime:
        realtime(args.realtime_seconds, args.rate)
    return 0 if math.isfinite(args.rate) else 2


if __name__ == "__main__":
    sys.exit(main())
