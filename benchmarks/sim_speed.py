"""How fast the simulated engine runs: offline (virtual clock) and real time.

Usage::

    .venv/bin/python benchmarks/sim_speed.py [--skip-offline] [--skip-realtime]
        [--repeat-offline 3] [--baseline-src DIR]
        [--realtime-seconds 10] [--repeat 3] [--rate 128]

1. Offline: the seed's sweep — Qwen2.5-7B-Instruct on A100-80GB, max-model-len 32768,
   gpu-memory-utilization 0.90, max-num-seqs 256, max-num-batched-tokens 8192, random 1024 in /
   128 out, request rates 8, 16, 32, 64, 128, 1000 prompts each — and a MoE sweep of the same
   size (DeepSeek-R1's FP8 checkpoint on 8 H200 at TP 8, the same knobs and workload), each on
   one core, in a fresh process (imports warmed on a small run first), printed side by side.
   Measured on the path a user runs: the whole ``sim run`` (``run_offline``: the plan, the
   engine, the records and scrapes, the summary,
   ``requests.jsonl`` / ``server_metrics.jsonl`` / ``run.json`` on disk), and the no-files API
   the tuner and planner call (``simulate``); the engine loop alone for reference. Prints the
   simulated (virtual) seconds, wall and CPU seconds, the ratios and the CPU ratio against the
   1,000x target, ``--repeat-offline`` times (median and best), with the load average.
   ``--baseline-src DIR`` (e.g. ``src`` of a checkout of an older commit) times the same whole
   path with that code in a child process, interleaved with this code's repeats: the
   before/after figures of one run on one machine.
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
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from servetune.results.schema import BenchConfig
from servetune.sim.config import EngineConfig

SEED = EngineConfig(
    gpu="A100-80GB",
    model="Qwen/Qwen2.5-7B-Instruct",
    max_model_len=32768,
    gpu_memory_utilization=0.90,
    max_num_seqs=256,
    max_num_batched_tokens=8192,
)
MOE = EngineConfig(
    gpu="H200",
    model="deepseek-ai/DeepSeek-R1",
    tensor_parallel_size=8,
    max_model_len=32768,
    gpu_memory_utilization=0.90,
    max_num_seqs=256,
    max_num_batched_tokens=8192,
)
"""DeepSeek-R1 (its FP8 checkpoint) on 8 H200 at TP 8, the seed's knobs: issue 22's MoE sweep
of the same size (the same workload, rates and prompts)."""
SWEEPS = {"seed": SEED, "deepseek-r1-tp8": MOE}
NAMES = {"seed": "seed (Qwen2.5-7B, A100)", "deepseek-r1-tp8": "DeepSeek-R1 TP8 (H200, fp8)"}
RATES = (8, 16, 32, 64, 128)
TARGET = 1000.0
"""The whole ``sim run`` path, in simulated seconds per wall second (issue 11, item 10)."""
DRAIN_S = 15.0


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f} (5 min {five:.2f}) on {os.cpu_count()} cores"


def _cfg(rate: float, n: int = 1000) -> BenchConfig:
    return BenchConfig(
        num_prompts=n, random_input_len=1024, random_output_len=128, request_rate=rate
    )


def whole_path_sweep(name: str = "seed") -> dict[str, Any]:
    """A sweep (``SWEEPS[name]``) through ``run_offline`` (the ``sim run`` path, files on
    disk): virtual, wall and CPU seconds per rate. Uses only what every version of servetune
    since the ``arch`` package has, so it also runs on ``--baseline-src``."""
    from servetune.sim.offline import run_offline

    engine = SWEEPS[name]
    with tempfile.TemporaryDirectory() as d:  # imports and first-call set-up, not measured
        run_offline(_cfg(8, 20), engine, Path(d))
    rows = []
    for rate in RATES:
        with tempfile.TemporaryDirectory() as d:
            t, c = time.perf_counter(), time.process_time()
            res = run_offline(_cfg(rate), engine, Path(d))
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            digest = _digest(res, Path(d))
        info = res.target.simulated or {}
        s = res.summary
        rows.append(
            {
                "rate": rate,
                "virtual": float(info.get("virtual_duration_s", 0.0)),
                "wall": wall,
                "cpu": cpu,
                "out_tok_s": s.output_throughput,
                "p99_ttft": s.ttft.p99 or 0.0,
                "tpot": s.tpot.mean or 0.0,
                "digest": digest,
            }
        )
    return {"rows": rows}


def _digest(res: Any, out: Path) -> str:
    """What a run simulated, as one hash: its summary, its server summary, its simulated
    target and the bytes of ``requests.jsonl`` and ``server_metrics.jsonl`` (not ``run.json``
    whole: it carries the machine and the time). Two codes that simulate the same give the
    same digest; a speed-up must not change it."""
    import hashlib

    h = hashlib.sha256()
    h.update(res.summary.model_dump_json().encode())
    h.update(json.dumps(res.server.summary if res.server else None, sort_keys=True).encode())
    h.update(json.dumps(res.target.simulated, sort_keys=True, default=str).encode())
    for name in ("requests.jsonl", "server_metrics.jsonl"):
        h.update((out / name).read_bytes())
    return h.hexdigest()[:16]


def _child_sweep(src: str | None, name: str = "seed") -> dict[str, Any]:
    """:func:`whole_path_sweep` in a fresh process (with ``src`` first on the path)."""
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.path.abspath(src) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, __file__, "--child-sweep", name],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"the sweep failed in the child process:\n{out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _totals(rows: list[dict[str, Any]]) -> tuple[float, float, float]:
    return (
        sum(r["virtual"] for r in rows),
        sum(r["wall"] for r in rows),
        sum(r["cpu"] for r in rows),
    )


def offline(repeat: int, baseline_src: str | None) -> None:
    print(
        "offline sweeps (one core, fresh process each): the seed's knobs (32768 / 0.90 / 256 / "
        f"8192), random 1024/128, 1000 prompts per rate, rates {', '.join(map(str, RATES))}; "
        f"{', '.join(NAMES.values())}; {load()}"
    )
    medians: dict[str, tuple[float, float]] = {}
    for name in SWEEPS:
        medians[name] = _offline_one(name, repeat, baseline_src)
    parts = [f"{NAMES[n]} {wall:.0f}x wall / {cpu:.0f}x CPU" for n, (wall, cpu) in medians.items()]
    verdict = ", ".join(
        f"{n}: {'OK' if cpu >= TARGET else 'MISSED'}" for n, (_w, cpu) in medians.items()
    )
    print(
        f"side by side, whole sim run path, medians: {' | '.join(parts)}; target "
        f"{TARGET:.0f}x (CPU ratio, in process): {verdict}; {load()}"
    )
    for name in SWEEPS:
        api_and_engine(name)


def _offline_one(name: str, repeat: int, baseline_src: str | None) -> tuple[float, float]:
    """The repeats of one sweep (interleaved with the baseline's): (median wall ratio, median
    CPU ratio)."""
    print(f"{NAMES[name]}:")
    runs: list[dict[str, Any]] = []
    base_runs: list[dict[str, Any]] = []
    for k in range(repeat):
        if baseline_src:
            base_runs.append(_child_sweep(baseline_src, name))
        runs.append(_child_sweep(None, name))
        v, w, c = _totals(runs[-1]["rows"])
        line = f"  repeat {k + 1}: whole sim run path {v:.1f} s simulated in {w:.2f} s wall "
        line += f"({v / w:.0f}x), {c:.2f} s CPU ({v / c:.0f}x)"
        if base_runs:
            bv, bw, bc = _totals(base_runs[-1]["rows"])
            line += f"; baseline {bw:.2f} s wall ({bv / bw:.0f}x), {bc:.2f} s CPU ({bv / bc:.0f}x)"
        print(line + f"; {load()}")
    best = min(runs, key=lambda r: _totals(r["rows"])[1])
    print(
        f"{'rate':>6}{'virtual s':>11}{'wall s':>9}{'ratio':>8}{'cpu s':>8}{'ratio':>8}  "
        f"{'out tok/s':>10}{'p99 TTFT ms':>13}{'mean TPOT':>11}   (best repeat)"
    )
    for r in best["rows"]:
        print(
            f"{r['rate']:>6}{r['virtual']:>11.1f}{r['wall']:>9.3f}{r['virtual'] / r['wall']:>7.0f}x"
            f"{r['cpu']:>8.3f}{r['virtual'] / r['cpu']:>7.0f}x  {r['out_tok_s']:>10.0f}"
            f"{r['p99_ttft']:>13.0f}{r['tpot']:>11.1f}"
        )
    ratios = sorted(_totals(r["rows"])[0] / _totals(r["rows"])[1] for r in runs)
    cpu_ratios = sorted(_totals(r["rows"])[0] / _totals(r["rows"])[2] for r in runs)
    med, top = statistics.median(ratios), ratios[-1]
    cpu_med = statistics.median(cpu_ratios)
    verdict = "OK" if cpu_med >= TARGET else "MISSED"
    print(
        f"  whole sim run path: median {med:.0f}x, best {top:.0f}x real time (wall); CPU "
        f"{cpu_med:.0f}x; target {TARGET:.0f}x (CPU): median/target {cpu_med / TARGET:.2f} "
        f"{verdict}; {load()}"
    )
    digests = {tuple(row["digest"] for row in r["rows"]) for r in runs}
    if len(digests) != 1:
        print(f"WARNING: this code simulated differently from one repeat to the next: {digests}")
    if base_runs:
        b = sorted(_totals(r["rows"])[0] / _totals(r["rows"])[1] for r in base_runs)
        bc = sorted(_totals(r["rows"])[0] / _totals(r["rows"])[2] for r in base_runs)
        print(
            f"  baseline ({baseline_src}): median {statistics.median(b):.0f}x wall, "
            f"{statistics.median(bc):.0f}x CPU; this code is {med / statistics.median(b):.2f}x "
            f"(wall) / {cpu_med / statistics.median(bc):.2f}x (CPU) faster on the same machine, "
            "interleaved"
        )
        same = digests == {tuple(row["digest"] for row in r["rows"]) for r in base_runs}
        print(
            "  simulated the same as the baseline (summaries, server summaries, both files, per "
            f"rate): {'yes' if same else 'NO'}"
        )
    return med, cpu_med


def api_and_engine(name: str = "seed") -> None:
    """The no-files API and the engine loop alone, in this process, for the same sweep."""
    from servetune.sim.memory import plan_memory
    from servetune.sim.offline import simulate, workload_plan
    from servetune.sim.offline_run import OfflineRun

    engine = SWEEPS[name]
    simulate(_cfg(8, 20), engine)
    r = engine.resolve()
    mem = plan_memory(r)
    tot_v = tot_api = tot_eng = 0.0
    for rate in RATES:
        cfg = _cfg(rate)
        t = time.perf_counter()
        res = simulate(cfg, engine)
        tot_api += time.perf_counter() - t
        plan, _, _ = workload_plan(cfg)
        t = time.perf_counter()
        sim = OfflineRun(plan, cfg, r, mem)
        sim.run()
        tot_eng += time.perf_counter() - t
        tot_v += float((res.target.simulated or {}).get("virtual_duration_s", 0.0))
    print(
        f"{NAMES[name]}: simulate() (no files, the tuner's call): {tot_v / tot_api:.0f}x; the "
        f"engine loop "
        f"alone: {tot_v / tot_eng:.0f}x; {load()}"
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
    from servetune.workload.plan import make_plan
    from servetune.workload.tokens import load_tokenizer

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
    ap.add_argument("--repeat-offline", type=int, default=3)
    ap.add_argument("--baseline-src", help="time the same sim run path with this src directory")
    ap.add_argument("--child-sweep", choices=list(SWEEPS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_sweep:
        print(json.dumps(whole_path_sweep(args.child_sweep)))
        return 0
    if not args.skip_offline:
        offline(args.repeat_offline, args.baseline_src)
    if not args.skip_realtime:
        realtime(args.realtime_seconds, args.rate, args.repeat, args.writer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
