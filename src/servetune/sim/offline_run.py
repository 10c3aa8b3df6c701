"""The virtual-clock loop of ``sim run`` (:class:`OfflineRun`): arrivals → engine → records
and scrapes.

The client is modelled as a perfect one (it sends on schedule; ``--max-concurrency`` holds
requests until a slot frees, first in first out); the API server in front adds its own cost
(:mod:`servetune.sim.frontend`). Each finished request becomes a RequestRecord
(``tokens_source="sim"``, one chunk per token) and every 0.5 s of virtual time the engine is
scraped; both are kept and, given appenders, written as ``requests.jsonl`` and
``server_metrics.jsonl`` lines. The entry points that run it and write ``run.json``:
:mod:`servetune.sim.offline`.
"""

from __future__ import annotations

import heapq
import math
import sys
import time
from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import orjson

from servetune.arch.memory import MemoryPlan
from servetune.metrics.summary import pooled_itl_ms
from servetune.results.io import LineAppender, record_line
from servetune.results.record import RequestRecord
from servetune.results.schema import BenchConfig
from servetune.results.server_series import Histogram, ServerSample
from servetune.sim.construct import ok_record
from servetune.sim.engine import Engine, SimRequest
from servetune.sim.frontend import ApiServer, SharedIntake
from servetune.sim.intake import block_hashes, too_long_message
from servetune.sim.policies import make_engine
from servetune.sim.resolved import ResolvedConfig
from servetune.sim.scrape import as_server_sample, server_sample
from servetune.workload.plan import Plan
from servetune.workload.spec import RequestSpec
from servetune.workload.tokens import word_pieces

SAMPLE_INTERVAL_S = 0.5
NS = 1_000_000_000

_HASHES: dict[int, tuple[tuple[str, int, int], ...]] = {}


def _prompt_hashes(idx: int, nblocks: int) -> tuple[tuple[str, int, int], ...]:
    """Block keys of prompt ``idx`` (the same objects for every run that sends it)."""
    have = _HASHES.get(idx, ())
    if len(have) < nblocks:
        have = _HASHES[idx] = have + tuple(("p", idx, b) for b in range(len(have), nblocks))
    return have[:nblocks]


def prefix_hashes(spec: RequestSpec, prefix_blocks: int) -> tuple[Any, ...]:
    """The block keys a request shares with others (the ``prefix`` dataset's group prefix),
    for the engine's prefix cache."""
    if spec.group is None or not prefix_blocks:
        return ()
    return tuple(("g", spec.group, b) for b in range(prefix_blocks))


def shared_prefix_blocks(cfg: BenchConfig, block_size: int) -> int:
    """Full blocks of the ``prefix`` dataset's shared prefix (0 for other datasets)."""
    return cfg.prefix_len // block_size if cfg.dataset_name == "prefix" else 0


