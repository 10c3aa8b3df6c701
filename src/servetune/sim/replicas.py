"""``sim run --replicas N --router POLICY``: N simulated engines behind the gateway's own
routing code (:mod:`servetune.routing`), on one virtual clock.

Two passes over the same plan:

1. **routing** — the N engines run side by side on one clock; at each request's send time
   every engine is advanced to it, and the policy (:class:`~servetune.routing.policies.Balancer`,
   the one the gateway's pools use) picks a replica from what a gateway would know then: the
   requests it has in flight on each (sent, not yet finished), and each engine's waiting
   queue and KV use as its ``/metrics`` would show them, read every ``signals_interval_s``
   (the gateway's ``metrics_interval_s``, 1 s by default). The prompt's block keys are those
   the gateway computes (its text, byte-chunked); the engines' prefix caches are the
   simulator's own.
2. **replicas** — each replica's requests are simulated as a run of their own
   (:class:`~servetune.sim.offline_run.OfflineRun`: its API server, its records, its scrapes),
   all on the same clock; the records are merged into one run.

The routing pass runs the engines without the API server in front (the requests reach them
at their send times, where the full run adds the API server's sub-millisecond costs), so a
policy decides on in-flight counts that can differ from the full run's by those delays; the
two passes are otherwise the same engines on the same requests. ``--max-concurrency`` (a
client cap shared by all replicas) is not modelled with replicas and is refused, and so are
sessions (``--dataset-name multiturn``): their turns are closed-loop, each due when the
answer before it ended on its replica, which a pass over fixed send times cannot give.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from servetune.arch.memory import MemoryPlan
from servetune.errors import ConfigError
from servetune.results.record import RequestRecord
from servetune.results.schema import BenchConfig
from servetune.results.server_series import ServerSample
from servetune.routing.config import RoutingConfig
from servetune.routing.keys import prompt_blocks, stable_hash
from servetune.routing.policies import Balancer
from servetune.sim.config import ResolvedConfig
from servetune.sim.engine import SimRequest
from servetune.sim.intake import block_hashes
from servetune.sim.offline_run import OfflineRun, prefix_hashes, shared_prefix_blocks
from servetune.sim.policies import make_engine
from servetune.workload.plan import Plan
from servetune.workload.spec import RequestSpec
from servetune.workload.tokens import word_pieces

NS = 1_000_000_000


class SpecRoute:
    """What the policy reads of a planned request: the session (a spec's ``session_id``,
    when the workload gives one) and the block keys of its text."""

    __slots__ = ("_blocks", "spec")

    def __init__(self, spec: RequestSpec) -> None:
        self.spec = spec
        self._blocks: list[int] | None = None

    def session_key(self) -> int | None:
        sid = getattr(self.spec, "session_id", None)
        return stable_hash(str(sid).encode()) if sid is not None else None

    def blocks(self, chunk: int) -> list[int]:
        if self._blocks is None:
            self._blocks = prompt_blocks(self.spec.text().encode("utf-8", "replace"), chunk)
        return self._blocks


@dataclass
class Routed:
    """The routing pass: which replica each request went to, and why."""

    replica: list[int]
    reasons: dict[str, int] = field(default_factory=dict)
    prefix_estimate: float | None = None
    """The router's own prefix-hit estimate (index blocks matched ÷ routed)."""


def route_plan(
    plan: Plan,
    cfg: BenchConfig,
    r: ResolvedConfig,
    mem: MemoryPlan,
    replicas: int,
    routing: RoutingConfig,
    signals_interval_s: float = 1.0,
) -> Routed:
    """Pass 1: the replica of every request of ``plan`` (see the module docstring)."""
    n = replicas
    engines = [make_engine(r, mem) for _ in range(n)]
    bal = Balancer(
        routing, [f"replica-{i}" for i in range(n)], [mem.num_gpu_blocks * r.block_size] * n
    )
    everyone = list(range(n))
    limits: list[int | None] = [None] * n
    inflight = [0] * n
    depth = [0.0] * n
    kv: list[float | None] = [0.0] * n
    next_signals = 0.0
    caching = r.enable_prefix_caching
    prefix_blocks = shared_prefix_blocks(cfg, r.block_size)
    text_keys = caching and cfg.dataset_name == "trace"  # as OfflineRun keys a trace's blocks
    max_len = r.max_model_len
    out = Routed([])
    reasons = out.reasons
    for idx, (spec, off) in enumerate(zip(plan.requests, plan.offsets_ns, strict=True)):
        t = off / NS
        for i, e in enumerate(engines):
            while e.now < t and not e.idle():
                e.advance(t)
                if e.finished:
                    inflight[i] -= len(e.finished)
                    e.finished.clear()
            if e.now < t:
                e.now = t
        if t >= next_signals:
            for i, e in enumerate(engines):
                depth[i] = float(e.num_waiting)
                kv[i] = e.kv_usage()
            next_signals = (int(t / signals_interval_s) + 1) * signals_interval_s
        pick = bal.choose(SpecRoute(spec), everyone, inflight, limits, everyone, depth, kv)
        reasons[bal.reason] = reasons.get(bal.reason, 0) + 1
        out.replica.append(pick)
        if spec.input_len + spec.output_len > max_len:
            continue  # refused by the replica's API server (the full run records it)
        if text_keys:
            hashes: tuple[Any, ...] = block_hashes(word_pieces(spec.text()), r.block_size)
        else:
            hashes = prefix_hashes(spec, prefix_blocks) if caching else ()
        engines[pick].add(SimRequest(idx, spec.input_len, spec.output_len, t, hashes, idx))
        inflight[pick] += 1
    if bal.routed_blocks:
        out.prefix_estimate = bal.matched_blocks / bal.routed_blocks
    return out


