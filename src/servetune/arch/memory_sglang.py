"""The start-up memory plan of SGLang: how ``python -m sglang.launch_server`` sizes its token
pool on one GPU, version by version (the vLLM planner is :mod:`servetune.arch.memory`).

What every version does (``ModelRunner``: ``init_torch_distributed``, ``load_model``,
``profile_max_num_token``, ``init_memory_pool``)::

    free_at_start = the device's free memory once the CUDA context and NCCL exist
                    ("Load weight begin. avail mem=…")
    after_load    = free_at_start − weights − what loading leaves allocated
                    ("Load weight end. … avail mem=…, mem usage=…")
    rest          = after_load − free_at_start × (1 − mem_fraction_static)
    max_total_num_tokens = rest // cell,   cell = KV bytes of one token over all layers

``cell`` is ``kv_heads(attention TP) × head_dim × 2 × layers × dtype`` for multi-head and
grouped attention, ``(kv_lora_rank + qk_rope_head_dim) × layers × dtype`` for MLA (the latent
once per token, on every rank: DeepSeek-V3 in bf16 is 70,272 bytes). SGLang's "GB" are GiB
(``1 << 30``). So ``mem_fraction_static`` is the share of the memory free at start that the
weights and the token pool may take together; what it leaves, ``free_at_start × (1 − mfs)``,
holds activations, CUDA graphs and the sampler. The pool is rounded down to whole pages
(``--page-size``, default 1: token-granular). With data-parallel attention each attention
replica keeps its own pool of that size.

Sliding-window models (gpt-oss, Gemma-3, Llama-4's chunked layers) get two pools unless the
hybrid SWA memory is disabled: the tokens of the full-attention layers and those of the
windowed layers, in the ratio ``--swa-full-tokens-ratio`` (default 0.8), out of the same
bytes: ``full = tokens × layers / (ratio × windowed_layers + full_layers)``, ``swa = full ×
ratio``; ``max_total_num_tokens`` is the full-attention pool.

A refusal where SGLang refuses: weights that do not fit the free memory (CUDA out of memory
while loading), and a pool of no tokens ("Not enough memory. Please try to increase
--mem-fraction-static."). A fraction so high that what it leaves cannot hold the CUDA graphs
and one chunked prefill's activations starts in SGLang and then fails at graph capture, with
its message and its four suggestions; the planner refuses it with that message.

When ``--mem-fraction-static`` is not given, SGLang computes it (``ServerArgs``; with it the
default ``--chunked-prefill-size`` and ``--cuda-graph-max-bs``): :func:`memory_settings`,
per version in :data:`RULES`.

* **≤ 0.4** (``ServerArgs.__post_init__``): the fraction by TP size — 0.88 (TP 1), 0.87 (2),
  0.85 (4), 0.81 (8), 0.79 (≥ 16); a chunk of 2048 tokens below 25,000 MB of GPU memory, else
  8192; CUDA graphs up to batch 160, or 8 (TP < 4) / 80 (TP ≥ 4) below 25,000 MB. The logs
  agree: 0.88 on an H100 (SGLang's quick-start notebook, January 2025), 0.85 at TP 4 on 24 GB
  L4s with chunk 2048 and graphs to 80 (March 2025), 0.81 at TP 8 on H200s (sglang #3416).
* **≥ 0.5** (``ServerArgs._handle_gpu_memory_settings``): chunk and graph batch by GPU memory —
  < 20 GiB: 2048 / 8; < 35: 2048 / 24 (80 at TP ≥ 4); < 60: 4096 / 32 (160); < 90 (H100):
  8192 / 256 (512); < 160 (H200, H20): 8192 / 256 (512); else (B200, MI300X): 16384 / 512 —
  then ``reserved = 512 + max(chunk, 2048) × 1.5 + graph_bs × 2 + tp × pp / 8 × 1024`` MB (plus
  ``graph_bs × dp × 3``, and ``× 1.5`` more above batch 300, with DP attention), at least
  10 GiB on a GPU of more than 60 GiB, and ``mfs = round((gpu_mem − reserved) / gpu_mem, 3)``.
  A Qwen3-8B log on a B200 (2026) has chunk 16384 and 52 graph sizes up to 512, and its pool
  gives mfs 0.854 (the rule: 0.856).
* Both: data-parallel attention divides the chunk by ``--dp`` (the MoE kernels' batch).

The calibration cases, each with its source, are
``servetune/sim/data/sglang_memory_calibration.json``;
``tests/sim/test_memory_calibration_sglang.py`` prints the table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol

from servetune.arch.deployment import GIB, Deployment
from servetune.arch.memory import MemoryPlan, cuda_graph_bytes, forward_peak_for
from servetune.arch.weights import rank_weights
from servetune.errors import SimError

MIB = 1024**2
SWA_FULL_TOKENS_RATIO = 0.8
"""``--swa-full-tokens-ratio``'s default: the windowed pool's tokens per full-pool token."""


class SglangDeployment(Deployment, Protocol):
    """A deployment as SGLang sizes it: the knobs its memory plan reads beyond vLLM's."""

    @property
    def mem_fraction_static(self) -> float: ...
    @property
    def chunked_prefill_size(self) -> int: ...
    @property
    def cuda_graph_max_bs(self) -> int: ...


