"""SGLang's scheduler as a policy of the simulated engine (its ``Scheduler`` event loop and
``PrefillAdder``, ``python/sglang/srt/managers/scheduler.py`` and ``schedule_policy.py``).

A step is a prefill (extend) batch or a decode batch, never both: whenever a new prefill
batch can be formed it runs first, and the running requests wait for it (SGLang without
``--enable-mixed-chunk``). A prefill batch is formed as ``PrefillAdder`` forms it:

* the request being chunked goes first, one chunk of at most ``--chunked-prefill-size``
  tokens (its future tokens are reserved with its last chunk);
* then waiting requests, first come first served, while the running requests are fewer than
  ``--max-running-requests`` and the pool can hold the request's prompt (the part its radix
  cache match does not cover) plus ``min(max_new_tokens − output, 4096)`` future tokens on top
  of what
  is reserved already: every running request's remaining output ``× new_token_ratio`` and
  every request admitted to this batch in full. A request that does not fit stops the
  admission ("no token": nothing more is tried until a running request leaves); the batch's
  prompt tokens are capped at ``--max-prefill-tokens`` (the first request always goes), and a
  prompt longer than what is left of the chunk is cut to it and becomes the chunked request;
* ``new_token_ratio`` starts at ``min(0.7 × schedule_conservativeness, 1)`` and falls by
  ``(init − min) / 600`` every decode step to ``min = init × 0.14``; it is reset to its start
  when the engine goes idle.

A decode batch gives every running request one token. When the pool cannot hold the next
token of each (``check_decode_mem``), requests are retracted (SGLang's preemption) — the one
with the fewest output tokens first, the longest prompt among equals — until the pool holds
``20`` more tokens for each request left; their KV is dropped (not cached) and they queue
again at the end, to be prefilled over prompt and output so far; the ratio becomes
``min(1, (Σ output + 20 × n) / Σ max_new_tokens)`` over the requests left, so admission turns
cautious after a retraction. The radix cache matches a prompt's prefix at page granularity
(``--page-size``, default 1: token by token), a finished request's tokens stay cached until
evicted, and ``--disable-radix-cache`` turns it off. Overlap scheduling (on unless
``--disable-overlap-schedule``) overlaps the CPU's work with the GPU's, as vLLM's async
scheduling does (the step model's ``overlap``); decode batches up to ``--cuda-graph-max-bs``
run as captured graphs, padded to SGLang's capture sizes. Data-parallel attention
(``--enable-dp-attention --dp N``): the N attention replicas' batches are one scheduler's,
their pools and caps summed, as the vLLM model does with data-parallel replicas.

A request the pool cannot reserve for even with nothing running is admitted when its prompt
fits (the simulator's guard against waiting forever; its decode then retracts as needed).

Not modelled: ``--enable-mixed-chunk``, the schedule policies other than ``fcfs``
(``lpm`` sorts by prefix match), ``ignore_eos``'s exact future-token estimate, the hybrid
SWA pool's own admission check (the windowed pool holds every running request's window and is
assumed not to bind), and the one-step lag of overlap scheduling's result processing.
"""

from __future__ import annotations

from servetune.arch.memory import MemoryPlan
from servetune.sim.engine import DECODE, PREFILL, WAITING, Engine, SimRequest
from servetune.sim.perf import StepModel
from servetune.sim.resolved import ResolvedConfig

INIT_NEW_TOKEN_RATIO = 0.7
"""``SGLANG_INIT_NEW_TOKEN_RATIO``: the new-token ratio at start, × schedule_conservativeness."""
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
"""``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR``: the floor, as a share of the start."""
NEW_TOKEN_RATIO_DECAY_STEPS = 600
"""``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS``: decode steps from the start to the floor."""
CLIP_MAX_NEW_TOKENS = 4096
"""``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``: future tokens reserved per request at most."""
RETRACT_DECODE_STEPS = 20
"""``retract_decode_steps``: tokens per remaining request a retraction frees room for."""


