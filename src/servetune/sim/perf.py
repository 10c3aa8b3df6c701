"""Step time: how long one engine step takes on the simulated GPUs.

One vLLM V1 step runs its kernels one after another, so the model is a sum of parts, each a
roofline of its own, for one GPU of the deployment::

    t = dense + experts + attention + collectives + cpu

    dense       = max(dense FLOPs / (peak × mfu), fixed weight bytes / (HBM × mbu))
    experts     = max(expert FLOPs / (peak × mfu × grouped_gemm_efficiency),
                      expert bytes × coverage(T) / (HBM × mbu))            (MoE only)
    attention   = max(attention FLOPs / (bf16 peak × mfu), KV bytes / (HBM × mbu))
    collectives = all-reduces of the attention's TP group (2 per layer) and, with
                  data-parallel attention, a dispatch and a combine per MoE layer
    floor       = layers × graph_layer_us (the small kernels' floor, every step)
    cpu         = step_overhead + per_seq_overhead × requests in the step

A step the engine does not run as a captured CUDA graph (SGLang: any step with prefill
tokens, or a decode batch above ``--cuda-graph-max-bs``; vLLM: a step above its largest
captured size) launches its kernels from Python one by one: the GPU cannot finish before the
last launch, ``gpu = max(gpu, layers × eager_layer_us)``. Both per-layer constants are the
engine's (``efficiency.json`` ``engines``): a single-request decode step of a 61–94-layer MoE
model on 8 GPUs takes ~9–10 ms where its weights take ~1 ms to read, and a 600-token prefill
~100 ms where its FLOPs take a few (the SGLang 0.5 B200 runs of
``benchmarks/data/moe_published_cases.json``).

With async scheduling (vLLM's ``--async-scheduling``, on by default in the releases after
vLLM PR #27614, i.e. after 0.11.0) the scheduler prepares step N+1 while the GPU runs step N,
so the CPU part overlaps the GPU part: ``t = max(gpu, cpu)``.

The weights (:func:`servetune.arch.weights.rank_weights`): the dense part (attention
projections, dense MLPs, shared experts, router, lm_head, norms) is read once per step; a MoE
step reads only the experts its ``T`` tokens route to, ``1 − (1 − k/E)^T`` of them
(``coverage``). FLOPs (:func:`servetune.arch.flops.model_flops`): 2 × the dense weights per
token computed on this GPU, 2 × k experts per MoE layer per token spread over every GPU, the
lm_head per sampled token; a step of at most the largest CUDA-graph capture size is padded up
to the next captured size (vLLM V1 captures piecewise graphs for 1, 2, 4, then multiples of 8
below 256 and of 16 up to min(2 × max_num_seqs, 512) tokens). Attention: per token of context,
by layer kind (:meth:`servetune.arch.architecture.Architecture.attention_flops_per_ctx`: MLA
absorbed in decode, multi-head in prefill), a windowed layer (sliding window, local chunk)
over at most its window — a decode batch's windowed context is ``min(S, n × W)`` (exact when
every context is past the window or none is); KV bytes are the cache read by decodes and by
later prefill chunks plus the KV written for every token.

Data-parallel attention (``attn_dp`` replicas, :class:`servetune.arch.parallel.Parallelism`):
the scheduler is one, its requests spread evenly over the replicas; a replica's attention and
dense layers run its share of the step, the MoE layers run everyone's tokens together.

The constants (mfu, mbu, the two CPU overheads, the all-reduce latency) come from
``efficiency``: calibrated per GPU against published vLLM measurements, each with its source
(``data/efficiency.json``).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from servetune.arch.architecture import AttentionKind
from servetune.arch.flops import ModelFlops, model_flops, peak_flops
from servetune.arch.precision import linear_rate
from servetune.arch.weights import mtp_layer_weights, rank_weights
from servetune.errors import SimError
from servetune.sim.efficiency import Efficiency, calibrated
from servetune.sim.resolved import ResolvedConfig
from servetune.sim.semantics import SGLANG_SRT

__all__ = ["DecodeCoeffs", "ModelFlops", "StepModel", "capture_sizes", "model_flops", "peak_flops"]


def capture_sizes(max_num_seqs: int, top: int | None = None) -> tuple[int, ...]:
    """The batch sizes vLLM V1 captures CUDA graphs for (its default rule; ``top``: the
    largest, ``--max-cudagraph-capture-size``)."""
    top = min(2 * max_num_seqs, 512) if top is None else top
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, top + 1, 16)]
    return tuple(s for s in sizes if s <= top) or (1,)


def sglang_capture_sizes(max_bs: int) -> tuple[int, ...]:
    """The decode batch sizes SGLang captures (``ServerArgs._generate_cuda_graph_batch_sizes``
    without speculation): 1, 2, 4, 8, 12, multiples of 8 to 256, of 16 below 512, then of 32
    up to ``--cuda-graph-max-bs``."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    return tuple(s for s in sizes if s <= max_bs) or (1,)