@dataclass(frozen=True)
class SglangMemoryRules:
    """How one range of SGLang versions sizes the pool and picks its memory defaults."""

    name: str
    versions: str
    defaults: Literal["tp_table", "reserved_mem"]
    """How the default mem_fraction_static (and chunk, graph batch) are chosen."""
    start_used_gib: float
    """Device memory in use before the weights load (CUDA context, NCCL), TP = 1."""
    start_used_tp_gib: float
    """The same at TP > 1."""
    load_extra_tp_gib: float
    """What loading leaves allocated beyond the weights and the rotary tables at TP > 1
    (communication buffers made while loading)."""
    req_slots_extra: int
    """The request-slot pool's spare slot: max_running_requests 2049 in the 0.4 logs."""
    calibrated: str


RULES: dict[str, SglangMemoryRules] = {
    r.name: r
    for r in (
        SglangMemoryRules(
            name="0.4",
            versions="SGLang 0.4.x (mem_fraction_static by TP size)",
            defaults="tp_table",
            start_used_gib=0.37,
            start_used_tp_gib=0.37,
            load_extra_tp_gib=0.24,
            req_slots_extra=1,
            calibrated="SGLang's quick-start notebook (Llama-3.1-8B, H100: 78.81 GiB free at "
            "start of 79.18) and a QwQ-32B start-up on 4 x L4 (21.63 of 22.0 GiB free at TP 4, "
            "0.28 GiB loaded beyond the parameters)",
        ),
        SglangMemoryRules(
            name="0.5",
            versions="SGLang >= 0.5 (mem_fraction_static from the reserved-memory estimate)",
            defaults="reserved_mem",
            start_used_gib=0.78,
            start_used_tp_gib=0.9,
            load_extra_tp_gib=0.24,
            req_slots_extra=0,
            calibrated="a Qwen3-8B start-up on a B200 (2026: 177.57 of 178.35 GiB free at "
            "start); TP > 1 assumed (the 0.4 step plus NCCL's 0.13 GiB)",
        ),
    )
}
DEFAULT_RULES = "0.5"


def rules_for(version: str | None) -> SglangMemoryRules:
    """The rules for an SGLang version string ("0.4.3.post4", "0.5.2", "v0.5"); None: the
    newest."""
    if version is None:
        return RULES[DEFAULT_RULES]
    text = version.strip().lower().lstrip("v")
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    if len(parts) < 2:
        raise SimError(
            f"unknown SGLang version {version!r} for the memory planner",
            hint="give a version such as 0.4.6 or 0.5.2",
            code="sim.config",
        )
    return RULES["0.4"] if tuple(parts) < (0, 5) else RULES["0.5"]


@dataclass(frozen=True)
class MemorySettings:
    """What SGLang's server arguments resolve to on a GPU (given values kept)."""

    chunked_prefill_size: int
    """Tokens of one prefill chunk; -1: chunked prefill off."""
    cuda_graph_max_bs: int
    mem_fraction_static: float
    reserved_mb: float | None = None
    """The ≥ 0.5 rule's estimate of activations and graphs (MB), when it chose the fraction."""


_TP_TABLE = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))


