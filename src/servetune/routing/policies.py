"""The routing policies, one :class:`Balancer` per group of targets (upstreams or replicas).

The caller says which targets may take the request now (``eligible``: a free slot, a circuit
that lets it through), which are healthy (circuit not open) and how many requests each has in
flight; the balancer picks one and says why (:attr:`Balancer.reason`):

- ``least-loaded`` — the lowest in-flight ÷ admission limit (the first such in order);
- ``round-robin`` — the next eligible target after the last one picked;
- ``session`` — the session's rendezvous choice among all targets; when that one cannot take
  it, the next in the session's order (``rebalanced`` when its circuit is open, ``spill``
  when it is full): every gateway replica computes the same order, a failed upstream moves
  only its own sessions, and they come back when it does. No session id: least-loaded;
- ``prefix`` — the longest match of the prompt's blocks in each target's prefix index,
  ties broken by rendezvous on the session (else the prompt's first block; least-loaded when
  the prompt has no full block either), among the targets within the load bound;
- ``score`` — ``w_p·prefix + w_q·(1 − depth ÷ (max(deepest, queue_scale) + 1)) +
  w_k·(1 − kv use)`` (llm-d's scorers, weights 3:2:2), the highest wins among the targets
  within the load bound, scores within :data:`TIE` of the best by rendezvous. The queue term
  is scaled to at least ``queue_scale`` (6) requests: a request or two of difference between
  short queues weighs little (two waiting against none: 2/7 of the weight, where against the
  deepest + 1 alone it was 2/3 — more than a third of the prompt cached), deep queues count
  in full. ``depth`` is the engine's *waiting queue*
  (:func:`queue_depth`: what its ``/metrics`` said at the last read, or this router's
  requests in flight there beyond the ones the engine was running then, whichever is more —
  requests sent since the read count as waiting). Requests running in the engine's batch
  are not depth: a new request's prefill joins the batch beside them, where one waiting
  ahead delays it (counting them moved a session off its cache whenever its home had a
  decode or two more in flight than an idle replica — at a light load, most of the time).

For ``prefix`` and ``score`` a request with a session id credits its session's rendezvous
choice with at least the best match any target has: another gateway replica that routed the
session's earlier turns (and whose index this one cannot see) sent them there, so replicas
sharing nothing keep a session together while the loads do not say otherwise.

**Load bound** (bounded-load consistent hashing, Mirrokni et al. 2018): with ``m`` requests
in flight over ``n`` healthy targets, a target may take one more only while its count after
it is at most ``max(c·(m+1)/n, (m+1)/n + slack)``. When none qualifies the least loaded takes
it (``load_bound``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from servetune.routing import rendezvous
from servetune.routing.config import RoutingConfig
from servetune.routing.keys import stable_hash
from servetune.routing.prefix_index import PrefixIndex

TIE = 0.01
"""``score``: scores within this share of the weights' sum are equal, and rendezvous decides —
noise in the engines' gauges (a KV use of 0.01 against 0) does not move a session."""


class Routable(Protocol):
    """What a policy reads of a request (computed only when a policy asks)."""

    def session_key(self) -> int | None: ...

    def blocks(self, chunk: int) -> list[int]: ...


class Balancer:
    """The routing state of one group of targets, named ``names`` (stable across replicas)."""

    def __init__(
        self, cfg: RoutingConfig, names: Sequence[str], kv_tokens: Sequence[int | None] = ()
    ) -> None:
        self.cfg = cfg
        self.policy = cfg.policy
        self.names = list(names)
        self.seeds = [stable_hash(n.encode()) for n in names]
        kv = list(kv_tokens) + [None] * (len(names) - len(kv_tokens))
        self.indexes = (
            [PrefixIndex(cfg.index_blocks(k)) for k in kv]
            if cfg.policy in ("prefix", "score")
            else []
        )
        self.uses_signals = cfg.policy == "score"
        self.weight_sum = cfg.weights.prefix + cfg.weights.queue + cfg.weights.kv
        self.uses_blocks = cfg.policy in ("prefix", "score")
        self.reason = ""
        self._rr = 0
        self.matched_blocks = 0
        """Index blocks matched by the choices so far (the prefix-hit estimate's numerator)."""
        self.routed_blocks = 0

    # -- the choice ----------------------------------------------------------------------
    def choose(
        self,
        route: Routable | None,
        eligible: Sequence[int],
        inflight: Sequence[int],
        limits: Sequence[int | None],
        healthy: Sequence[int],
        depth: Sequence[float] = (),
        kv_use: Sequence[float | None] = (),
        running: Sequence[float | None] = (),
    ) -> int:
        """The index (into the targets) of the one to use; ``eligible`` is not empty.
        ``depth``, ``kv_use``, ``running``: each target's waiting queue, KV use and running
        requests at the last read of its ``/metrics`` (None or missing: not read)."""
        p = self.policy
        if p == "round-robin":
            return self._round_robin(eligible)
        if p == "least-loaded" or route is None:
            self.reason = "least_loaded"
            return least_loaded(eligible, inflight, limits)
        if p == "session":
            return self._session(route, eligible, inflight, limits, healthy)
        return self._by_prefix(route, eligible, inflight, limits, healthy, depth, kv_use, running)

    def _round_robin(self, eligible: Sequence[int]) -> int:
        n = len(self.names)
        start = self._rr % n
        pick = min(eligible, key=lambda i: (i - start) % n)
        self._rr = pick + 1
        self.reason = "round_robin"
        return pick

    def _session(
        self,
        route: Routable,
        eligible: Sequence[int],
        inflight: Sequence[int],
        limits: Sequence[int | None],
        healthy: Sequence[int],
    ) -> int:
        key = route.session_key()
        if key is None:
            self.reason = "no_session"
            return least_loaded(eligible, inflight, limits)
        ok = set(eligible)
        ranked = rendezvous.order(key, self.seeds)
        top = ranked[0]
        for i in ranked:
            if i in ok:
                if i == top:
                    self.reason = "affinity"
                else:
                    self.reason = "rebalanced" if top not in healthy else "spill"
                return i
        self.reason = "least_loaded"  # pragma: no cover - eligible is a subset of targets
        return least_loaded(eligible, inflight, limits)

    def _bounded(
        self, eligible: Sequence[int], inflight: Sequence[int], healthy: Sequence[int]
    ) -> list[int]:
        n = len(healthy) or 1
        after = (sum(inflight[i] for i in healthy) + 1) / n
        cap = max(self.cfg.load_bound * after, after + self.cfg.load_slack)
        return [i for i in eligible if inflight[i] + 1 <= cap]

    def _by_prefix(
        self,
        route: Routable,
        eligible: Sequence[int],
        inflight: Sequence[int],
        limits: Sequence[int | None],
        healthy: Sequence[int],
        depth: Sequence[float],
        kv_use: Sequence[float | None],
        running: Sequence[float | None],
    ) -> int:
        cand = self._bounded(eligible, inflight, healthy)
        blocks = route.blocks(self.cfg.chunk_bytes)
        if not cand:
            self.reason = "load_bound"
            pick = least_loaded(eligible, inflight, limits)
            self._record(pick, blocks, self.indexes[pick].match(blocks))
            return pick
        session = route.session_key()
        key = session if session is not None else (blocks[0] if blocks else None)
        idx = self.indexes
        matched = {i: idx[i].match(blocks) for i in cand}
        if session is not None and healthy:
            home = rendezvous.best(session, self.seeds, healthy)
            if home in matched:
                matched[home] = max(matched.values())
        nb = len(blocks)
        if self.policy == "prefix":
            scores = {i: float(m) for i, m in matched.items()}
        else:
            w = self.cfg.weights
            nd, nr = len(depth), len(running)
            deep = [
                queue_depth(
                    inflight[i], depth[i] if i < nd else 0.0, running[i] if i < nr else None
                )
                for i in cand
            ]
            top = max(max(deep), float(self.cfg.queue_scale)) + 1.0
            scores = {}
            for j, i in enumerate(cand):
                kv = kv_use[i] if i < len(kv_use) else None
                scores[i] = (
                    w.prefix * (matched[i] / nb if nb else 0.0)
                    + w.queue * (1.0 - deep[j] / top)
                    + w.kv * (1.0 - (kv or 0.0))
                )
        best = max(scores.values())
        tie = 1e-9 if self.policy == "prefix" else TIE * self.weight_sum
        tied = [i for i in cand if scores[i] >= best - tie]
        if len(tied) == 1:
            pick = tied[0]
        elif key is None:  # nothing to key on (no session, no full block): spread the load
            pick = least_loaded(tied, inflight, limits)
        else:
            pick = rendezvous.best(key, self.seeds, tied)
        self.reason = self.policy if matched[pick] or not nb else f"{self.policy}_miss"
        self._record(pick, blocks, idx[pick].match(blocks))
        return pick

    def _record(self, pick: int, blocks: list[int], matched: int) -> None:
        """The prompt's blocks are now (approximately) cached at ``pick``."""
        self.matched_blocks += matched
        self.routed_blocks += len(blocks)
        if blocks:
            self.indexes[pick].add(blocks)

    def forget(self, i: int) -> None:
        """Target ``i`` lost its cache (restarted): its index starts over."""
        if self.indexes:
            self.indexes[i].clear()


def queue_depth(inflight: int, waiting: float, running: float | None) -> float:
    """A target's waiting queue now: the engine's at its last ``/metrics`` read, or this
    router's requests in flight there beyond the ``running`` it read then (those sent since
    count as waiting until the next read), whichever is more; never read (``running`` None):
    every request in flight."""
    if running is None:
        return max(float(inflight), waiting)
    return max(inflight - running, waiting, 0.0)


def load_share(inflight: int, limit: int | None) -> float:
    """What least-loaded compares: in-flight ÷ limit (no limit: the in-flight count, scaled
    below any limited target's share)."""
    return inflight / limit if limit else inflight * 1e-9


def least_loaded(
    eligible: Sequence[int], inflight: Sequence[int], limits: Sequence[int | None]
) -> int:
    """The first eligible target with the lowest :func:`load_share`."""
    best = eligible[0]
    best_load = float("inf")
    for i in eligible:
        load = load_share(inflight[i], limits[i])
        if load < best_load:
            best, best_load = i, load
    return best