def new_token_ratios(conservativeness: float) -> tuple[float, float, float]:
    """(init, min, decay per decode step) of SGLang's new-token ratio."""
    init = min(INIT_NEW_TOKEN_RATIO * conservativeness, 1.0)
    low = min(init * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
    return init, low, (init - low) / NEW_TOKEN_RATIO_DECAY_STEPS


def reserved_tokens(remaining: list[int], ratio: float) -> float:
    """What the running requests reserve in the pool: Σ min(remaining, clip) × ratio."""
    return sum(min(r, CLIP_MAX_NEW_TOKENS) for r in remaining) * ratio


def retract_ratio(outputs: list[int], max_tokens: list[int]) -> float:
    """The new-token ratio after a retraction, over the requests left."""
    total = sum(max_tokens)
    if total <= 0:
        return 1.0
    return min(1.0, (sum(outputs) + RETRACT_DECODE_STEPS * len(outputs)) / total)


class SglangEngine(Engine):
    """The engine core under SGLang's scheduling (see the module docstring); the vLLM
    engine's aggregate decoders, pool, finishing and read-outs are shared."""

    def __init__(
        self, cfg: ResolvedConfig, mem: MemoryPlan, model: StepModel | None = None
    ) -> None:
        super().__init__(cfg, mem, model)
        dp = cfg.parallelism.attn_dp
        self.chunk = cfg.chunked_prefill_size * dp if cfg.chunked_prefill_size > 0 else None
        """The prefill batch's chunk budget over every attention replica (None: no chunking)."""
        self.init_ratio, self.min_ratio, self.decay = new_token_ratios(
            cfg.schedule_conservativeness
        )
        self.ratio = self.init_ratio
        self.batch_is_full = False
        """No admission is tried until a running request leaves (SGLang's flag)."""
        self.chunk_req: SimRequest | None = None
        self.rem_base = 0
        """Σ (max_tokens − o0 + s0) over the decoders: Σ remaining at step s = rem_base − n·s."""
        self.n_long = 0
        """Decoders whose remaining output exceeded the clip when they started decoding."""
        self.retractions = 0

    # --- the decoders' reserved tokens, in aggregate ------------------------------------------
    def _start_decoding(self, req: SimRequest, s: int) -> None:
        super()._start_decoding(req, s)
        self.rem_base += req.max_tokens - req.out + s
        if req.max_tokens - req.out > CLIP_MAX_NEW_TOKENS:
            self.n_long += 1

    def _stop_decoding(self, req: SimRequest, s: int) -> None:
        self.rem_base -= req.max_tokens - req.o0 + req.s0
        if req.max_tokens - req.o0 > CLIP_MAX_NEW_TOKENS:
            self.n_long -= 1
        super()._stop_decoding(req, s)

    def _reserved(self, s: int) -> float:
        """Σ min(remaining, clip) × ratio over the running decoders at step ``s``."""
        if not self.n_long:
            return (self.rem_base - self.n_dec * s) * self.ratio
        return reserved_tokens(
            [r.max_tokens - (r.o0 + s - r.s0) for r in self._decoders()], self.ratio
        )

    def _decoders(self) -> list[SimRequest]:
        return [r for r in self.running.values() if r.state == DECODE]

    def _finish_decoders(self, s: int) -> None:
        before = self.n_dec
        super()._finish_decoders(s)
        if self.n_dec < before:
            self.batch_is_full = False

    def abort(self, req: SimRequest) -> None:
        """The client went away: as the base engine, and a request being chunked stops
        being the chunked one; a running request leaving lets admission try again."""
        if req is self.chunk_req:
            self.chunk_req = None
        if req.state != WAITING:
            self.batch_is_full = False
        super().abort(req)

    # --- the loop -----------------------------------------------------------------------------
    def can_stretch(self) -> bool:
        """Decode only, nothing to admit: no request being chunked, and none waiting or the
        batch full."""
        return (
            self.n_dec > 0
            and self.chunk_req is None
            and not self.prefilling
            and (not self.waiting or self.batch_is_full or self.n_dec >= self.max_seqs)
        )

    def _stretch(self, t_limit: float) -> int:
        j = super()._stretch(t_limit)
        if j:
            self.ratio = max(self.ratio - self.decay * j, self.min_ratio)
        return j

    def _general_step(self, collect: bool) -> list[SimRequest]:
        chunks = self._prefill_batch()
        if chunks:
            return self._run_prefill(chunks, collect)
        if self.n_dec == 0:
            if not self.running:
                self.ratio = self.init_ratio  # idle: SGLang re-initialises its estimate
            return []
        return self._run_decode(collect)

    # --- prefill ------------------------------------------------------------------------------
    def _prefill_batch(self) -> list[tuple[SimRequest, int, int]]:
        """The next prefill batch (PrefillAdder): (request, chunk tokens, offset) each."""
        pool = self.pool
        B = self.B
        s = self.step
        chunks: list[tuple[SimRequest, int, int]] = []
        offset = self._reserved(s)
        rem_input = self.budget
        rem_chunk = self.chunk
        req = self.chunk_req
        if req is not None:
            left = req.prompt_len + req.out - req.computed
            c = left if rem_chunk is None else min(left, rem_chunk)
            nb = -(-(req.computed + c) // B) - req.nblocks
            if nb > pool.free:
                c = max(0, (req.nblocks + pool.free) * B - req.computed)
                nb = -(-(req.computed + c) // B) - req.nblocks
            if c <= 0:
                return []
            pool.allocate(nb)
            req.nblocks += nb
            chunks.append((req, c, req.computed))
            last = c == left
            offset += c + (min(req.max_tokens - req.out, CLIP_MAX_NEW_TOKENS) if last else 0)
            rem_input -= c
            if rem_chunk is not None:
                rem_chunk -= c
            if last:
                self.chunk_req = None
        if self.batch_is_full and not chunks:
            return []
        while self.waiting and (rem_chunk is None or rem_chunk > 0) and rem_input > 0:
            if self.n_dec + len(chunks) >= self.max_seqs:
                self.batch_is_full = True
                break
            req = self.waiting[0]
            target = req.prompt_len + req.out
            shared = pool.match(req.hashes)
            hit = min(shared * B, ((target - 1) // B) * B)
            extend = target - hit
            pages = -(-extend // B)
            input_tokens = pages * B
            future = min(req.max_tokens - req.out, CLIP_MAX_NEW_TOKENS)
            use_shared = hit // B
            revive = pool.evictable(req.hashes[:use_shared])
            # the pool as SGLang sees it: free + evictable, less what the match locks
            alone = self.n_dec == 0 and not chunks
            if extend + future >= pool.free - revive - offset and not alone:
                self.batch_is_full = True
                break
            if input_tokens > rem_input and chunks:
                break
            if rem_chunk is None or input_tokens <= rem_chunk:
                c = extend
                whole = True
            else:
                c = rem_chunk // B * B
                whole = False
                if c <= 0:
                    break
            nb = -(-(hit + c) // B) - hit // B
            if nb + revive > pool.free:
                self.batch_is_full = True
                break
            self.waiting.popleft()
            req.held = list(req.hashes[:use_shared])
            pool.acquire_shared(req.held)
            pool.drop_cached(("r", req.id))
            pool.allocate(nb)
            req.nblocks = use_shared + nb
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
            offset += (input_tokens if whole else c) + (future if whole else 0)
            rem_input -= c
            if rem_chunk is not None:
                rem_chunk -= c
            if not whole:
                self.chunk_req = req
                break
        return chunks

    def _run_prefill(
        self, chunks: list[tuple[SimRequest, int, int]], collect: bool
    ) -> list[SimRequest]:
        """One extend batch: the decoders wait (their token streams skip this step)."""
        s = self.step
        decoders = self._decoders()
        for req in decoders:  # they make no token at this step: resume them after it
            self._stop_decoding(req, s)
            req.segments.append((req.seg_start, s))
            req.seg_start = -1
        model = self.model
        ntok = attn = kv_read = w_attn = w_read = 0.0
        done: list[SimRequest] = []
        for req, c, o in chunks:
            ntok += c
            attn += c * (o + c / 2)
            kv_read += o
            if model.window is not None:
                wa, wr = model.window_terms(c, o)
                w_attn += wa
                w_read += wr
            if o + c == req.prompt_len + req.out:
                done.append(req)
        dt = model.step_time(
            int(ntok), len(chunks), len(done), 0.0, attn, kv_read, w_attn, w_read, 0
        )
        self.now += dt
        self.busy_s += dt
        if not decoders:  # the decoders' last token is still their gap's start
            self.last_step_end = self.now
        self.step_end_ns.append(int(self.now * 1e9))
        self.step_tokens.append(len(done))
        self.step = s + 1
        self.counters.steps += 1
        self.counters.generation_tokens += len(done)
        for req in decoders:
            req.state = DECODE
            self._start_decoding(req, s + 1)
            req.seg_start = s + 1
        emitted: list[SimRequest] = []
        if self._apply_prefills(chunks, done, s, emitted if collect else None):
            self.batch_is_full = False
        return emitted

    # --- decode -------------------------------------------------------------------------------
    def _retract(self, s: int) -> None:
        """SGLang's retract_decode before step ``s``: free room for 20 tokens a request."""
        pool = self.pool
        order = sorted(
            self._decoders(),
            key=lambda r: (r.o0 + s - r.s0, -r.prompt_len),
            reverse=True,
        )
        first = True
        while len(order) > 1 and (
            first or pool.free < -(-RETRACT_DECODE_STEPS * len(order) // self.B)
        ):
            first = False
            victim = order.pop()
            self._stop_decoding(victim, s)
            self.prefilling.pop(victim.id, None)
            del self.running[victim.id]
            victim.segments.append((victim.seg_start, s))
            victim.seg_start = -1
            victim.held_n = 0
            self._free_blocks(victim, keep=False)  # SGLang drops a retracted request's KV
            victim.computed = 0
            victim.state = WAITING
            victim.preemptions += 1
            self.waiting.append(victim)
            self.counters.preemptions += 1
            self.retractions += 1
        left = self._decoders()
        self.ratio = retract_ratio([r.o0 + s - r.s0 for r in left], [r.max_tokens for r in left])
        self.batch_is_full = False

    def _run_decode(self, collect: bool) -> list[SimRequest]:
        s = self.step
        pool = self.pool
        need = self.phase[s % self.B]
        if need > pool.free:
            self._retract(s)
            need = self.phase[s % self.B]
            if need > pool.free:  # one request the pool cannot hold: SGLang asserts
                last = self._decoders()
                for req in last:
                    self._stop_decoding(req, s)
                    req.segments.append((req.seg_start, s))
                    req.seg_start = -1
                    self._finish(req)
                return []
        else:
            self.ratio = max(self.ratio - self.decay, self.min_ratio)
        pool.allocate(need)
        n = self.n_dec
        emitted = self._decoders() if collect else []
        dt = self.model.step_time(n, n, n, float(self.sum_base + n * s), num_decodes=n)
        prev = self.last_step_end if self.last_step_end is not None else self.now
        self.now += dt
        self.busy_s += dt
        self.last_step_end = self.now
        self.step_end_ns.append(int(self.now * 1e9))
        self.step_tokens.append(n)
        self.h_itl.observe(self.now - prev, n)
        self.step = s + 1
        self.counters.steps += 1
        self.counters.generation_tokens += n
        self._finish_decoders(s)
        return emitted