def _by_gpu_memory(gpu_mb: float, tp: int) -> tuple[int, int]:
    """(chunk, graph batch) of the ≥ 0.5 rule for a GPU of ``gpu_mb`` MB."""
    gib = gpu_mb / 1024
    if gib < 20:
        return 2048, 8
    if gib < 35:
        return 2048, 24 if tp < 4 else 80
    if gib < 60:
        return 4096, 32 if tp < 4 else 160
    if gib < 160:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def memory_settings(
    gpu_gib: float,
    tp: int,
    rules: SglangMemoryRules,
    *,
    dp: int = 1,
    dp_attention: bool = False,
    chunked_prefill_size: int | None = None,
    cuda_graph_max_bs: int | None = None,
    mem_fraction_static: float | None = None,
    max_prefill_tokens: int = 16384,
) -> MemorySettings:
    """SGLang's defaults for the three memory knobs on a GPU of ``gpu_gib`` (what the CUDA
    runtime reports as total), the given ones kept (see the module docstring)."""
    gpu_mb = gpu_gib * 1024
    if rules.defaults == "tp_table":
        small = gpu_mb < 25_000
        chunk = (
            chunked_prefill_size if chunked_prefill_size is not None else (2048 if small else 8192)
        )
        graph_bs = cuda_graph_max_bs
        if graph_bs is None:
            graph_bs = (8 if tp < 4 else 80) if small else 160
        reserved = None
        mfs = mem_fraction_static
        if mfs is None:
            mfs = next(f for n, f in _TP_TABLE if tp >= n)
    else:
        dchunk, dgraph = _by_gpu_memory(gpu_mb, tp)
        chunk = chunked_prefill_size if chunked_prefill_size is not None else dchunk
        graph_bs = cuda_graph_max_bs if cuda_graph_max_bs is not None else dgraph
        reserved = 512.0
        reserved += max(chunk if chunk > 0 else max_prefill_tokens, 2048) * 1.5
        reserved += graph_bs * 2 + tp / 8 * 1024
        if dp_attention:
            reserved += graph_bs * dp * 3
            if graph_bs > 300:
                reserved += graph_bs * dp * 1.5
        if gpu_mb > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        mfs = mem_fraction_static
        if mfs is None:
            mfs = round((gpu_mb - reserved) / gpu_mb, 3)
    if dp_attention and chunked_prefill_size is None and chunk > 0 and dp > 1:
        chunk //= dp
    return MemorySettings(chunk, graph_bs, mfs, reserved)


class SglangMemoryPlan(MemoryPlan):
    """Where one GPU's memory goes (GiB unless said otherwise), as SGLang plans it. The
    fields it shares with vLLM's plan carry SGLang's figures: ``requested_gib`` the static
    budget (free at start × mem_fraction_static), ``activation_peak_gib`` what the fraction
    leaves outside it, ``non_torch_gib`` the memory in use before loading,
    ``num_gpu_blocks`` the pool's pages, ``kv_cache_tokens`` max_total_num_tokens."""

    sglang_rules: str = DEFAULT_RULES
    mem_fraction_static: float
    free_at_start_gib: float
    """"Load weight begin. avail mem"."""
    avail_after_load_gib: float
    """"Load weight end. … avail mem"."""
    pool_end_gib: float
    """"Memory pool end. avail mem": what activations, graphs and the sampler get."""
    page_size: int = 1
    mla: bool = False
    swa_tokens: int = 0
    """Tokens of the windowed layers' pool (0: one pool)."""
    max_running_requests: int
    """Requests one attention replica runs at once: the given cap, else
    min(max_total_num_tokens // 2, request slots)."""
    request_slots: int
    chunked_prefill_size: int
    max_prefill_tokens: int
    cuda_graph_max_bs: int
    model_type: str = ""

    def log_lines(self) -> list[str]:
        """What SGLang prints at start-up for the same numbers."""
        size = self.kv_cache_tokens * self.kv_bytes_per_token / GIB
        kv = (
            f"KV size: {size:.2f} GB"
            if self.mla
            else f"K size: {size / 2:.2f} GB, V size: {size / 2:.2f} GB"
        )
        lines = [
            f"Load weight begin. avail mem={self.free_at_start_gib:.2f} GB",
            f"Load weight end. type={self.model_type}, dtype=torch.bfloat16, "
            f"avail mem={self.avail_after_load_gib:.2f} GB, mem usage={self.weights_gib:.2f} GB.",
        ]
        if self.swa_tokens:
            lines.append(
                f"Use sliding window memory pool. full_layer_tokens={self.kv_cache_tokens}, "
                f"swa_layer_tokens={self.swa_tokens}"
            )
        lines += [
            f"KV Cache is allocated. #tokens: {self.kv_cache_tokens}, {kv}",
            f"Memory pool end. avail mem={self.pool_end_gib:.2f} GB",
            f"max_total_num_tokens={self.kv_cache_tokens}, chunked_prefill_size="
            f"{self.chunked_prefill_size}, max_prefill_tokens={self.max_prefill_tokens}, "
            f"max_running_requests={self.max_running_requests}, context_len={self.max_model_len}",
        ]
        return lines