def graph_sizes_for(r: ResolvedConfig) -> tuple[int, ...]:
    """The captured sizes of the engine simulated (SGLang's list, or vLLM's rule)."""
    if r.semantics == SGLANG_SRT:
        return sglang_capture_sizes(r.cuda_graph_max_bs)
    return capture_sizes(r.max_num_seqs, r.max_cudagraph_capture_size)


@dataclass(frozen=True)
class DecodeCoeffs:
    """Time of a decode-only step as a function of the summed context S (seconds):
    ``max(f0 + f1·S + fw·min(S, cap), m0 + m1·S + mw·min(S, cap), floor) + c`` (``cap``:
    the windowed layers' most context, ``n × window``; ``floor``: the CPU part when it
    overlaps the GPU's, and an eager batch's kernel launches; ``c``: the CPU part of an eager
    batch when it does not overlap, else 0)."""

    f0: float
    f1: float
    m0: float
    m1: float
    c: float
    floor: float = 0.0
    fw: float = 0.0
    mw: float = 0.0
    cap: float = 0.0

    def time(self, s: float) -> float:
        w = s if s < self.cap else self.cap
        return (
            max(
                self.f0 + self.f1 * s + self.fw * w, self.m0 + self.m1 * s + self.mw * w, self.floor
            )
            + self.c
        )


