"""The engine core: a vLLM V1-style scheduler on a clock, one step at a time.

Each step has a token budget of ``max_num_batched_tokens`` and at most ``max_num_seqs``
requests running. Running requests are served first, in the order they were admitted (in
practice: every decoding request gets its one token, then the prefill still in progress gets
the rest of the budget); then waiting requests are admitted first-come first-served while the
budget, the request cap and the KV blocks allow — a prompt is cut into chunks when chunked
prefill is on, and waits for a step with room for all of it when it is off. When a running
request needs a block and none is free, the newest running request is preempted: its blocks
are freed (kept as cached with prefix caching), it goes back to the front of the queue and
is recomputed later (``vllm:num_preemptions_total``). No waiting request is admitted in a
step that preempted.

Decoding requests are kept in aggregate, so a step costs O(1) in them, not O(batch): a request
that decodes from step ``s0`` with ``L0`` computed tokens has ``L0 + (s − s0)`` at step ``s``,
needs a new block exactly when ``s ≡ s0 − L0 (mod block_size)``, and finishes at a step known
in advance. Stretches where nothing but decoding happens are advanced in a tight loop that
touches no request (:meth:`Engine.advance`); a request's token times are slices of the
engine's list of step end times, cut when it finishes.

With speculative decoding (:mod:`servetune.sim.speculative`) a decoding request takes
``k + 1`` tokens of the step's budget and gains the step's shared draw of tokens: the same
aggregate holds with ``G[s]`` (the tokens gained before step ``s``) in place of ``s``: a
request has ``L0 + G[s] − G[s0]`` computed tokens at step ``s``, needs a new block when that
count crosses a multiple of the block size within the step's gain, and finishes at the step
its gains reach ``max_tokens`` (its last step's gain cut there, as vLLM stops at max_tokens).
Without it none of this runs: the dense path is the one above.

Times are seconds on the engine's clock (virtual for ``offline``, wall-clock for ``server``).
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from servetune.arch.memory import MemoryPlan
from servetune.sim.hist import REQUEST_LATENCY_BUCKETS, TPOT_BUCKETS, TTFT_BUCKETS, Hist
from servetune.sim.kv import BlockPool
from servetune.sim.perf import DecodeCoeffs, StepModel
from servetune.sim.resolved import ResolvedConfig
from servetune.sim.speculative import GainStream

WAITING, PREFILL, DECODE, DONE = 0, 1, 2, 3
_STRETCH_MAX = 100_000


class SimRequest:
    """One request inside the engine."""

    __slots__ = (
        "L0",
        "arrival",
        "cached",
        "computed",
        "finish_reason",
        "finish_t",
        "first_sched",
        "first_token",
        "hashes",
        "held",
        "held_n",
        "id",
        "max_tokens",
        "more_keys",
        "nblocks",
        "o0",
        "out",
        "preemptions",
        "prompt_len",
        "s0",
        "seg_start",
        "segments",
        "state",
        "tag",
        "ver",
    )

    def __init__(
        self,
        rid: int,
        prompt_len: int,
        max_tokens: int,
        arrival: float,
        hashes: Sequence[Hashable] = (),
        tag: object = None,
        more_keys: Callable[[int], Sequence[Hashable]] | None = None,
    ) -> None:
        self.id = rid
        self.prompt_len = prompt_len
        self.max_tokens = max_tokens
        self.arrival = arrival
        self.hashes = hashes
        """Content hashes of the prompt's full blocks (prefix caching)."""
        self.more_keys = more_keys
        """The keys of the next N full blocks after the prompt's (``more_keys(N)``: the
        answer's, in a conversation whose next prompt holds it): when it finishes, these
        blocks stay cached under them, as vLLM caches every full block it computed. None:
        they are this request's own."""
        self.cached = 0
        """Prompt tokens served from the prefix cache when first scheduled (vLLM's
        ``num_cached_tokens``, ``usage.prompt_tokens_details.cached_tokens``)."""
        self.tag = tag
        self.state = WAITING
        self.computed = 0
        self.out = 0
        self.nblocks = 0
        self.held: list[Hashable] = []
        self.held_n = 0
        """Shared blocks held when last preempted (its own cached chain follows them)."""
        self.s0 = 0
        self.L0 = 0
        self.o0 = 0
        self.ver = 0
        self.seg_start = -1
        self.segments: list[tuple[int, int]] = []
        """Ranges [a, b) of step indices at whose ends this request received a token."""
        self.first_sched: float | None = None
        self.first_token: float | None = None
        self.finish_t: float | None = None
        self.finish_reason: str | None = None
        self.preemptions = 0


