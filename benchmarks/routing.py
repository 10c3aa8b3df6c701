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

**Real (2 vLLM CPU replicas, ``--real``)**: see ``benchmarks/routing_real.py`` — the tiny
test model on vLLM's CPU build (128-token KV blocks, stated), the simulator calibrated on
replica 0 first (``sim calibrate --gpu cpu``), then ``--real-repeats`` rounds of each policy
behind ``servetune gateway`` on ``REAL_WORKLOAD``'s sessions (6 turns, 4 shared 512-token
system prompts, 160-token messages, 64-token answers, 1 s think time) at ``--real-load`` of
the replicas' measured capacity; P50/P99 TTFT pooled with 95% intervals (bootstrap over
sessions), each round's P99 (the noise), the per-replica diagnosis, and score's gain over
round-robin predicted by 2 simulated replicas (calibrated, and the catalog's CPU constants)
÷ measured, for hit rate and TTFT. ``POLICY@before`` with ``--real-before-src SRC`` runs a
policy from another checkout beside it.

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
from pathlib import Path
from typing import Any

from routing_real import run_real
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
    """The real replicas' workload (and its simulated counterpart): ``--real-workload``'s
    sessions (:data:`REAL_WORKLOAD`), ``--real-sessions`` of them at ``--real-rate``/s."""
    w = args.real_workload
    wl = sessions(args.real_sessions, args.real_rate, args.seed, w["turns"], w["system"],
                  w["prompts"], w["user"], w["out"], w["think"])  # fmt: skip
    return wl.model_copy(update={"endpoint": "chat"})


REAL_WORKLOAD = {"turns": 6, "system": 512, "prompts": 4, "user": 160, "out": 64, "think": 1.0}
"""The real replicas' sessions: the simulated multi-turn workload's shape in the tiny model's
2,048-token context — 6 turns, 4 shared system prompts of 512 tokens, 160-token user
messages, 64-token answers, 1 s mean think time (exponential): a later turn's history is
several of vLLM CPU's 128-token blocks, its last prompt 1,792 tokens."""


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


def sim_of_real(
    args: argparse.Namespace, profile: Path | None
) -> dict[str, dict[str, dict[str, Any]]]:
    """The real replicas' sessions on 2 simulated replicas: with the constants calibrated on
    the real replicas (``profile``), and with the catalog's CPU constants (this machine's CPU
    measured, the tiny model's config); the real engines' knobs and 128-token block."""
    from servetune.commands._engine_args import with_calibration
    from servetune.engines import provisioned

    tiny = provisioned.tiny_model()
    wl = real_workload(args)
    knobs: dict[str, Any] = {"max_model_len": 2048, "max_num_seqs": 8, "block_size": 128}
    engines: dict[str, EngineConfig] = {}
    if tiny is not None:
        engines["catalog CPU constants"] = EngineConfig(
            gpu="cpu", model=str(tiny.small_hf_dir / "config.json"), **knobs
        )
    if profile is not None:
        fields = dict(knobs)
        with_calibration(fields, argparse.Namespace(calibration=str(profile), gpu=None,
                                                    model=None))  # fmt: skip
        engines["calibrated on the real replicas"] = EngineConfig(**fields)
    out = {}
    for name, eng in engines.items():
        rows = {p: run_sim(wl, eng, p, 2) for p in args.real_policies if "@" not in p}
        table(f"simulated counterpart ({name}): the same sessions on 2 simulated replicas",
              rows)  # fmt: skip
        out[name] = rows
    return out


def gains(sim: dict[str, dict[str, Any]], real: dict[str, dict[str, Any]], seed: int,
          name: str) -> None:  # fmt: skip
    """score's gain over round-robin, predicted (simulated) and measured (real), side by side:
    the hit rate's (points) and the TTFT's (round-robin ÷ score, P50 and P99); target: the
    predicted gain within 25% of the measured one."""
    s_sc, s_rr, r_sc, r_rr = sim["score"], sim["round-robin"], real["score"], real["round-robin"]
    ps, pr = s_sc["hit"] - s_rr["hit"], r_sc["hit"] - r_rr["hit"]
    rel = abs(ps - pr) / abs(pr) if pr else float("inf")
    print(f"\ngain of score over round-robin, simulated ({name}) vs real "
          f"(same sessions, seed {seed}):")  # fmt: skip
    ratio = ps / pr if pr else 0.0
    print(f"  hit rate      {ps:+.1%} vs {pr:+.1%}: predicted ÷ measured {ratio:.2f} "
          f"(target within 25%: {'met' if rel <= 0.25 else 'MISSED'})")  # fmt: skip
    for q in ("ttft_p50", "ttft_p99"):
        gs, gr = s_rr[q] / s_sc[q], r_rr[q] / r_sc[q]
        # the gain is the TTFT saved: 1 - score/rr, compared as the hit rate's is
        ss_, sr_ = 1 - 1 / gs, 1 - 1 / gr
        rel_t = abs(ss_ - sr_) / abs(sr_) if sr_ else float("inf")
        print(f"  {q.replace('_', ' ').upper():<13} round-robin ÷ score {gs:.2f} vs {gr:.2f}; "
              f"TTFT saved {ss_:+.0%} vs {sr_:+.0%}: predicted ÷ measured "
              f"{ss_ / sr_ if sr_ else 0.0:.2f} (target within 25%: "
              f"{'met' if rel_t <= 0.25 else 'MISSED'})")  # fmt: skip


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
    ap.add_argument("--real-sessions", type=int, default=80, help="sessions a round")
    ap.add_argument(
        "--real-rate",
        type=float,
        default=None,
        help="sessions/s (default: --real-load of the calibration's measured capacity; 0.5)",
    )
    ap.add_argument(
        "--real-load",
        type=float,
        default=0.6,
        help="the offered request rate ÷ 2 replicas' throughput at concurrency 8, uncached",
    )
    ap.add_argument("--real-repeats", type=int, default=3, help="rounds of every policy")
    ap.add_argument("--real-kv-gib", type=float, default=1.0, help="each replica's KV pool")
    ap.add_argument(
        "--real-workload",
        type=lambda t: {**REAL_WORKLOAD, **{k: float(v) if k == "think" else int(v)
                                            for k, v in (x.split("=") for x in t.split(","))}},
        default=dict(REAL_WORKLOAD),
        help="KEY=VALUE,... over turns, system, prompts, user, out, think",
    )  # fmt: skip
    ap.add_argument(
        "--real-before-src",
        type=Path,
        help="a checkout's src/: a policy named POLICY@before in --real-policies runs the "
        "gateway from it (an earlier version of the policy, side by side)",
    )
    ap.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                    help="--real: no calibration on the real replicas")  # fmt: skip
    ap.add_argument(
        "--real-policies",
        type=lambda t: [x.strip() for x in t.split(",") if x.strip()],
        default=["round-robin", "score", "session"],
        help="policies run on the real replicas (round-robin and score at least)",
    )
    ap.add_argument("--mt-sessions", type=int, default=300, help="simulated multi-turn sessions")
    args = ap.parse_args()
    plain = {p.partition("@")[0] for p in args.real_policies}
    if not {"round-robin", "score"} <= set(args.real_policies) or not plain <= set(POLICIES):
        ap.error(
            f"--real-policies: some of {', '.join(POLICIES)}, round-robin and score among them"
        )
    if args.real_only:
        run_real(args, sim_of_real, gains)
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
        run_real(args, sim_of_real, gains)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