class StepModel:
    """Step-time model for one resolved configuration."""

    def __init__(self, r: ResolvedConfig, eff: Efficiency | None = None) -> None:
        self.eff = eff or calibrated(r)
        m = r.model
        par = r.parallelism
        self.tp = par.attn_tp
        self.dp = par.attn_dp
        world = par.world
        mfu = self.eff.mfu
        bf16 = r.gpu.bf16_tflops * 1e12
        expert_rate = linear_rate(r.gpu, r.quantization)[0]
        dense_rate = expert_rate if m.quantization_scope == "all" else bf16
        self.flops_per_s = dense_rate * mfu
        self.expert_flops_per_s = expert_rate * mfu * self.eff.grouped_gemm_efficiency
        # attention runs in BF16 whatever the weights are
        self.attn_flops_per_s = bf16 * mfu
        self.bytes_per_s = r.gpu.hbm_gb_s * 1e9 * self.eff.mbu
        flops = model_flops(m)
        head_flops = flops.head
        self.head_flops_per_sample = head_flops / self.tp
        self.linear_flops_per_token = (2.0 * m.dense_linear_params) / self.tp
        k = m.moe.experts_per_token if m.moe is not None else 0
        self.expert_flops_per_token = 2.0 * k * m.moe_layer_count * m.expert_params / world
        w = rank_weights(m, r.quantization, par)
        self.weights = w
        self.weight_bytes = w.streamed_fixed
        self.expert_bytes = w.experts
        # attention per kind: full layers over the whole context, windowed ones within W
        prefill = m.attention_flops_per_ctx(decode=False)
        decode = m.attention_flops_per_ctx(decode=True)
        kv = m.kv_elements_per_token(self.tp)
        dt = r.kv_dtype_bytes
        kinds: tuple[AttentionKind, ...] = ("sliding", "chunked")
        windowed = [kind for kind in kinds if m.attention_counts[kind]]
        if len(windowed) > 1:
            raise SimError(
                f"{m.name} has both sliding-window and chunked layers, which the step model "
                "does not combine",
                hint="the step model handles one windowed layer kind beside full attention",
                code="sim.unmodelled_family",
            )
        self.window = m.window_of[windowed[0]] if windowed else None
        wk: AttentionKind = windowed[0] if windowed else "full"
        self.attn_flops_per_ctx = decode["full"] / self.tp
        self.prefill_flops_per_ctx = prefill["full"] / self.tp
        self.kv_bytes_per_token = kv["full"] * dt
        self.w_attn_flops_per_ctx = decode[wk] / self.tp if windowed else 0.0
        self.w_prefill_flops_per_ctx = prefill[wk] / self.tp if windowed else 0.0
        self.w_kv_bytes_per_token = kv[wk] * dt if windowed else 0.0
        self.kv_write_bytes = (kv["full"] + (kv[wk] if windowed else 0)) * dt
        self.graph_sizes = graph_sizes_for(r)
        self.graph_top = self.graph_sizes[-1]
        self.decode_only_graphs = r.semantics == SGLANG_SRT
        """SGLang captures decode batches only; vLLM V1's piecewise graphs take any step."""
        layers = m.num_hidden_layers
        self.graph_floor_s = layers * self.eff.graph_layer_us / 1e6
        self.eager_launch_s = layers * self.eff.eager_layer_us / 1e6
        self._moe_memo: dict[float, float] = {}
        self.fixed_s = self.eff.step_overhead_ms / 1e3
        self.per_seq_s = self.eff.per_seq_overhead_us / 1e6
        overlap = r.async_scheduling
        self.overlap = self.eff.async_scheduling if overlap is None else overlap
        # all-reduce: a fixed latency per collective and the ring's bytes over the link
        L = m.num_hidden_layers
        link = r.interconnect_gb_s * 1e9
        self.comm_fixed_s = 0.0
        self.comm_per_token = 0.0
        if self.tp > 1:
            n_coll = 2 * L
            self.comm_fixed_s = n_coll * self.eff.allreduce_latency_us / 1e6
            volume = n_coll * m.hidden_size * 2.0 * 2 * (self.tp - 1) / self.tp
            self.comm_per_token = volume / link
        if self.dp > 1 and m.moe is not None:
            # dispatch and combine around every MoE layer: a token's hidden state goes to the
            # GPUs of its experts (expert parallel) or to every replica (split experts)
            fan = min(k, world) * (world - 1) / world if par.moe_ep > 1 else self.dp - 1
            layers = m.moe_layer_count
            self.comm_fixed_s += 2 * layers * self.eff.alltoall_latency_us / 1e6
            self.comm_per_token += 2 * layers * fan * m.hidden_size * 2.0 / link
        self._speculative(r)

    def _speculative(self, r: ResolvedConfig) -> None:
        """Speculative decoding's terms (:mod:`servetune.sim.speculative`): a decoding request
        computes ``verify = k + 1`` tokens a step (the caller counts them in the step's tokens
        and samples), attends ``k + 1`` queries over its context (the KV read once), and an
        MTP drafter runs one layer of the model's shape ``k`` times over one token per request
        (:meth:`draft_time`), attending over the context and reading its KV each time; n-gram
        drafting runs on the CPU and costs the GPU nothing."""
        spec = r.speculation
        self.verify = 1 if spec is None else spec.k + 1
        self.draft_passes = spec.k if spec is not None and spec.drafts_with_mtp else 0
        self._draft_memo: dict[int, float] = {}
        if spec is None:
            return
        m = r.model
        L = m.num_hidden_layers
        per_layer = self.draft_passes / L
        self.attn_flops_per_ctx *= self.verify + per_layer
        self.w_attn_flops_per_ctx *= self.verify + per_layer
        self.kv_bytes_per_token *= 1 + per_layer
        self.w_kv_bytes_per_token *= 1 + per_layer
        if not self.draft_passes:
            return
        dense, experts = mtp_layer_weights(m, r.quantization, r.parallelism)
        self.draft_bytes = dense + self.weights.head  # the shared lm_head is read every pass
        h = m.hidden_size
        self.draft_flops_per_token = (
            2.0 * (m.dense_linear_params / L + 2 * h * h)
        ) / self.tp + self.head_flops_per_sample
        self.draft_expert_bytes = experts
        layers = m.moe_layer_count
        self.draft_expert_flops_per_token = self.expert_flops_per_token / layers if layers else 0.0
        self.draft_comm_fixed_s = self.comm_fixed_s / L
        self.draft_comm_per_token = self.comm_per_token / L

    def draft_time(self, n: int) -> float:
        """The GPU time of an MTP drafter's ``k`` passes for ``n`` decoding requests (all
        replicas): each pass one layer of the model's shape and the lm_head over one token per
        request, a roofline of its own (memoized by ``n``)."""
        if not self.draft_passes or n <= 0:
            return 0.0
        got = self._draft_memo.get(n)
        if got is not None:
            return got
        dp = self.dp
        per = -(-n // dp) if dp > 1 else n
        dense = max(
            self.draft_flops_per_token * per / self.flops_per_s, self.draft_bytes / self.bytes_per_s
        )
        experts = 0.0
        if self.draft_expert_bytes:
            flops = self.draft_expert_flops_per_token * n / self.expert_flops_per_s
            read = self.draft_expert_bytes * self.weights.expert_coverage(n) / self.bytes_per_s
            experts = max(flops, read)
        one = dense + experts + self.draft_comm_fixed_s + self.draft_comm_per_token * per
        got = self._draft_memo[n] = self.draft_passes * one
        return got

    def padded(self, num_tokens: int) -> int:
        """Tokens the GPU computes: a captured CUDA-graph size when the step fits one."""
        sizes = self.graph_sizes
        if num_tokens > sizes[-1]:
            return num_tokens
        return sizes[bisect_left(sizes, num_tokens)]

    def window_terms(self, c: int, o: int) -> tuple[float, float]:
        """(Σ windowed context attended, windowed KV read) of a prefill chunk of ``c`` tokens
        after ``o``: token j (1-based) attends to min(j, W) tokens."""
        w = self.window
        if w is None:
            return 0.0, 0.0
        end = o + c
        if o >= w:
            return float(c * w), float(w)
        top = min(end, w)
        inside = (top * (top + 1) - o * (o + 1)) / 2  # tokens o+1 .. top attend to themselves
        return inside + (end - top) * w, float(o)

    def _moe(self, tokens: float) -> float:
        """The routed experts' part of a step of ``tokens`` tokens (all replicas), memoized by
        the token count: a run's steps repeat a few hundred counts, and the coverage is a pow."""
        got = self._moe_memo.get(tokens)
        if got is not None:
            return got
        if not self.expert_bytes:
            return 0.0
        flops = self.expert_flops_per_token * tokens / self.expert_flops_per_s
        read = self.expert_bytes * self.weights.expert_coverage(tokens) / self.bytes_per_s
        got = self._moe_memo[tokens] = flops if flops > read else read
        return got

    def step_time(
        self,
        num_tokens: int,
        num_seqs: int,
        num_sampled: int,
        decode_ctx: float,
        prefill_attn: float = 0.0,
        prefill_kv_read: float = 0.0,
        window_attn: float = 0.0,
        window_kv_read: float = 0.0,
        num_decodes: int = 0,
    ) -> float:
        """Seconds for one step.

        ``num_tokens``: tokens computed in the step (decodes + prefill chunks);
        ``num_seqs``: requests in the step; ``num_sampled``: tokens sampled (decodes and
        prefills that complete); ``decode_ctx``: summed context of the decode tokens;
        ``prefill_attn``: Σ c·(offset + c/2) over prefill chunks; ``prefill_kv_read``: Σ offset;
        ``window_attn`` / ``window_kv_read``: the same within the window
        (:meth:`window_terms`), ``num_decodes``: decode tokens (the windowed cap), for a model
        with windowed layers. All over every data-parallel replica.
        """
        dp = self.dp
        per = num_tokens / dp if dp > 1 else num_tokens
        padded = self.padded(-(-num_tokens // dp) if dp > 1 else num_tokens)
        lin_flops = (
            self.linear_flops_per_token * padded + self.head_flops_per_sample * num_sampled / dp
        )
        dense = max(lin_flops / self.flops_per_s, self.weight_bytes / self.bytes_per_s)
        attn_flops = (
            self.attn_flops_per_ctx * decode_ctx + self.prefill_flops_per_ctx * prefill_attn
        )
        kv_bytes = self.kv_bytes_per_token * (decode_ctx + prefill_kv_read) + (
            self.kv_write_bytes * num_tokens
        )
        if self.window is not None:
            cap = num_decodes * self.window
            wctx = decode_ctx if decode_ctx < cap else cap
            attn_flops += (
                self.w_attn_flops_per_ctx * wctx + self.w_prefill_flops_per_ctx * window_attn
            )
            kv_bytes += self.w_kv_bytes_per_token * (wctx + window_kv_read)
        attention = max(attn_flops / self.attn_flops_per_s, kv_bytes / self.bytes_per_s) / dp
        gpu = (
            dense
            + attention
            + self.comm_fixed_s
            + self.comm_per_token * (padded if dp == 1 else per)
        )
        if self.expert_bytes:
            gpu += self._moe(num_tokens)
        if self.draft_passes and num_decodes:
            gpu += self.draft_time(num_decodes)
        gpu += self.graph_floor_s
        if self.eager_launch_s > gpu and not self.captured(num_tokens, num_decodes):
            gpu = self.eager_launch_s
        cpu = self.fixed_s + self.per_seq_s * num_seqs
        if self.overlap:
            return gpu if gpu > cpu else cpu
        return gpu + cpu

    def captured(self, num_tokens: int, num_decodes: int) -> bool:
        """Does the engine run this step as a captured CUDA graph? Its tokens per replica
        within the largest captured size and, for SGLang, no prefill token in it."""
        dp = self.dp
        per = -(-num_tokens // dp) if dp > 1 else num_tokens
        if per > self.graph_top:
            return False
        return not self.decode_only_graphs or num_tokens <= num_decodes * self.verify

    def decode_coeffs(self, n: int) -> DecodeCoeffs:
        """Coefficients of a decode-only step of ``n`` requests (see :class:`DecodeCoeffs`);
        with speculative decoding each verifies ``k + 1`` tokens and the drafter runs."""
        dp = self.dp
        t = n * self.verify  # tokens computed (and sampled)
        padded = self.padded(-(-t // dp) if dp > 1 else t)
        lin_flops = self.linear_flops_per_token * padded + self.head_flops_per_sample * t / dp
        dense = max(lin_flops / self.flops_per_s, self.weight_bytes / self.bytes_per_s)
        gpu = dense + self.comm_fixed_s + self.comm_per_token * (padded if dp == 1 else t / dp)
        if self.expert_bytes:
            gpu += self._moe(t)
        if self.draft_passes:
            gpu += self.draft_time(n)
        gpu += self.graph_floor_s
        cpu = self.fixed_s + self.per_seq_s * n
        launch = 0.0 if self.captured(t, n) else self.eager_launch_s
        if self.overlap:
            k, floor, c = gpu, max(cpu, launch), 0.0
        elif launch:  # an eager batch: the launches bound the GPU's part, the CPU's adds
            k, floor, c = gpu, launch, cpu
        else:
            k, floor, c = gpu + cpu, 0.0, 0.0
        a = self.attn_flops_per_s * dp
        b = self.bytes_per_s * dp
        f1 = self.attn_flops_per_ctx / a
        m0 = self.kv_write_bytes * t / b
        m1 = self.kv_bytes_per_token / b
        if self.window is None:
            return DecodeCoeffs(k, f1, k + m0, m1, c, floor)
        return DecodeCoeffs(
            k,
            f1,
            k + m0,
            m1,
            c,
            floor,
            fw=self.w_attn_flops_per_ctx / a,
            mw=self.w_kv_bytes_per_token / b,
            cap=float(n * self.window),
        )