@dataclass
class Counters:
    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    steps: int = 0
    finished: dict[str, int] = field(default_factory=lambda: {"length": 0, "stop": 0, "abort": 0})


class Engine:
    def __init__(self, cfg: ResolvedConfig, mem: MemoryPlan, model: StepModel | None = None):
        self.cfg = cfg
        self.mem = mem
        self.model = model or StepModel(cfg)
        self.B = cfg.block_size
        # data-parallel replicas schedule their own batches: one scheduler with their sum
        # (the requests spread evenly, :mod:`servetune.sim.perf`)
        dp = cfg.data_parallel_size
        self.max_seqs = cfg.max_num_seqs * dp
        self.budget = cfg.max_num_batched_tokens * dp
        self.chunked = cfg.enable_chunked_prefill
        self.long_cap = cfg.long_prefill_token_threshold if cfg.enable_chunked_prefill else 0
        self.pool = BlockPool(mem.engine_blocks or mem.num_gpu_blocks, cfg.enable_prefix_caching)
        self.now = 0.0
        self.step = 0
        self.last_step_end: float | None = None
        """When the last step ended (None before the first)."""
        self.step_end_ns = array("q")
        """End of every step (ns, engine clock): a request's token times are slices of it."""
        self.step_tokens = array("q")
        """Tokens every step sampled (what the API server then has to send)."""
        self.waiting: deque[SimRequest] = deque()
        self.running: dict[int, SimRequest] = {}
        self.prefilling: dict[int, SimRequest] = {}
        # decoding requests, in aggregate
        self.n_dec = 0
        self.sum_base = 0  # Σ (L0 − s0): Σ computed tokens at step s = sum_base + n_dec·s
        self.phase = [0] * self.B  # decoders needing a new block at steps ≡ r (mod B)
        self._heap: list[tuple[int, int, int]] = []  # (finish step, ver, id)
        self._coeffs: dict[int, DecodeCoeffs] = {}
        spec = cfg.speculation
        self.verify = 1 if spec is None else spec.k + 1
        """Tokens of the step's budget a decoding request takes (k + 1 with speculation)."""
        self.gains: GainStream | None = None if spec is None else GainStream(spec, cfg.seed)
        self.sphase = [0] * self.B
        """Speculative decoders by (computed − G[s0]) mod block size."""
        self.finished: list[SimRequest] = []
        """Requests finished since the caller last drained this list."""
        self.counters = Counters()
        self.next_id = 0
        """The first request id a caller may use (ids key cached blocks: keep them unique)."""
        self.h_ttft = Hist(TTFT_BUCKETS)
        self.h_tpot = Hist(TPOT_BUCKETS)
        self.h_itl = Hist(TPOT_BUCKETS)
        self.h_e2e = Hist(REQUEST_LATENCY_BUCKETS)
        self.h_queue = Hist(REQUEST_LATENCY_BUCKETS)
        # vLLM V1's phase histograms, observed when a request finishes: prefill = first
        # scheduled → first token, decode = first token → last token (preemptions included)
        self.h_prefill = Hist(REQUEST_LATENCY_BUCKETS)
        self.h_decode = Hist(REQUEST_LATENCY_BUCKETS)
        self.busy_s = 0.0

    # --- state --------------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def idle(self) -> bool:
        return not self.running and not self.waiting

    def add(self, req: SimRequest) -> None:
        """Queue a request (the caller checked prompt + max_tokens ≤ max_model_len)."""
        self.waiting.append(req)

    def abort(self, req: SimRequest) -> None:
        """The client went away: drop the request wherever it is (finish reason "abort")."""
        if req.state == DONE:
            return
        if req.state == WAITING:
            try:
                self.waiting.remove(req)
            except ValueError:
                pass
            self.pool.drop_cached(("r", req.id))
        else:
            self._evict(req, self.step)
        req.state = DONE
        req.finish_t = self.now
        req.finish_reason = "abort"
        self.counters.finished["abort"] += 1

    def _coeff(self, n: int) -> DecodeCoeffs:
        c = self._coeffs.get(n)
        if c is None:
            c = self._coeffs[n] = self.model.decode_coeffs(n)
        return c

    # --- decoders in aggregate ----------------------------------------------------------
    def _start_decoding(self, req: SimRequest, s: int) -> None:
        """``req`` sampled a token at step s − 1; it decodes one token a step from s."""
        req.state = DECODE
        req.s0 = s
        req.L0 = req.computed
        req.o0 = req.out
        req.ver += 1
        self.n_dec += 1
        gains = self.gains
        if gains is not None:
            gains.ensure(s)
            c0 = req.L0 - gains.G[s]
            self.sum_base += c0
            self.sphase[c0 % self.B] += 1
            end = gains.finish_step(s, req.max_tokens - req.out)
            heapq.heappush(self._heap, (end, req.ver, req.id))
            return
        self.sum_base += req.L0 - s
        self.phase[(s - req.L0) % self.B] += 1
        heapq.heappush(self._heap, (s + req.max_tokens - req.out - 1, req.ver, req.id))

    def _stop_decoding(self, req: SimRequest, s: int) -> None:
        """Fold the aggregate back into ``req`` before step ``s`` runs (it did s − s0 steps)."""
        gains = self.gains
        if gains is not None:
            G = gains.G
            gained = G[s] - G[req.s0]
            kept = min(gained, req.max_tokens - req.o0)  # the last step's gain stops there
            req.computed = req.L0 + kept
            req.out = req.o0 + kept
            # blocks were taken for every token gained, the cut ones included
            req.nblocks = -(-(req.L0 + gained) // self.B)
            if gained > kept:  # counted as made by its last step (s − 1): they were not
                self.counters.generation_tokens -= gained - kept
                self.step_tokens[s - 1] -= gained - kept
            self.n_dec -= 1
            c0 = req.L0 - G[req.s0]
            self.sum_base -= c0
            self.sphase[c0 % self.B] -= 1
            req.ver += 1
            return
        k = s - req.s0
        req.computed = req.L0 + k
        req.out = req.o0 + k
        req.nblocks = -(-req.computed // self.B)
        self.n_dec -= 1
        self.sum_base -= req.L0 - req.s0
        self.phase[(req.s0 - req.L0) % self.B] -= 1
        req.ver += 1

    def _free_blocks(self, req: SimRequest, keep: bool, keys: Sequence[Hashable] = ()) -> None:
        # vLLM frees a request's blocks tail first, so eviction eats a preempted request's
        # chain from its end: its own (later) blocks go before its shared prompt prefix,
        # without which they could not be reused anyway.
        private = req.nblocks - len(req.held)
        self.pool.release(private, ("r", req.id) if keep else None, keys)
        if req.held:
            self.pool.release_shared(req.held)
            req.held = []
        req.nblocks = 0

    def _evict(self, req: SimRequest, s: int) -> None:
        """Take ``req`` out of the running set before step ``s``; free its blocks."""
        if req.state == DECODE:
            self._stop_decoding(req, s)
        self.prefilling.pop(req.id, None)
        self.running.pop(req.id, None)
        if req.seg_start >= 0:
            req.segments.append((req.seg_start, s))
            req.seg_start = -1
        self._free_blocks(req, keep=False)

    def _preempt(self, victim: SimRequest, s: int) -> int:
        """Preempt for recompute; returns the victim's block need at step s (to deduct)."""
        need = 0
        if victim.state == DECODE:
            if self.gains is not None:
                G = self.gains.G
                c = victim.L0 - G[victim.s0] + G[s]
                g = G[s + 1] - G[s]
                need = g // self.B + (1 if (-c) % self.B < g % self.B else 0)
            else:
                need = 1 if (victim.s0 - victim.L0) % self.B == s % self.B else 0
            self._stop_decoding(victim, s)
        self.prefilling.pop(victim.id, None)
        del self.running[victim.id]
        if victim.seg_start >= 0:
            victim.segments.append((victim.seg_start, s))
            victim.seg_start = -1
        victim.held_n = len(victim.held)
        self._free_blocks(victim, keep=True)
        victim.computed = 0
        victim.state = WAITING
        victim.preemptions += 1
        self.waiting.appendleft(victim)
        self.counters.preemptions += 1
        return need

    def _finish(self, req: SimRequest, reason: str = "length") -> None:
        self.running.pop(req.id, None)
        self.prefilling.pop(req.id, None)
        req.nblocks = -(-req.computed // self.B)
        # vLLM keeps a finished request's full blocks cached (evictable) too: they hold their
        # place in the eviction order, ahead of its prompt prefix; under their content keys
        # when the caller knows them (a conversation's next turn starts with them)
        self._free_blocks(req, keep=True, keys=self._private_keys(req))
        req.state = DONE
        req.finish_t = self.now
        req.finish_reason = reason
        self.counters.finished[reason] = self.counters.finished.get(reason, 0) + 1
        self.h_e2e.observe(self.now - req.arrival)
        if req.out > 1 and req.first_token is not None:
            self.h_tpot.observe((self.now - req.first_token) / (req.out - 1))
        if req.first_token is not None and req.first_sched is not None:
            self.h_prefill.observe(req.first_token - req.first_sched)
            self.h_decode.observe(self.now - req.first_token)
        self.finished.append(req)

    def _private_keys(self, req: SimRequest) -> Sequence[Hashable]:
        """Content keys of ``req``'s private full blocks (after the shared ones it holds), when
        it was given ``more_keys``; () otherwise."""
        if req.more_keys is None or not self.pool.caching:
            return ()
        full = req.computed // self.B
        nh = len(req.hashes)
        keys = list(req.hashes[:full])
        if full > nh:
            keys.extend(req.more_keys(full - nh))
        return keys[len(req.held) : full]

    # --- the step -----------------------------------------------------------------------
    def _head_admissible(self, budget: int) -> bool:
        """Could the first waiting request start now (with ``budget`` tokens left)?"""
        if not self.waiting or len(self.running) >= self.max_seqs or budget <= 0:
            return False
        req = self.waiting[0]
        target = req.prompt_len + req.out
        hit = min(self.pool.match(req.hashes) * self.B, target - 1)
        new = target - hit
        if not self.chunked and new > budget:
            return False
        c = min(new, budget)
        return -(-(hit + c) // self.B) - hit // self.B <= self.pool.free

    def can_stretch(self) -> bool:
        """Is the next step pure decoding with nothing to admit?"""
        return (
            self.n_dec > 0
            and not self.prefilling
            and not self._head_admissible(self.budget - self.n_dec * self.verify)
        )

    def advance(self, t_limit: float = float("inf"), collect: bool = False) -> list[SimRequest]:
        """Run one general step, or a stretch of decode-only steps that ends before
        ``t_limit`` (the next arrival or sample). Returns the requests that received a token
        in a general step when ``collect`` (the real-time server streams them)."""
        if not collect and self.can_stretch():
            ran = self._stretch(t_limit) if self.gains is None else self._stretch_spec(t_limit)
            if ran > 0:
                return []
        return self._general_step(collect)

    def _stretch(self, t_limit: float) -> int:
        s = self.step
        n = self.n_dec
        heap = self._heap
        while heap:
            top = self.running.get(heap[0][2])
            if top is not None and top.ver == heap[0][1]:
                break
            heapq.heappop(heap)
        if not heap:
            return 0
        k_max = min(self._heap[0][0] - s + 1, _STRETCH_MAX)
        co = self._coeff(n)
        f0, f1, m0, m1, c, floor = co.f0, co.f1, co.m0, co.m1, co.c, co.floor
        ssum = self.sum_base + n * s
        free = self.pool.free
        phase = self.phase
        B = self.B
        now = self.now
        ends_ns = self.step_end_ns
        itl = self.h_itl
        # itl.observe(now - prev, n) a step, inlined (the same additions in the same order)
        itl_counts, itl_bounds, itl_sum = itl.counts, itl.bounds, itl.sum
        prev = self.last_step_end if self.last_step_end is not None else now
        need_total = 0
        j = 0
        while j < k_max and now < t_limit:
            need = phase[(s + j) % B]
            if need_total + need > free:
                break
            need_total += need
            a = f0 + f1 * ssum
            b = m0 + m1 * ssum
            if b > a:
                a = b
            now += (a if a > floor else floor) + c
            ends_ns.append(int(now * 1e9))
            gap = now - prev
            itl_counts[bisect_left(itl_bounds, gap)] += n
            itl_sum += gap * n
            prev = now
            ssum += n
            j += 1
        if j == 0:
            return 0
        itl.sum = itl_sum
        itl.count += n * j
        self.step_tokens.extend(array("q", (n,)) * j)
        self.last_step_end = now
        self.busy_s += now - self.now
        self.pool.allocate(need_total)
        self.counters.generation_tokens += n * j
        self.counters.steps += j
        self.step = s + j
        self.now = now
        self._finish_decoders(s + j - 1)
        return j

    def _spec_need(self, s: int) -> int:
        """Blocks the speculative decoders need at step ``s``: those whose computed count
        ``c = c0 + G[s]`` crosses a multiple of the block size within the step's gain ``g``
        (a multiple in [c, c + g)), i.e. ``c0 mod B`` among ``g`` residues."""
        assert self.gains is not None
        G = self.gains.G
        B = self.B
        u = (-G[s]) % B
        g = G[s + 1] - G[s]
        sphase = self.sphase
        if g >= B:
            return self.n_dec * (g // B) + sum(sphase[(u - i) % B] for i in range(g % B))
        return sum(sphase[(u - i) % B] for i in range(g))

    def _stretch_spec(self, t_limit: float) -> int:
        """:meth:`_stretch` with speculative decoding: every step verifies ``k + 1`` tokens
        per request (the coefficients say what it costs) and gives each the step's gain."""
        gains = self.gains
        assert gains is not None
        s = self.step
        n = self.n_dec
        heap = self._heap
        while heap:
            top = self.running.get(heap[0][2])
            if top is not None and top.ver == heap[0][1]:
                break
            heapq.heappop(heap)
        if not heap:
            return 0
        k_max = min(self._heap[0][0] - s + 1, _STRETCH_MAX)
        gains.ensure(s + k_max + 1)
        G = gains.G
        co = self._coeff(n)
        free = self.pool.free
        now = self.now
        ends_ns = self.step_end_ns
        itl = self.h_itl
        prev = self.last_step_end if self.last_step_end is not None else now
        need_total = 0
        made = 0
        j = 0
        while j < k_max and now < t_limit:
            need = self._spec_need(s + j)
            if need_total + need > free:
                break
            need_total += need
            now += co.time(self.sum_base + n * G[s + j])
            ends_ns.append(int(now * 1e9))
            itl.observe(now - prev, n)
            prev = now
            g = n * (G[s + j + 1] - G[s + j])
            self.step_tokens.append(g)
            made += g
            j += 1
        if j == 0:
            return 0
        self.last_step_end = now
        self.busy_s += now - self.now
        self.pool.allocate(need_total)
        self.counters.generation_tokens += made
        self.counters.steps += j
        self.step = s + j
        self.now = now
        self._finish_decoders(s + j - 1)
        return j

    def _finish_decoders(self, s: int) -> None:
        """Decoders whose last token was sampled at step ``s`` leave."""
        heap = self._heap
        running = self.running
        while heap and heap[0][0] <= s:
            _f, ver, rid = heapq.heappop(heap)
            req = running.get(rid)
            if req is None or req.ver != ver:
                continue
            self._stop_decoding(req, s + 1)
            req.segments.append((req.seg_start, s + 1))
            req.seg_start = -1
            self._finish(req)

    def _apply_prefills(
        self,
        chunks: list[tuple[SimRequest, int, int]],
        done: list[SimRequest],
        s: int,
        emitted: list[SimRequest] | None,
    ) -> bool:
        """After step ``s``: the chunks advance, the prefills that completed sample their
        token (TTFT, prompt blocks published to the prefix cache) and finish or start
        decoding at ``s + 1``; those that sampled are added to ``emitted`` (when given).
        True when a request finished."""
        pool = self.pool
        finished = False
        for req, c, _o in chunks:
            req.computed += c
        for req in done:
            del self.prefilling[req.id]
            req.out += 1
            req.seg_start = s
            if req.first_token is None:
                req.first_token = self.now
                self.h_ttft.observe(self.now - req.arrival)
                self.counters.prompt_tokens += req.prompt_len
            if req.hashes and pool.caching and len(req.held) < len(req.hashes):
                req.held.extend(pool.publish(req.hashes[len(req.held) :]))
            if emitted is not None:
                emitted.append(req)
            if req.out >= req.max_tokens:
                req.segments.append((s, s + 1))
                req.seg_start = -1
                self._finish(req)
                finished = True
            else:
                self._start_decoding(req, s + 1)
        return finished

    def _general_step(self, collect: bool) -> list[SimRequest]:
        s = self.step
        B = self.B
        pool = self.pool
        preempted = False
        # 1. every decoding request gets one token (with speculation: the step's gain); find
        # its blocks or preempt the newest
        gains = self.gains
        if gains is not None:
            gains.ensure(s + 1)
            need = self._spec_need(s)
        else:
            need = self.phase[s % B]
        while need > pool.free and self.running:
            victim = next(reversed(self.running.values()))
            need -= self._preempt(victim, s)
            preempted = True
        pool.allocate(need)
        budget = self.budget - self.n_dec * self.verify
        chunks: list[tuple[SimRequest, int, int]] = []
        # 2. prefills in progress, oldest first
        for req in list(self.prefilling.values()):
            if budget <= 0:
                break
            if req.id not in self.running:
                continue  # preempted by an earlier request of this loop
            c = min(req.prompt_len + req.out - req.computed, budget)
            if 0 < self.long_cap < c:
                c = self.long_cap
            nb = -(-(req.computed + c) // B) - req.nblocks
            while nb > pool.free:
                victim = next(reversed(self.running.values()))
                self._preempt(victim, s)
                preempted = True
                if victim is req:
                    break
            if req.state != PREFILL:
                continue
            pool.allocate(nb)
            req.nblocks += nb
            chunks.append((req, c, req.computed))
            budget -= c
        # 3. waiting requests, first come first served, unless this step preempted
        if not preempted:
            while self.waiting and len(self.running) < self.max_seqs and budget > 0:
                req = self.waiting[0]
                target = req.prompt_len + req.out
                shared = pool.match(req.hashes)
                hit_blocks = shared
                own = 0
                if req.preemptions and pool.caching:
                    own = pool.cached(("r", req.id))
                    if shared >= req.held_n:
                        hit_blocks = req.held_n + own
                        shared = req.held_n
                hit = min(hit_blocks * B, ((target - 1) // B) * B)
                new = target - hit
                if not self.chunked and new > budget:
                    break
                c = min(new, budget)
                if 0 < self.long_cap < c:
                    c = self.long_cap
                nb = -(-(hit + c) // B) - hit // B
                use_shared = min(shared, hit // B)
                revive = pool.evictable(req.hashes[:use_shared])
                own_used = min(own, hit // B - use_shared)
                if nb + revive + own_used > pool.free:
                    break
                self.waiting.popleft()
                req.held = list(req.hashes[:use_shared])
                pool.acquire_shared(req.held)
                taken = pool.take_cached(("r", req.id), own_used) if own_used else 0
                if own and not own_used:
                    pool.drop_cached(("r", req.id))
                pool.allocate(nb)
                req.nblocks = use_shared + taken + nb
                req.computed = hit
                pool.queries += target
                pool.hits += hit
                req.state = PREFILL
                self.running[req.id] = req
                self.prefilling[req.id] = req
                if req.first_sched is None:
                    req.first_sched = self.now
                    req.cached = hit
                    self.h_queue.observe(self.now - req.arrival)
                chunks.append((req, c, hit))
                budget -= c
        n_dec = self.n_dec
        if not chunks and n_dec == 0:
            return []
        # 4. how long the step takes
        verify = self.verify
        ntok = n_dec * verify
        attn = 0.0
        kv_read = 0.0
        w_attn = 0.0
        w_read = 0.0
        model = self.model
        windowed = model.window is not None
        done: list[SimRequest] = []
        for req, c, o in chunks:
            ntok += c
            attn += c * (o + c / 2)
            kv_read += o
            if windowed:
                wa, wr = model.window_terms(c, o)
                w_attn += wa
                w_read += wr
            if o + c == req.prompt_len + req.out:
                done.append(req)
        if gains is None:
            ctx = self.sum_base + n_dec * s
            made = n_dec
        else:
            G = gains.G
            ctx = self.sum_base + n_dec * G[s]
            made = n_dec * (G[s + 1] - G[s])
        dt = model.step_time(
            ntok,
            n_dec + len(chunks),
            n_dec * verify + len(done),
            ctx,
            attn,
            kv_read,
            w_attn,
            w_read,
            n_dec,
        )
        emitted: list[SimRequest] = []
        if collect:
            emitted = [r for r in self.running.values() if r.state == DECODE]
        prev = self.last_step_end if self.last_step_end is not None else self.now
        self.now += dt
        self.busy_s += dt
        self.last_step_end = self.now
        self.step_end_ns.append(int(self.now * 1e9))
        self.step_tokens.append(made + len(done))
        if n_dec:
            self.h_itl.observe(self.now - prev, n_dec)
        self.step = s + 1
        self.counters.steps += 1
        self.counters.generation_tokens += made + len(done)
        # 5. apply: chunks advance, completed prefills sample a token
        self._apply_prefills(chunks, done, s, emitted if collect else None)
        self._finish_decoders(s)
        return emitted

    # --- read-outs ----------------------------------------------------------------------
    def token_times_ns(self, req: SimRequest) -> array[int]:
        """When ``req`` received its tokens (the ends of its steps, ns on the engine clock)."""
        ends = self.step_end_ns
        segs = req.segments
        if len(segs) == 1:
            a, b = segs[0]
            return ends[a:b]
        out = array("q")
        for a, b in segs:
            out.extend(ends[a:b])
        return out

    def kv_usage(self) -> float:
        return self.pool.usage