class SessionState:
    """A plan's sessions on the virtual clock: which turn each request is, what each
    conversation holds, and the prefix-cache keys of its blocks.

    A conversation's tokens are the system prompt's, then each kept exchange's (user message,
    answer) and the new message. Block ``b`` of it is keyed by the shared system prompt when it
    lies wholly inside that prompt, else by (session, epoch, b): the same content in the same
    place of the same conversation — the answer's blocks, published when a turn finishes, are
    the next turn's prompt blocks. A truncation (the oldest exchange left out to fit the
    client's context cap) starts a new epoch: what follows the system prompt changed."""

    def __init__(self, plan: Plan, cfg: BenchConfig, max_len: int, block: int) -> None:
        assert plan.sessions is not None and plan.session_offsets_ns is not None
        self.sessions = plan.sessions
        self.starts = plan.session_offsets_ns
        self.block = block
        self.seed = cfg.seed
        mt = cfg.multiturn
        self.cap = mt.max_context if mt.max_context is not None else max_len
        self.end_on_overflow = mt.on_overflow == "end"
        self.deadline = plan.duration_ns
        self.first: list[int] = []
        self.of: list[tuple[int, int]] = []
        """Request index → (session, turn index from 0)."""
        for j, sess in enumerate(self.sessions):
            self.first.append(len(self.of))
            self.of.extend((j, k) for k in range(len(sess.turns)))
        self.kept: dict[int, list[tuple[int, int]]] = {}
        """Session → its kept exchanges (user tokens, answer tokens)."""
        self.epoch: dict[int, int] = {}
        self.dropped: dict[int, int] = {}
        self.prompt_len: dict[int, int] = {}
        """Request index → its prompt's length as sent."""
        self._ids: dict[tuple[Any, ...], int] = {}
        """Each block key, as one int (the pool and the routers compare keys only)."""
        self._conv: dict[int, tuple[int, list[int]]] = {}
        """Session → (epoch, its conversation's block keys so far): made once each."""

    def prompt(self, idx: int, max_tokens: int) -> int | None:
        """Turn ``idx``'s prompt length once under the cap, or None: the session ends."""
        j, k = self.of[idx]
        sess = self.sessions[j]
        kept = self.kept.setdefault(j, [])
        n = sess.system_tokens + sess.turns[k].user_tokens + sum(u + a for u, a in kept)
        while n + max_tokens > self.cap:
            if self.end_on_overflow or not kept:
                return None
            u, a = kept.pop(0)
            n -= u + a
            self.epoch[j] = self.epoch.get(j, 0) + 1
            self.dropped[j] = self.dropped.get(j, 0) + 1
        self.prompt_len[idx] = n
        return n

    def key(self, j: int, b: int) -> int:
        """Block ``b`` of session ``j``'s conversation (its current epoch), as an int: one
        per distinct content key — the shared system prompt's ``("y", seed, system, b)``,
        else ``("c", session, epoch, b)``."""
        sess = self.sessions[j]
        if sess.system_id is not None and (b + 1) * self.block <= sess.system_tokens:
            return self._id(("y", self.seed, sess.system_id, b))
        return self._id(("c", sess.sid, self.epoch.get(j, 0), b))

    def _id(self, k: tuple[Any, ...]) -> int:
        ids = self._ids
        v = ids.get(k)
        if v is None:
            v = ids[k] = len(ids)
        return v

    def conversation_keys(self, j: int, blocks: int) -> list[int]:
        """The keys of session ``j``'s first ``blocks`` blocks (a list kept and grown: the
        caller must not change it)."""
        epoch = self.epoch.get(j, 0)
        got = self._conv.get(j)
        if got is None or got[0] != epoch:
            got = self._conv[j] = (epoch, [])
        keys = got[1]
        for b in range(len(keys), blocks):
            keys.append(self.key(j, b))
        return keys

    def hashes(self, idx: int, prompt_len: int) -> tuple[int, ...]:
        j = self.of[idx][0]
        n = prompt_len // self.block
        return tuple(self.conversation_keys(j, n)[:n])

    def more_keys(self, idx: int, prompt_len: int) -> Callable[[int], list[int]]:
        j = self.of[idx][0]
        start = prompt_len // self.block
        epoch = self.epoch.get(j, 0)

        def more(n: int) -> list[int]:
            sid = self.sessions[j].sid
            return [self._id(("c", sid, epoch, b)) for b in range(start, start + n)]

        return more

    def record_of(self, idx: int) -> tuple[str, int, int, int | None]:
        j, k = self.of[idx]
        return (self.sessions[j].sid, k + 1, len(self.sessions[j].turns), self.dropped.get(j))

    def answered(self, idx: int, out_tokens: int, end_ns: int) -> tuple[int, int] | None:
        """Turn ``idx`` got its answer at ``end_ns`` (run clock): (when the next turn is due,
        its index), or None when the session is over."""
        j, k = self.of[idx]
        sess = self.sessions[j]
        self.kept[j].append((sess.turns[k].user_tokens, out_tokens))
        if k + 1 >= len(sess.turns):
            return None
        due = end_ns + round(sess.turns[k + 1].think_s * NS)
        if self.deadline is not None and due >= self.deadline:
            return None
        return due, idx + 1


class Feed:
    """What drives a run from outside (:mod:`servetune.sim.replicas`: several runs, each on its
    own engine, on one clock behind a router). The run's requests are those routed to it:
    ``due`` (run ns, plan index), soonest first, pushed by the router; a session's next turn
    goes to the router's queue ``sink`` (the same (due, index) pairs), not to this run's own;
    ``ends`` gets when each request ended for its client (in order of finishing, the router
    counts its in-flight requests from them). The run hands back (its loop yields) after every
    engine step, and when it has nothing to do until the router sends more; ``limit_ns``
    bounds how far one step call may run on (a stretch of decode steps starts none at or
    after it: the router may have a request for this engine then); ``closing``: nothing more
    will come, the run ends when its engine is idle."""

    __slots__ = ("closing", "due", "ends", "limit_ns", "sessions", "sink")

    def __init__(self, sessions: SessionState | None, sink: list[tuple[int, int]]) -> None:
        self.sessions = sessions
        self.sink = sink
        self.due: list[tuple[int, int]] = []
        self.ends: list[int] = []
        self.limit_ns = 0
        self.closing = False