@dataclass
class ReplicaRuns:
    """Pass 2: each replica's run, and the records merged (ids: the plan's)."""

    runs: list[OfflineRun]
    records: list[RequestRecord]
    routed: Routed

    def replica_summary(self) -> list[dict[str, Any]]:
        out = []
        for i, run in enumerate(self.runs):
            pool = run.eng.pool
            out.append(
                {
                    "replica": i,
                    "requests": len(run.records),
                    "prefix_cache_hit_rate": pool.hits / pool.queries if pool.queries else None,
                    "prefix_cache_hit_tokens": pool.hits,
                    "prefix_cache_query_tokens": pool.queries,
                    "preemptions_total": run.eng.counters.preemptions,
                    "virtual_duration_s": run.eng.now,
                    "engine_busy_share": run.eng.busy_s / run.eng.now if run.eng.now else 0.0,
                }
            )
        return out

    def hit_rate(self) -> float | None:
        q = sum(run.eng.pool.queries for run in self.runs)
        return sum(run.eng.pool.hits for run in self.runs) / q if q else None

    def series(self) -> list[ServerSample]:
        return [s for run in self.runs for s in run.series]


def run_replicas(
    plan: Plan,
    cfg: BenchConfig,
    r: ResolvedConfig,
    mem: MemoryPlan,
    replicas: int,
    routing: RoutingConfig,
    signals_interval_s: float = 1.0,
) -> ReplicaRuns:
    """Both passes: N replicas behind ``routing`` over ``plan``."""
    check_replicas(cfg, replicas)
    routed = route_plan(plan, cfg, r, mem, replicas, routing, signals_interval_s)
    runs: list[OfflineRun] = []
    records: list[RequestRecord] = []
    for i in range(replicas):
        mine = [j for j, k in enumerate(routed.replica) if k == i]
        sub = Plan(
            requests=[plan.requests[j] for j in mine],
            offsets_ns=[plan.offsets_ns[j] for j in mine],
            duration_ns=plan.duration_ns,
            planned_rate=plan.planned_rate,
        )
        run = OfflineRun(sub, cfg, r, mem, keep_series=True)
        if mine:
            run.run()
        for rec in run.records:
            rec.id = mine[rec.id]
        runs.append(run)
        records.extend(run.records)
    records.sort(key=lambda rec: rec.id)
    return ReplicaRuns(runs, records, routed)


def check_replicas(cfg: BenchConfig, replicas: int) -> None:
    if replicas > 1 and cfg.dataset_name == "multiturn":
        raise ConfigError(
            "--replicas with --dataset-name multiturn: a session's turns run closed-loop (each "
            "due when the answer before it ended, on whichever replica served it), which the "
            "replicas' two-pass run does not model yet",
            hint="simulate one replica (--replicas 1), or route real engines through "
            "`servetune gateway` with a group's routing.policy; the shared-prefix and trace "
            "datasets run on replicas",
            code="sim.replicas_sessions",
        )
    if replicas < 1:
        raise ConfigError(
            f"--replicas must be ≥ 1 (got {replicas})", hint="e.g. --replicas 4 --router score"
        )
    if replicas > 1 and cfg.max_concurrency is not None:
        raise ConfigError(
            "--max-concurrency with --replicas: a client cap shared by several replicas is not "
            "modelled",
            hint="drop --max-concurrency (an open-loop rate), or run one replica",
        )


def merged_engine_facts(runs: Sequence[OfflineRun]) -> dict[str, float]:
    """The whole run's clock and work over its replicas (for ``target.simulated``)."""
    now = max((run.eng.now for run in runs), default=0.0)
    busy = sum(run.eng.busy_s for run in runs)
    return {
        "virtual_duration_s": now,
        "engine_busy_share": busy / (now * len(runs)) if now and runs else 0.0,
        "steps": float(sum(run.eng.counters.steps for run in runs)),
    }