def rotary_cache_bytes(r: Deployment) -> float:
    """The rotary tables loaded with the weights: cos and sin per position and rotary dim, in
    fp32 (0.13 GiB for Llama-3.1's 131,072 positions, as the logs' "mem usage" shows)."""
    m = r.model
    dim = m.mla.qk_rope_head_dim if m.mla is not None else m.head_dim
    return m.max_position_embeddings * dim * 4.0 * 2


def weights_bytes(r: Deployment, rules: SglangMemoryRules) -> float:
    """What "Load weight end" reports as mem usage on one GPU."""
    w = rank_weights(r.model, r.quantization, r.parallelism)
    extra = rules.load_extra_tp_gib * GIB if r.parallelism.world > 1 else 0.0
    return w.resident + rotary_cache_bytes(r) + extra


def cell_bytes(r: Deployment) -> float:
    """KV bytes of one token over all layers on one GPU (SGLang's ``cell_size``)."""
    return r.model.kv_bytes_per_token(r.kv_dtype_bytes, r.parallelism.attn_tp)


def _swa_split(r: Deployment, tokens: int) -> tuple[int, int]:
    """(full-attention tokens, windowed tokens) of a pool of ``tokens`` cells."""
    counts = r.model.attention_counts
    windowed = counts["sliding"] + counts["chunked"]
    if not windowed or not counts["full"]:
        return tokens, 0
    layers = r.model.num_hidden_layers
    full = int(tokens * layers / (SWA_FULL_TOKENS_RATIO * windowed + counts["full"]))
    return full, int(full * SWA_FULL_TOKENS_RATIO)


def request_slots(tokens: int, context_len: int, rules: SglangMemoryRules) -> int:
    """The request-slot pool (``max_num_reqs``): 512 requests per context of pool, 2048 to
    4096."""
    return min(max(int(tokens / context_len * 512), 2048), 4096) + rules.req_slots_extra