class OfflineRun:
    """The virtual-clock loop: arrivals → engine → records and scrapes."""

    def __init__(
        self,
        plan: Plan,
        cfg: BenchConfig,
        r: ResolvedConfig,
        mem: MemoryPlan,
        requests_out: LineAppender | None = None,
        samples_out: LineAppender | None = None,
        progress: bool = False,
        warm_prompts: int = 0,
        engine: Engine | None = None,
        prompt_ids: bool = False,
        token_times: bool = True,
        keep_series: bool = False,
        feed: Feed | None = None,
        series_histograms: bool = True,
    ) -> None:
        """``warm_prompts``: the first N prompts of the plan are already in the prefix cache
        (a server that served them before, e.g. ``vllm bench serve``'s test request).
        ``engine``: run on this engine (its clock, prefix cache and counters carry over from
        what it ran before: a series of runs against one server); records are timed from
        this run's start. ``prompt_ids``: prompt ``i`` of every run is the same text, so its
        full blocks are shared across runs (vLLM's seeded random dataset does this: prompt
        ``i`` starts with the same tokens whatever the number of prompts or their length).
        ``feed``: the run is one replica of several, driven by a router (:class:`Feed`; step
        it with :meth:`steps`). ``series_histograms``: False keeps the scrapes' gauges and
        counters only (nothing written: with ``samples_out`` it is ignored)."""
        self.plan = plan
        self.feed = feed
        self.warm_prompts = warm_prompts
        self.prompt_ids = prompt_ids
        self.token_times = token_times
        """False: records keep the first and last token times only (no chunk_ns)."""
        self.cfg = cfg
        self.r = r
        self.eng = engine if engine is not None else make_engine(r, mem)
        self.t0 = self.eng.now
        self.id_base = self.eng.next_id
        self.requests_out = requests_out
        self.samples_out = samples_out
        self.progress = progress
        self.records: list[RequestRecord] = []
        self.api = ApiServer(0, 0)
        self.samples = 0
        self.keep_series = keep_series or samples_out is not None
        self.series_histograms = series_histograms or samples_out is not None
        self.series: list[ServerSample] = []
        """The scrapes (written to ``samples_out`` or kept with ``keep_series``), for the
        run's server summary."""
        self._buf: list[bytes] = []
        self._hist_last: dict[str, tuple[dict[str, Any], Histogram]] = {}
        self._hist_json: dict[str, tuple[dict[str, Any], bytes]] = {}
        """A histogram's last snapshot and its ``"name":{...}`` JSON, by name (a snapshot
        unchanged since the last scrape is the same dict: its bytes are written again)."""
        self._done: list[tuple[SimRequest, int, int, int]] = []
        self._step0 = self.eng.step
        """The engine's first step of this run (``_deliv`` is indexed from it)."""
        self._shift = round(self.t0 * NS)
        """This run's start on the engine clock (ns): records are timed from it."""
        self._deliv: list[int] = []
        self._deliv_a = array("q")
        """``_deliv`` as int64s (what ``requests.jsonl`` lines are written from)."""
        """When the tokens of each step since ``_step0`` reached the clients (run clock, ns).
        One int per step, shared: a record's token times are slices of this list (the
        requests of a step all get its delivery time), so a run makes one int per step, not
        one per token."""
        """Finished requests whose records are not made yet (made by the 256)."""
        self._sess: SessionState | None = None
        self._ends: list[int] = []
        """Session runs: when each request of ``eng.finished`` ended, in its order."""
        self._offsets: list[int] = plan.offsets_ns
        """The scheduled times (a session's later turns: when they came due)."""
        self._segs: dict[int, tuple[RequestRecord, list[tuple[int, int]]]] = {}
        """A successful record's steps (its token times: ``_deliv`` over them), by its id."""

    def _record(self, rec: RequestRecord) -> None:
        self.records.append(rec)
        if self.requests_out is not None:
            self._buf.append(record_line(rec))
            if len(self._buf) >= 256:
                self.requests_out.write(b"".join(self._buf))
                self._buf.clear()

    def _flush(self) -> None:
        if self.requests_out is not None and self._buf:
            self.requests_out.write(b"".join(self._buf))
            self._buf.clear()

    def run(self) -> None:
        for _ in self.steps():
            pass

    def steps(self) -> Iterator[bool]:
        """The loop; it yields only with a :class:`Feed` (see there) — True after an engine
        step, False when it waits for the router — else it runs to the end in the first
        ``next``."""
        plan, eng, cfg = self.plan, self.eng, self.cfg
        feed = self.feed
        specs = plan.requests
        t0 = self.t0
        t0_ns = round(t0 * NS)
        base = self.id_base
        eff = eng.model.eff
        chat = self.cfg.endpoint == "chat"
        # the chat template is rendered for the whole burst first (shared), then the intake
        # proper takes the requests one by one (servetune.sim.frontend)
        render_ns = round(eff.frontend_chat_per_request_ms * 1e6) if chat else 0
        render = SharedIntake(render_ns)
        api = self.api = ApiServer(
            round(eff.frontend_per_request_ms * 1e6),
            round(eff.frontend_latency_ms * 1e6),
            round(
                (eff.frontend_per_token_us + (eff.frontend_chat_per_token_us if chat else 0.0))
                * 1e3
            ),
        )
        if feed is not None:
            sess = feed.sessions
        elif plan.sessions is not None:
            sess = SessionState(plan, cfg, self.r.max_model_len, self.r.block_size)
        else:
            sess = None
        self._sess = sess
        # a session's turn is scheduled when the answer before it ended (+ think time):
        # this run's own copy of the offsets, filled in as turns come due
        fed = sess is not None or feed is not None
        offsets = self._offsets = list(plan.offsets_ns) if fed else plan.offsets_ns
        n = len(offsets)
        n_static = 0 if fed else n
        due: list[tuple[int, int]] = []
        """Requests due, (run ns, request index), soonest first: session turns, or those
        a router sent (``feed``)."""
        if feed is not None:
            due = feed.due
        elif sess is not None:
            due = [(at, sess.first[j]) for j, at in enumerate(sess.starts)]
            heapq.heapify(due)
        turn_sink = due if feed is None else feed.sink
        """Where a session's next turn goes: this run's queue, or the router's."""
        ends = feed.ends if feed is not None else None
        eng.next_id = base + n
        cap = cfg.max_concurrency
        max_len = self.r.max_model_len
        caching = self.r.enable_prefix_caching
        B = self.r.block_size
        prefix_blocks = shared_prefix_blocks(cfg, B)
        text_keys = caching and cfg.dataset_name == "trace"
        text_hashes: dict[int, tuple[int, ...]] = {}
        eligible: dict[int, int] = {}
        pending: deque[int] = deque()
        inflight = 0
        i = 0
        next_sample = 0.0
        samples: list[bytes] = []
        last_report = time.monotonic()
        if self.warm_prompts and caching:
            # the most recently used last: prompt 0 (the test request) is the freshest
            keys = [
                ("p", j, b)
                for j in reversed(range(min(self.warm_prompts, n)))
                for b in reversed(range(specs[j].input_len // B))
            ]
            eng.pool.prewarm(keys[-eng.pool.total :])

        def session_fields(idx: int) -> dict[str, Any]:
            if sess is None:
                return {}
            sid, turn, turns, dropped = sess.record_of(idx)
            return {"session": sid, "turn": turn, "session_turns": turns, "dropped_turns": dropped}

        def submit(idx: int, at_ns: int) -> None:
            """Request ``idx`` is sent at ``at_ns`` (run clock)."""
            nonlocal inflight
            spec = specs[idx]
            eligible[idx] = at_ns
            if sess is not None:
                p_len = sess.prompt(idx, spec.output_len)
                if p_len is None:
                    if ends is not None:
                        ends.append(at_ns)
                    return  # the context cap ends the session here, as a client would
                spec = spec.model_copy(update={"input_len": p_len})
            if spec.input_len + spec.output_len > max_len:
                self._record(
                    RequestRecord.model_construct(
                        id=idx,
                        worker=0,
                        status="failed",
                        http_status=400,
                        error="HTTP 400: "
                        + too_long_message(spec.input_len, spec.output_len, max_len, chat),
                        scheduled_ns=offsets[idx],
                        eligible_ns=at_ns,
                        send_ns=at_ns,
                        first_ns=None,
                        last_ns=None,
                        end_ns=at_ns,
                        chunk_ns=[],
                        chunk_tokens=None,
                        planned_input_len=spec.input_len,
                        planned_output_len=spec.output_len,
                        prompt_tokens=None,
                        output_tokens=None,
                        tokens_source=None,
                        finish_reason=None,
                        **session_fields(idx),
                    )
                )
                if ends is not None:
                    ends.append(at_ns)
                return
            hashes: tuple[Any, ...] = ()
            more = None
            if caching and sess is not None:
                hashes = sess.hashes(idx, spec.input_len)
                more = sess.more_keys(idx, spec.input_len)
            elif text_keys:
                got = text_hashes.get(id(spec))
                if got is None:  # a trace's reuse is in its text: key the blocks by it
                    got = text_hashes[id(spec)] = block_hashes(word_pieces(spec.text()), B)
                hashes = got
            elif caching and spec.group is not None and prefix_blocks:
                hashes = prefix_hashes(spec, prefix_blocks)
            elif caching and (self.prompt_ids or idx < self.warm_prompts):
                hashes = _prompt_hashes(idx, spec.input_len // B)
            req = SimRequest(
                base + idx,
                spec.input_len,
                spec.output_len,
                (t0_ns + at_ns) / NS,
                hashes,
                idx,
                more,
            )
            self._drain(t0_ns + at_ns)  # outputs of steps that ended before it come first
            if render_ns:
                api.reserve(t0_ns + at_ns, render_ns)
                render.arrive(max(t0_ns + at_ns, render.now_ns))
                rendering.append(req)
            else:
                take_in(req, t0_ns + at_ns)
            inflight += 1

        def take_in(req: SimRequest, at_ns: int) -> None:
            """The intake proper (one by one) from ``at_ns`` (engine ns), after the outputs of
            the steps that ended before it (the loop's jobs in time order)."""
            self._drain(at_ns)
            at_engine = api.accept(at_ns) - t0_ns
            if at_engine > round(eng.now * NS) - t0_ns:
                arriving.append((at_engine, req))
            else:
                eng.add(req)

        arriving: deque[tuple[int, SimRequest]] = deque()
        rendering: deque[SimRequest] = deque()
        """Chat requests whose template is being rendered, oldest first (they leave in order)."""
        while True:
            now_ns = round(eng.now * NS) - t0_ns
            while i < n_static and offsets[i] <= now_ns + 1:  # +1 ns: float round trip
                if cap is not None and inflight >= cap:
                    pending.append(i)
                else:
                    submit(i, offsets[i])
                i += 1
            while due and due[0][0] <= now_ns + 1:
                at, k = heapq.heappop(due)
                offsets[k] = at
                if cap is not None and inflight >= cap:
                    pending.append(k)
                else:
                    submit(k, at)
            if rendering:
                for d in render.depart_until(t0_ns + now_ns + 1):
                    take_in(rendering.popleft(), d)
            while arriving and arriving[0][0] <= now_ns + 1:
                eng.add(arriving.popleft()[1])
            while next_sample <= eng.now - t0:
                if self.keep_series:
                    samples.append(self._scrape(next_sample))
                next_sample += SAMPLE_INTERVAL_S
            if eng.idle():
                if arriving:
                    eng.now = max(eng.now, (t0_ns + arriving[0][0]) / NS)
                    continue
                nd = render.next_departure() if rendering else None
                if nd is not None:
                    eng.now = max(eng.now, nd / NS)
                    continue
                if pending:
                    submit(pending.popleft(), now_ns)
                    continue
                if due and (i >= n_static or due[0][0] < offsets[i]):
                    eng.now = max(eng.now, (t0_ns + due[0][0]) / NS)
                    continue
                if i >= n_static:
                    if feed is not None and not feed.closing:
                        yield False  # nothing to do until the router sends more
                        continue
                    break
                eng.now = max(eng.now, (t0_ns + offsets[i]) / NS)
                continue
            t_next = math.inf
            if i < n_static and (cap is None or inflight < cap):
                t_next = offsets[i]
            if due and (cap is None or inflight < cap):
                t_next = min(t_next, due[0][0])
            if arriving:
                t_next = min(t_next, arriving[0][0])
            nd = render.next_departure() if rendering else None
            if nd is not None:
                t_next = min(t_next, nd - t0_ns)
            if feed is not None:
                t_next = min(t_next, feed.limit_ns)
            eng.advance(min(t0 + t_next / NS, t0 + next_sample))
            if eng.finished:
                # a client slot frees when the last token reaches the client
                freed = sorted(self._finish(req, eligible, offsets) for req in eng.finished)
                if sess is not None:
                    for req, end in zip(eng.finished, self._ends, strict=True):
                        nxt = sess.answered(req.id - base, req.out, end)
                        if nxt is not None:
                            heapq.heappush(turn_sink, nxt)
                    self._ends.clear()
                inflight -= len(freed)
                eng.finished.clear()
                for t_ns in freed:
                    if not pending:
                        break
                    submit(pending.popleft(), t_ns)
            if feed is not None:
                yield True
            if self.progress and time.monotonic() - last_report > 1.0:
                last_report = time.monotonic()
                print(
                    f"  sim t={eng.now:8.1f}s done={len(self.records)}/{n} "
                    f"running={eng.num_running} waiting={eng.num_waiting} "
                    f"kv={eng.pool.usage:.0%} preempted={eng.counters.preemptions}",
                    file=sys.stderr,
                )
        # a last scrape after the last request, as a scraper stopping at the end would see
        if self.keep_series:
            samples.append(self._scrape(eng.now - t0))
        self.samples = len(samples)
        self._flush_done()
        self._flush()
        if self.samples_out is not None:
            self.samples_out.write(b"".join(samples))

    def _scrape(self, t: float) -> bytes:
        sample = server_sample(self.eng, t, self.series_histograms)
        self.series.append(as_server_sample(sample, self._hist_last))
        if self.samples_out is None:
            return b""
        # orjson.dumps(sample) + b"\n", byte for byte, with the histograms' JSON made only
        # when their snapshot changed (tests/sim/test_offline_api.py checks it)
        cache = self._hist_json
        parts = []
        for k, h in sample["histograms"].items():
            got = cache.get(k)
            if got is None or got[0] is not h:
                got = cache[k] = (h, orjson.dumps({k: h})[1:-1])
            parts.append(got[1])
        head = orjson.dumps({"t": sample["t"], "values": sample["values"]})
        return b"".join((head[:-1], b',"histograms":{', b",".join(parts), b"}}\n"))

    def _drain(self, upto_ns: int | None = None) -> None:
        """The API server's work on the outputs of the steps the engine ran since the last
        call (those that ended by ``upto_ns``): when each step's tokens reach the clients."""
        eng = self.eng
        i0 = self._step0 + len(self._deliv)
        all_ends = eng.step_end_ns
        i1 = len(all_ends)
        if i1 <= i0:
            return
        if upto_ns is not None:
            if all_ends[i0] > upto_ns:
                return
            if all_ends[i1 - 1] > upto_ns:
                i1 = bisect_right(all_ends, upto_ns, i0, i1)
        shift = self._shift
        if i1 - i0 <= 16:  # a few steps: cheaper than numpy's per-call overhead
            got = self.api.outputs_few(all_ends[i0:i1].tolist(), eng.step_tokens[i0:i1].tolist())
            if shift:
                got = [t - shift for t in got]
            self._deliv.extend(got)
            self._deliv_a.extend(got)
            return
        ends = np.frombuffer(all_ends, dtype=np.int64)[i0:i1]
        tokens = np.frombuffer(eng.step_tokens, dtype=np.int64)[i0:i1]
        out = self.api.outputs(ends, tokens) - shift
        self._deliv.extend(out.tolist())
        self._deliv_a.frombytes(out.tobytes())

    def _times(self, req: SimRequest) -> list[int]:
        """When ``req``'s tokens reached its client (ns, run clock): a new list."""
        d, s0 = self._deliv, self._step0
        segs = req.segments
        if len(segs) == 1:
            a, b = segs[0]
            return d[a - s0 : b - s0]
        out: list[int] = []
        for a, b in segs:
            out += d[a - s0 : b - s0]
        return out

    def _finish(self, req: SimRequest, eligible: dict[int, int], offsets: list[int]) -> int:
        """A request finished: returns when its last token reaches the client (which frees a
        client slot); its record is made with the next batch (:meth:`_flush_done`)."""
        idx = req.id - self.id_base
        last = req.segments[-1][1] - 1 - self._step0 if req.segments else -1
        if last >= len(self._deliv):
            self._drain()  # the outputs of its steps (and all before them) are worked now
        end = self._deliv[last] if last >= 0 else int((req.finish_t or 0.0) * NS) - self._shift
        self._done.append((req, idx, eligible[idx], end))
        if self._sess is not None:
            self._ends.append(end)
        if self.feed is not None:
            self.feed.ends.append(end)
        if len(self._done) >= 256:
            self._flush_done()
        return end

    def itl_ms(self, ok: Sequence[RequestRecord]) -> np.ndarray | None:
        """The pooled ITL of ``ok`` (records of this run) as ``summarize`` computes it from
        their ``chunk_ns``, read from the int64 delivery times instead of 100k+ Python ints
        (:data:`~servetune.metrics.summary.ItlSource`); ``None`` (let it read them) for a
        record this run did not make as it holds it."""
        if not self.token_times:
            return None
        segs_of, s0, n_deliv = self._segs, self._step0, len(self._deliv_a)
        starts: list[int] = []
        counts: list[int] = []
        lens: list[int] = []
        for r in ok:
            got = segs_of.get(r.id)
            if got is None or got[0] is not r:
                return None
            segs = got[1]
            if len(segs) == 1:  # most records: one segment, no sum over them
                a, b = segs[0]
                k = b - a
                if k > 1:
                    if a < s0 or b - s0 > n_deliv:
                        return None
                    starts.append(a - s0)
                    counts.append(k)
                    lens.append(k)
                continue
            k = 0
            for a, b in segs:
                k += b - a
            if k <= 1:
                continue
            for a, b in segs:
                if a < s0 or b < a or b - s0 > n_deliv:
                    return None
                starts.append(a - s0)
                counts.append(b - a)
            lens.append(k)
        if not lens:
            return np.zeros(0)
        st = np.array(starts, dtype=np.int64)
        cn = np.array(counts, dtype=np.int64)
        at = np.arange(int(cn.sum()), dtype=np.int64) + np.repeat(st - (np.cumsum(cn) - cn), cn)
        dv = np.frombuffer(self._deliv_a, dtype=np.int64)
        flat = dv[at]
        del dv
        return pooled_itl_ms(flat, np.array(lens, dtype=np.int64))

    def _flush_done(self) -> None:
        """Records of the finished requests (256 at a time: the lines are written in one)."""
        done = self._done
        if not done:
            return
        self._done = []
        offsets = self._offsets
        specs = self.plan.requests
        sess = self._sess
        token_times = self.token_times
        records = self.records
        lines = self._buf if self.requests_out is not None else None
        dv = np.frombuffer(self._deliv_a, dtype=np.int64) if lines is not None else None
        s0 = self._step0
        for req, idx, at, end in done:
            times = self._times(req)
            spec = specs[idx]
            first, last = (times[0], times[-1]) if times else (None, None)
            chunks = times if token_times else []
            rec = ok_record(
                idx,
                offsets[idx],
                at,
                first,
                last,
                end,
                chunks,
                req.prompt_len if sess is not None else spec.input_len,
                spec.output_len,
                req.prompt_len,
                req.out,
                req.finish_reason,
                req.cached if self.r.enable_prefix_caching else None,
                sess.record_of(idx) if sess is not None else None,
            )
            records.append(rec)
            if token_times:
                self._segs[idx] = (rec, req.segments)
            if lines is not None and dv is not None:
                # the same line as record_line(rec): the token times go to orjson as an int64
                # array, which it writes ~2.6x faster than a list of ints
                line = dict(rec.__dict__)
                if token_times:
                    segs = req.segments
                    if len(segs) == 1:
                        line["chunk_ns"] = dv[segs[0][0] - s0 : segs[0][1] - s0]
                    elif segs:
                        line["chunk_ns"] = np.concatenate([dv[a - s0 : b - s0] for a, b in segs])
                lines.append(orjson.dumps(line, option=_LINE_OPTS))
        del dv
        if lines is not None and len(lines) >= 256:
            self._flush()


_LINE_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE
