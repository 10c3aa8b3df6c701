"""``sim run --replicas N --router POLICY``: N simulated engines behind the gateway's own
routing code (:mod:`servetune.routing`), on one virtual clock.

Each replica is a run of its own (:class:`~servetune.sim.offline_run.OfflineRun`: its API
server, its engine and prefix cache, its records and scrapes), driven by a router
(:class:`Router`) through a :class:`~servetune.sim.offline_run.Feed`. The router holds the
requests not sent yet, soonest first: a plan's requests at their send times, a session's
first turn at the session's start — and a session's later turn once the answer before it
ended (on whichever replica served it) and the think time passed: the session runs
closed-loop across the replicas, with the single engine's session code
(:class:`~servetune.sim.offline_run.SessionState`, one state for the whole fleet: the prompt
grows by the answers as they were served, the client's context cap truncates or ends it).

At a request's send time the policy (:class:`~servetune.routing.policies.Balancer`, the one
the gateway's pools use) picks a replica from what a gateway would know then: the requests it
has in flight on each (sent, their last token not yet at the client), and each engine's
waiting queue, running requests and KV use as its ``/metrics`` showed them at the last read (every
``signals_interval_s``, the gateway's ``metrics_interval_s``, 1 s by default; the scrapes
are the replicas' own, every 0.5 s). The prompt's block keys: the gateway's (its text,
byte-chunked) for a planned prompt; for a session's turn, whose text the simulator does not
write out, the engine's own block keys of the conversation (the shared system prompt's,
then the session's), one index block per engine block.

**One clock** (conservative discrete-event order): a request is routed at ``t`` only when
every replica with work has run to ``t`` (so its finishes before ``t`` are known), the
replica furthest behind runs first, and no replica starts a step past the earliest time a
request could still reach it — the next one queued, or another replica's next possible
answer plus the shortest think time of the plan. A request that reaches a replica during
its step waits for that step's end, as on an engine. ``--max-concurrency`` (a client cap
shared by all replicas) is not modelled with replicas and is refused.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from servetune.arch.memory import MemoryPlan
from servetune.errors import ConfigError
from servetune.results import server_series as ss
from servetune.results.record import RequestRecord
from servetune.results.schema import BenchConfig
from servetune.results.server_series import ServerSample
from servetune.routing.config import RoutingConfig
from servetune.routing.keys import prompt_blocks, stable_hash
from servetune.routing.policies import Balancer
from servetune.sim.offline_run import Feed, OfflineRun, SessionState
from servetune.sim.resolved import ResolvedConfig
from servetune.workload.plan import Plan
from servetune.workload.spec import RequestSpec

NS = 1_000_000_000
INF = 1 << 62


class SpecRoute:
    """What the policy reads of a planned request: the block keys of its text."""

    __slots__ = ("_blocks", "spec")

    def __init__(self, spec: RequestSpec) -> None:
        self.spec = spec
        self._blocks: list[int] | None = None

    def session_key(self) -> int | None:
        return None

    def blocks(self, chunk: int) -> list[int]:
        if self._blocks is None:
            self._blocks = prompt_blocks(self.spec.text().encode("utf-8", "replace"), chunk)
        return self._blocks


class TurnRoute:
    """A session's turn: its session id's stable hash and its conversation's block keys (the
    engine's: equal keys for the same content at the same place)."""

    __slots__ = ("_blocks", "_key")

    def __init__(self, key: int, blocks: list[int]) -> None:
        self._key = key
        self._blocks = blocks

    def session_key(self) -> int | None:
        return self._key

    def blocks(self, chunk: int) -> list[int]:
        return self._blocks


class _TurnKeys:
    """The routing keys of a turn: the engine's own block keys of its conversation (one int
    per distinct content, :meth:`~servetune.sim.offline_run.SessionState.key`)."""

    def __init__(self, sess: SessionState) -> None:
        self.sess = sess
        self._sids: dict[int, int] = {}

    def route(self, idx: int, prompt_len: int) -> TurnRoute:
        sess = self.sess
        j = sess.of[idx][0]
        n = prompt_len // sess.block
        key = self._sids.get(j)
        if key is None:
            key = self._sids[j] = stable_hash(sess.sessions[j].sid.encode())
        return TurnRoute(key, sess.conversation_keys(j, n)[:n])


@dataclass
class Routed:
    """The routing: which replica each request went to (-1: not sent), and why."""

    replica: list[int]
    reasons: dict[str, int] = field(default_factory=dict)
    prefix_estimate: float | None = None
    """The router's own prefix-hit estimate (index blocks matched ÷ routed)."""


def _signals(series: Sequence[ServerSample], t: float) -> tuple[float, float | None, float | None]:
    """Waiting requests, KV use and running requests of the last scrape at or before ``t``
    (run s); none yet: an idle engine's."""
    for s in reversed(series):
        if s.t <= t:
            v = s.values
            return v.get(ss.WAITING, 0.0), v.get(ss.KV_CACHE_USAGE), v.get(ss.RUNNING)
    return 0.0, 0.0, 0.0


class Router:
    """N replicas of ``r`` behind ``routing`` over ``plan`` (see the module docstring)."""

    def __init__(
        self,
        plan: Plan,
        cfg: BenchConfig,
        r: ResolvedConfig,
        mem: MemoryPlan,
        replicas: int,
        routing: RoutingConfig,
        signals_interval_s: float = 1.0,
        lean: bool = False,
    ) -> None:
        self.plan = plan
        self.cfg = cfg
        self.n = replicas
        self.signals_interval_s = signals_interval_s
        B = r.block_size
        self.queue: list[tuple[int, int]] = []
        """Requests not sent yet, (run ns, plan index), soonest first."""
        self.sess: SessionState | None = None
        self.keys: _TurnKeys | None = None
        self.think_ns = INF
        """The shortest think time before a later turn (no sessions: no request is made
        during the run, the bound is infinite)."""
        if plan.sessions is not None:
            self.sess = SessionState(plan, cfg, r.max_model_len, B)
            self.keys = _TurnKeys(self.sess)
            self.queue = [(at, self.sess.first[j]) for j, at in enumerate(self.sess.starts)]
            thinks = [t.think_s for s in plan.sessions for t in s.turns[1:]]
            self.think_ns = round(min(thinks) * NS) if thinks else INF
            # one index block per engine block: the index's capacity in the engine's blocks
            routing = routing.model_copy(
                update={"chunk_bytes": max(8, round(B * routing.bytes_per_token))}
            )
        else:
            self.queue = [(at, i) for i, at in enumerate(plan.offsets_ns)]
        heapq.heapify(self.queue)
        self.routing = routing
        self.feeds = [Feed(self.sess, self.queue) for _ in range(replicas)]
        self.runs = [
            OfflineRun(
                plan,
                cfg,
                r,
                mem,
                keep_series=True,
                feed=f,
                token_times=not lean,
                series_histograms=not lean,
            )
            for f in self.feeds
        ]
        kv_tokens = (mem.engine_blocks or mem.num_gpu_blocks) * B
        names = [f"replica-{i}" for i in range(replicas)]
        self.bal = Balancer(routing, names, [kv_tokens] * replicas)
        self.routed = Routed([-1] * len(plan.requests))

    def run(self) -> None:
        n = self.n
        runs, feeds, queue = self.runs, self.feeds, self.queue
        gens: list[Iterator[bool]] = [run.steps() for run in runs]
        waiting = [True] * n
        """Replica i has nothing to do until it is sent a request."""
        for g in gens:
            next(g)
        ends: list[list[int]] = [[] for _ in range(n)]
        inflight = [0] * n
        everyone = list(range(n))
        limits: list[int | None] = [None] * n
        depth = [0.0] * n
        kv: list[float | None] = [0.0] * n
        running: list[float | None] = [0.0] * n
        next_signals = 0.0
        bal, routed, reasons = self.bal, self.routed, self.routed.reasons
        specs = self.plan.requests
        sess, keys = self.sess, self.keys
        think = self.think_ns
        engines = [run.eng for run in runs]
        while True:
            t = queue[0][0] if queue else INF
            # the replica furthest behind, among those with work, runs first
            x = -1
            x_now = INF
            for i in range(n):
                if not waiting[i]:
                    now_i = round(engines[i].now * NS)
                    if now_i < x_now:
                        x, x_now = i, now_i
            if x >= 0 and x_now < t:
                bound = t
                for i in range(n):
                    if i != x and not waiting[i]:
                        b = round(engines[i].now * NS) + think
                        if b < bound:
                            bound = b
                feeds[x].limit_ns = max(bound, x_now)
                waiting[x] = not next(gens[x])  # False: idle until it is sent a request
                continue
            if not queue:
                break
            at, idx = heapq.heappop(queue)
            spec = specs[idx]
            route: Any
            if sess is not None and keys is not None:
                p_len = sess.prompt(idx, spec.output_len)
                if p_len is None:
                    continue  # the context cap ends the session: nothing is sent
                route = keys.route(idx, p_len)
            else:
                route = SpecRoute(spec)
            for i in range(n):  # the answers that reached their clients by now
                f = feeds[i].ends
                if f:
                    for e in f:
                        heapq.heappush(ends[i], e)
                    f.clear()
                h = ends[i]
                while h and h[0] <= at:
                    heapq.heappop(h)
                    inflight[i] -= 1
            t_s = at / NS
            if t_s >= next_signals and bal.uses_signals:
                for i in range(n):
                    depth[i], kv[i], running[i] = _signals(runs[i].series, t_s)
                k = math.floor(t_s / self.signals_interval_s) + 1
                next_signals = k * self.signals_interval_s
            pick = bal.choose(route, everyone, inflight, limits, everyone, depth, kv, running)
            reasons[bal.reason] = reasons.get(bal.reason, 0) + 1
            routed.replica[idx] = pick
            heapq.heappush(feeds[pick].due, (at, idx))
            inflight[pick] += 1
            waiting[pick] = False
        for feed, g in zip(feeds, gens, strict=True):
            feed.closing = True
            for _ in g:
                pass
        if bal.routed_blocks:
            routed.prefix_estimate = bal.matched_blocks / bal.routed_blocks


@dataclass
class ReplicaRuns:
    """Each replica's run, and the records merged (ids: the plan's)."""

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
    lean: bool = False,
) -> ReplicaRuns:
    """N replicas behind ``routing`` over ``plan``, on one clock. ``lean`` (the planner's
    fleets): records without per-token times, scrapes without histograms — what a P99 and
    the routing signals need, nothing more."""
    check_replicas(cfg, replicas)
    router = Router(plan, cfg, r, mem, replicas, routing, signals_interval_s, lean)
    router.run()
    records = [rec for run in router.runs for rec in run.records]
    records.sort(key=lambda rec: rec.id)
    return ReplicaRuns(router.runs, records, router.routed)


def check_replicas(cfg: BenchConfig, replicas: int) -> None:
    if replicas < 1:
        raise ConfigError.over_fields(
            f"{{replicas}} must be ≥ 1 (got {replicas})", hint="e.g. {replicas}=4 {router}=score"
        )
    if replicas > 1 and cfg.max_concurrency is not None:
        raise ConfigError.over_fields(
            "{max_concurrency} with {replicas}: a client cap shared by several replicas is not "
            "modelled",
            hint="drop {max_concurrency} (an open-loop rate), or run one replica",
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