def plan(
    r: SglangDeployment,
    rules: SglangMemoryRules | None = None,
    max_running_requests: int | None = None,
) -> SglangMemoryPlan:
    """SGLang's start-up memory plan for ``r``; raises SimError where SGLang refuses to
    start (see the module docstring). ``max_running_requests``: the given cap (None:
    derived from the pool)."""
    rules = rules or RULES[DEFAULT_RULES]
    par = r.parallelism
    total = r.gpu.usable_gib * GIB
    used = (rules.start_used_tp_gib if par.world > 1 else rules.start_used_gib) * GIB
    free0 = total - used
    weights = weights_bytes(r, rules)
    mfs = r.mem_fraction_static
    where = (
        f"on {r.gpu.name} ({r.gpu.usable_gib:g} GiB, TP={r.tensor_parallel_size}"
        + (f", DP attention {par.attn_dp}" if par.attn_dp > 1 else "")
        + f", SGLang {rules.versions})"
    )
    if weights > free0:
        raise SimError.over_fields(
            f"CUDA out of memory while loading the weights: {r.model.name} needs "
            f"{weights / GIB:.2f} GiB per GPU and {free0 / GIB:.2f} GiB are free {where}.",
            hint="raise {tensor_parallel_size} (or {expert_parallel_size} for a MoE model), "
            "quantize ({quantization} fp8), "
            "or use a GPU with more memory",
            code="sim.weights_do_not_fit",
        )
    after = free0 - weights
    rest = after - free0 * (1 - mfs)
    cell = cell_bytes(r)
    page = r.block_size
    tokens = int(rest // cell) if rest > 0 else 0
    tokens = tokens // page * page
    if tokens <= 0:
        need = (weights + page * cell) / free0
        raise SimError.over_fields(
            "'Not enough memory. Please try to increase --mem-fraction-static.' "
            f"(the weights take {weights / GIB:.2f} GiB of the {free0 * mfs / GIB:.2f} GiB "
            f"that mem_fraction_static={mfs:g} gives weights and KV cache {where})",
            hint=f"raise {{gpu_memory_utilization}} above {math.ceil(need * 1000) / 1000:.3f}, "
            "raise {tensor_parallel_size}, or quantize the weights",
            code="sim.no_kv_memory",
        )
    full, swa = _swa_split(r, tokens)
    kv = tokens * cell
    pool_end = after - kv
    chunk = r.chunked_prefill_size if r.chunked_prefill_size > 0 else r.max_num_batched_tokens
    graphs = cuda_graph_bytes(r)
    activation = forward_peak_for(r, min(chunk, r.max_num_batched_tokens))
    if pool_end < graphs + activation:
        raise SimError.over_fields(
            "Capture cuda graph failed: CUDA out of memory. "
            f"({pool_end / GIB:.2f} GiB are left after the KV cache; the graphs up to batch "
            f"{r.cuda_graph_max_bs} and a prefill chunk of {chunk} tokens need about "
            f"{(graphs + activation) / GIB:.2f} GiB {where}) the solutions SGLang lists: "
            "'1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7) "
            "2. set --cuda-graph-max-bs to a smaller value (e.g., 16) "
            "3. disable torch compile by not using --enable-torch-compile "
            "4. disable CUDA graph by --disable-cuda-graph.'",
            hint="lower {gpu_memory_utilization}, {max_cudagraph_capture_size} or "
            "{chunked_prefill_size}",
            code="sim.graph_capture_oom",
        )
    slots = request_slots(full, r.max_model_len, rules)
    if max_running_requests is None:
        running = min(full // 2, slots)
    else:
        running = min(max(1, max_running_requests // par.attn_dp), slots)
    return SglangMemoryPlan(
        vllm_rules=f"sglang-{rules.name}",
        sglang_rules=rules.name,
        total_gib=total / GIB,
        requested_gib=free0 * mfs / GIB,
        weights_gib=weights / GIB,
        activation_peak_gib=free0 * (1 - mfs) / GIB,
        forward_peak_gib=activation / GIB,
        non_torch_gib=used / GIB,
        cuda_graph_gib=graphs / GIB,
        kv_cache_gib=kv / GIB,
        kv_bytes_per_token=cell,
        block_size=page,
        num_gpu_blocks=full // page,
        kv_cache_tokens=full,
        engine_blocks=full // page * par.attn_dp,
        kv_layout_note=(
            f"SWA pool: {swa} windowed-layer tokens beside {full} full-attention tokens "
            f"(swa_full_tokens_ratio {SWA_FULL_TOKENS_RATIO})"
            if swa
            else ""
        ),
        max_model_len=r.max_model_len,
        max_concurrency=full / r.max_model_len,
        mem_fraction_static=mfs,
        free_at_start_gib=free0 / GIB,
        avail_after_load_gib=after / GIB,
        pool_end_gib=pool_end / GIB,
        page_size=page,
        mla=r.model.mla is not None,
        swa_tokens=swa,
        max_running_requests=running,
        request_slots=slots,
        chunked_prefill_size=r.chunked_prefill_size,
        max_prefill_tokens=r.max_num_batched_tokens,
        cuda_graph_max_bs=r.cuda_graph_max_bs,
        model_type=r.model.family,
    )


def plan_for(
    r: SglangDeployment,
    sglang_version: str | SglangMemoryRules | None = None,
    max_running_requests: int | None = None,
) -> SglangMemoryPlan:
    """SGLang's start-up memory plan for ``r`` under the rules of ``sglang_version``."""
    rules = (
        sglang_version
        if isinstance(sglang_version, SglangMemoryRules)
        else rules_for(sglang_version)
    )
    return plan(r, rules, max_running_requests)
