"""The start-up memory plan: how vLLM sizes the KV-cache pool on one GPU, version by version.

What every version does (the worker's ``determine_available_memory``): load the weights, run
one profiling forward pass of ``max_num_batched_tokens`` tokens spread over
``min(max_num_seqs, max_num_batched_tokens)`` requests, run the sampler once on those requests'
logits, and give the KV cache what is left of the budget::

    requested = total × gpu_memory_utilization          (total: the device memory as the
                                                        driver reports it, e.g. 79.18 GiB
                                                        for an "80 GB" H100)
    kv        = requested − weights − activation_peak − non_torch [− cuda_graphs]
    blocks    = kv // (block_size × KV bytes per token on this GPU)

then refuses to start when one ``max_model_len`` sequence does not fit ("To serve at least
one request with the model's max seq len ...").

The activation peak is the larger of two moments of the profiling run, which do not overlap:

* the forward pass: ``T × (6·intermediate/tp + 6·hidden)`` bytes for ``T`` profiled tokens
  (the gated MLP's gate/up output and its activation, plus the residual stream; bf16);
* the dummy sampler: ``S × vocab × sampler_bytes`` for ``S`` requests (the logits are gathered
  over the whole vocabulary on every GPU), plus the forward's output hidden states
  (``T × hidden × 2``) that are still alive. vLLM's dummy sampler asks for top-k and top-p,
  so ``sampler_bytes`` depends on which top-k/top-p implementation runs: FlashInfer's
  sampling kernels (~10.6 bytes per logit) or PyTorch's sort-based fallback (~38.3 bytes per
  logit: float32 logits, sorted values and int64 indices, softmax, cumulative sum, mask).

How it changed across versions (:data:`RULES`; a plan names the rules it used):

* **V0 engine ≤ 0.6.4**: the profile ran ``max_num_batched_tokens`` tokens (=
  ``max_model_len`` with chunked prefill off); non-torch memory (CUDA context, cuBLAS
  workspace) counted: 0.35 GiB on the RTX 3090 log, where the forward pass of 20,000 tokens
  (2.07 GiB) is the peak.
* **V0 engine 0.6.5–0.7.x** (vLLM PR #10511, "overhaul memory profiling", merged for 0.6.5):
  non-torch memory is the increase during profiling (0.05–0.08 GiB on the A10 and L40
  logs of 0.7.2; 0.36 GiB per GPU at TP=8 on PCIe L40S in a 0.6.6.post1 log, where custom
  all-reduce is off and NCCL's buffers are the increase), and the dummy sampler over
  ``max_num_seqs`` requests is PyTorch's sort-based top-k/top-p (~38.3 bytes per logit):
  256 × 151,936 logits give the 1.40 GiB peak both 0.7.2 logs print for a 1.5B Qwen2.5
  model, where the forward pass of 4,096 tokens needs 0.24.
* **V1 0.8.x**: ``peak = torch peak (weights included) + (used − torch allocated)`` after the
  profile, so the CUDA context and NCCL buffers are charged too (~0.5 GiB); FlashInfer sampler
  where installed. No published log with a complete configuration was found to calibrate it:
  the constants are the 0.10 ones plus the context, and marked so.
* **V1 0.9–0.10.x**: ``memory_profiling`` against a snapshot taken after the CUDA context
  exists: ``kv = requested − (weights + torch peak increase + non-torch increase)``; the
  context is outside the budget. FlashInfer top-k/top-p sampling ("Using FlashInfer for top-p
  & top-k sampling" in the logs). Calibrated on the vLLM 0.10.1.1 A100 logs. 0.10.2 belongs
  here: gpustack's vLLM 0.10.2 served gpt-oss-120b on one H100 at the default 0.9 with
  ``--max-model-len 32768``, which leaves at most 3.96 GiB for the profiling peak (71.26 GiB
  budget − 65.97 GiB of weights − the 1.2 GiB one request needs − 0.13 GiB non-torch) — the
  PyTorch sampler's 7.4 GiB over 1,024 × 201,088 logits would have refused it (a 0.10.1-era
  log, vLLM issue #23278, shows that 7.4 GiB peak: where FlashInfer is not installed the
  sampler falls back in these releases too; the planner takes the installed-FlashInfer case,
  so that a configuration these releases started is not refused).
* **V1 0.11–0.16**: same accounting, but top-k/top-p falls back to PyTorch's sort
  ("Falling back to the PyTorch-native implementation of top-p & top-k sampling"), which
  makes the sampler the profile's peak on large-vocabulary models at 1,024 sequences: 5.6
  GiB for Qwen3 on an H100, where the forward pass of 8,192 tokens needs 1.4. NCCL buffers are
  in the start snapshot of TP > 1 workers but the custom all-reduce buffers are not (0.55 GiB
  non-torch at TP=2). Calibrated on the vLLM 0.11.0 H100 logs (llm-d's, from the
  ``vllm/vllm-openai:v0.11.0`` image). MXFP4 experts on Hopper run OpenAI's Triton kernels
  in that image (it installs ``triton_kernels``; the pip wheel does not, and falls back to
  Marlin: ``hopper_mxfp4`` of :func:`rules_for`). This is the default.

Which top-k/top-p implementation the profiling sampler runs is a property of the installation
as much as of the release, so it can be named (``sampler=`` of :func:`rules_for` /
:func:`plan_for`; bytes per logit in :data:`SAMPLER_BYTES`): V1 took FlashInfer's kernel
whenever FlashInfer imported, unless ``VLLM_USE_FLASHINFER_SAMPLER=0`` (a vLLM 0.11.0 log
prints "Using FlashInfer for top-p & top-k sampling" and its sampler OOM runs through
``flashinfer_sample``), until vLLM PR #26859 ("Disable FlashInfer sampler by default",
merged 2025-10-15) made it opt-in; yet vLLM's own v0.11.0 image logged the sort's peak for
llm-d (Qwen3-0.6B 5.56 GiB over 1,024 x 151,936 logits), hence the release default above.
gpustack's vLLM images sampled with FlashInfer's: three of its published configurations fit
only under FlashInfer's peak — Qwen3-32B on one H100 at 0.9 serving 32,000-token prompts
(0.11.0; the sort's pool holds 18,224 tokens), Qwen3-235B-A22B-Instruct-2507 at its
262,144-token default on 8 x H100 bf16 and 4 x H100 FP8 (0.11.0; one request needs 11.75 GiB
a GPU, the sort leaves 9.7 / 8.7), gpt-oss-120b on one H100 at 32,768 tokens (0.10.2).
* **V1 0.17–0.20**: the dummy sampler's peak shrinks to ~14.9 bytes per logit (Qwen3-14B's
  logged activation falls from 5.64 GiB in 0.16 to 2.23 GiB in 0.17 at the same 1,024 x
  151,936 logits; 0.19 logs of Llama-3.1-8B, Qwen2.5-7B, Qwen3-8B and Llama-3.3-70B at TP 1,
  2 and 4 all give 14.8-15.1). Non-torch memory is 0.25 GiB at TP=1 and ~2.1 GiB per GPU at
  TP > 1: the all-reduce workspaces (custom all-reduce IPC buffers and the FlashInfer
  all-reduce + RMSNorm fusion workspace, "Enabled custom fusions: allreduce_rms") are now
  allocated after the start snapshot and counted (2.07 GiB at TP=2, 2.13-2.21 at TP=4 in the
  0.19 H100 logs). Graphs are still captured outside the budget ("In v0.19, CUDA graph
  memory profiling will be enabled by default ... To try it now, set
  VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1"). Calibrated on llm-d-planner's vLLM 0.19.0
  H100 logs.
* **V1 ≥ 0.21**: the CUDA-graph pool is estimated during profiling and subtracted from the
  budget too ("CUDA graph memory profiling is enabled (default since v0.21.0)"); before, graphs
  were captured after the KV cache, from the memory outside the budget (which is why a
  utilisation too close to 1 failed at capture).

The calibration cases, each with its source, are ``data/memory_calibration.json``;
``tests/sim/test_memory_calibration.py`` prints the table (each within 3% of the published
pool) and checks that no configuration vLLM started is refused and that the ones vLLM
refused are refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from pydantic import BaseModel

from servetune.arch.deployment import GIB, Deployment
from servetune.arch.precision import HopperMxfp4Kernel
from servetune.arch.weights import mtp_layer_weights, rank_weights
from servetune.errors import SimError

_WEIGHTS_EXTRA_GIB = 0.02
"""Buffers loaded with the weights (rotary tables, norms kept in fp32): the logged
"Model loading took" exceeds the parameter bytes by 0.0–0.07 GiB."""
_FWD_BYTES_PER_INTERMEDIATE = 6.0
_FWD_BYTES_PER_HIDDEN = 6.0
_HIDDEN_BYTES = 2.0


@dataclass(frozen=True)
class VllmMemoryRules:
    """How one range of vLLM versions sizes the KV pool (see the module docstring)."""

    name: str
    versions: str
    engine: Literal["v0", "v1"]
    sampler_bytes: float
    """Bytes per logit of the profiling run's dummy sampler (top-k/top-p implementation)."""
    non_torch_gib: float
    """Memory outside torch charged to the budget, TP = 1."""
    non_torch_tp_gib: float
    """The same when TP > 1 (NCCL / custom all-reduce buffers)."""
    start_used_gib: float
    """Device memory already in use when the worker checks free ≥ requested, TP = 1
    (CUDA context, allocator): the highest utilisation that can start is (total − this) /
    total."""
    start_used_tp_gib: float
    cuda_graphs_in_budget: bool
    """≥ 0.21: the estimated CUDA-graph pool is subtracted from the budget."""
    hybrid_kv_cache: bool
    """V1's hybrid KV-cache manager (≥ 0.10): layers that attend over a window hold only the
    window's blocks, from one pool shared with the full-attention layers
    (:func:`kv_layout`); before, every layer held every token."""
    calibrated: str
    """What the constants were fitted to (or why they were not)."""
    hopper_mxfp4: HopperMxfp4Kernel = "marlin"
    """The MXFP4 expert kernel of the release's own image on Hopper (its weight layout,
    :func:`servetune.arch.precision.mxfp4_moe_layout`)."""


RULES: dict[str, VllmMemoryRules] = {
    r.name: r
    for r in (
        VllmMemoryRules(
            name="v0",
            versions="V0 engine (<= 0.7; V0 in 0.8-0.9)",
            engine="v0",
            sampler_bytes=0.0,
            non_torch_gib=0.35,
            non_torch_tp_gib=0.55,
            start_used_gib=0.5,
            start_used_tp_gib=0.9,
            cuda_graphs_in_budget=False,
            hybrid_kv_cache=False,
            calibrated="vLLM issue #10517 RTX 3090 log (V0, 0.6.x): non-torch 0.35 GiB, "
            "activation = the forward pass of max_num_batched_tokens tokens; TP > 1 assumed",
        ),
        VllmMemoryRules(
            name="v0.7",
            versions="V0 engine 0.6.5 - 0.7.x (profiling overhaul of vLLM PR #10511)",
            engine="v0",
            sampler_bytes=38.3,
            non_torch_gib=0.06,
            non_torch_tp_gib=0.36,
            start_used_gib=0.5,
            start_used_tp_gib=0.9,
            cuda_graphs_in_budget=False,
            hybrid_kv_cache=False,
            calibrated="vLLM 0.7.2 logs on an A10 and an L40 (Qwen2.5-Math-1.5B, 2 pools): "
            "non-torch 0.05 / 0.08 GiB, sampler peak 1.40 GiB; TP > 1: 0.36 GiB per GPU in a "
            "vLLM 0.6.6.post1 log at TP=8 on 8 x L40S (PCIe, custom all-reduce off; NCCL only)",
        ),
        VllmMemoryRules(
            name="0.8",
            versions="V1 0.8.x",
            engine="v1",
            sampler_bytes=10.6,
            non_torch_gib=0.65,
            non_torch_tp_gib=0.8,
            start_used_gib=0.5,
            start_used_tp_gib=0.9,
            cuda_graphs_in_budget=False,
            hybrid_kv_cache=False,
            calibrated="not calibrated (no published 0.8 log with a complete configuration "
            "found): the 0.10 constants plus ~0.5 GiB of CUDA context, which 0.8 charged",
        ),
        VllmMemoryRules(
            name="0.10",
            versions="V1 0.9 - 0.10.x (FlashInfer top-k/top-p sampling)",
            engine="v1",
            sampler_bytes=10.6,
            non_torch_gib=0.15,
            non_torch_tp_gib=0.26,
            start_used_gib=0.5,
            start_used_tp_gib=0.9,
            cuda_graphs_in_budget=False,
            hybrid_kv_cache=True,
            calibrated="dennislee22/vLLM-benchmarking vLLM 0.10.1.1 A100 80GB logs (4 pools)",
        ),
        VllmMemoryRules(
            name="0.11",
            versions="V1 0.11 - 0.16 (PyTorch top-k/top-p fallback)",
            engine="v1",
            sampler_bytes=38.3,
            non_torch_gib=0.13,
            non_torch_tp_gib=0.55,
            start_used_gib=0.61,
            start_used_tp_gib=1.54,
            cuda_graphs_in_budget=False,
            hybrid_kv_cache=True,
            calibrated="llm-d/llm-d-benchmark vLLM 0.11.0 H100 logs (6 pools, 2 refusals)",
            hopper_mxfp4="triton",
        ),
        VllmMemoryRules(
            name="0.17",
            versions="V1 0.17 - 0.20 (smaller sampler peak; all-reduce workspaces counted)",
            engine="v1",
            sampler_bytes=14.9,
            non_torch_gib=0.25,
            non_torch_tp_gib=2.15,
            start_used_gib=0.61,
            start_used_tp_gib=1.55,
            cuda_graphs_in_budget=False,
            hybrid_kv_cache=True,
            calibrated="llm-d-incubation/llm-d-planner vLLM 0.19.0 H100 logs (TP 1, 2, 4; "
            "Llama-3.1-8B, Qwen2.5-7B, Llama-3.3-70B FP8) and its 0.15-0.18 Qwen3-14B series",
        ),
        VllmMemoryRules(
            name="0.21",
            versions="V1 >= 0.21 (CUDA-graph memory profiled into the budget)",
            engine="v1",
            sampler_bytes=14.9,
            non_torch_gib=0.25,
            non_torch_tp_gib=2.15,
            start_used_gib=0.61,
            start_used_tp_gib=1.55,
            cuda_graphs_in_budget=True,
            hybrid_kv_cache=True,
            calibrated="not calibrated: the 0.17 constants plus the estimated graph pool "
            "(0.35 + 0.005 x layers GiB, which gives the 0.52 GiB a vLLM 0.2x log printed "
            "for Qwen3-8B)",
        ),
    )
}
DEFAULT_RULES = "0.11"


Sampler = Literal["flashinfer", "pytorch"]
SAMPLER_BYTES: dict[str, float] = {"flashinfer": 10.6, "pytorch": 38.3}
"""Bytes per logit of the profiling run's dummy sampler by top-k/top-p implementation, V1
0.8-0.16: FlashInfer's kernels (the vLLM 0.10.1.1 A100 logs, which print "Using FlashInfer
for top-p & top-k sampling") and PyTorch's sort-based fallback (vLLM 0.11.0 H100 logs:
1,024 x 151,936 Qwen3 logits give a 5.56-5.64 GiB peak). The release rows carry the one the
release ran by default; see the module docstring for when the other ran."""


def rules_for(
    version: str | None,
    sampler: Sampler | None = None,
    hopper_mxfp4: HopperMxfp4Kernel | None = None,
) -> VllmMemoryRules:
    """The rules for a vLLM version string ("0.11.0", "0.10.1.1", "0.8.5", "v0", "0.21").

    ``sampler``: the top-k/top-p implementation the server's installation ran where it was
    not the release's default — "flashinfer" for a 0.11-0.16 that samples with FlashInfer's
    kernel (``VLLM_USE_FLASHINFER_SAMPLER=1``, or images such as gpustack's), "pytorch" for a
    0.8-0.10 without FlashInfer; None: the release's default.

    ``hopper_mxfp4``: the MXFP4 expert kernel the installation runs on Hopper where it was
    not the release image's — "marlin" for a 0.11-0.16 installed without the
    ``triton_kernels`` package (vLLM's pip wheel: its image adds it), "triton" for
    another release with it; None: the release's default (:attr:`VllmMemoryRules.hopper_mxfp4`)."""
    rules = _release_rules(version)
    if hopper_mxfp4 is not None and hopper_mxfp4 != rules.hopper_mxfp4:
        rules = replace(
            rules,
            name=f"{rules.name}+{hopper_mxfp4}",
            versions=f"{rules.versions}, {hopper_mxfp4} MXFP4 experts on Hopper",
            hopper_mxfp4=hopper_mxfp4,
        )
    if sampler is None:
        return rules
    if rules.engine != "v1" or rules.name.split("+")[0] in ("0.17", "0.21"):
        raise SimError.over_fields(
            f"the profiling sampler of vLLM {version} cannot be chosen for the memory planner "
            "(its release rows fix it)",
            hint="give {sampler} only for V1 releases 0.8-0.16 (FlashInfer or PyTorch top-k/top-p)",
            code="sim.config",
        )
    bytes_ = SAMPLER_BYTES[sampler]
    if bytes_ == rules.sampler_bytes:
        return rules
    return replace(
        rules,
        name=f"{rules.name}+{sampler}",
        versions=f"{rules.versions}, {sampler} sampler",
        sampler_bytes=bytes_,
    )


def _release_rules(version: str | None) -> VllmMemoryRules:
    if version is None:
        return RULES[DEFAULT_RULES]
    v = version.strip().lower().lstrip("v")
    if v in ("0",) or version.strip().lower() == "v0":
        return RULES["v0"]
    try:
        parts = [int(p) for p in v.split(".")[:3] if p.isdigit()]
    except ValueError:
        parts = []
    if len(parts) < 2 or parts[0] != 0:
        raise SimError(
            f"unknown vLLM version {version!r} for the memory planner",
            hint="give a version such as 0.8.5, 0.10.1, 0.11.0, 0.19 or v0 (the V0 engine)",
            code="sim.config",
        )
    minor = parts[1]
    patch = parts[2] if len(parts) > 2 else 0
    if minor < 6 or (minor == 6 and patch < 5):
        return RULES["v0"]
    if minor <= 7:
        return RULES["v0.7"]
    if minor == 8:
        return RULES["0.8"]
    if minor in (9, 10):
        return RULES["0.10"]
    if minor < 17:
        return RULES["0.11"]
    if minor < 21:
        return RULES["0.17"]
    return RULES["0.21"]


class MemoryPlan(BaseModel):
    """Where one GPU's memory goes (GiB unless said otherwise), as vLLM would plan it."""

    vllm_rules: str = DEFAULT_RULES
    """Which :data:`RULES` entry sized this plan."""
    total_gib: float
    requested_gib: float
    """total × gpu_memory_utilization."""
    weights_gib: float
    activation_peak_gib: float
    forward_peak_gib: float = 0.0
    """The profiling forward pass alone."""
    sampler_peak_gib: float = 0.0
    """The profiling run's dummy sampler (with the hidden states still alive)."""
    non_torch_gib: float
    cuda_graph_gib: float
    """The graph pool: subtracted from the budget (≥ 0.21) or captured outside it."""
    kv_cache_gib: float
    kv_bytes_per_token: float
    """Per GPU (this GPU's KV heads)."""
    block_size: int
    num_gpu_blocks: int
    """Blocks of one GPU's pool, as vLLM logs them ("# GPU blocks")."""
    kv_cache_tokens: int
    """Tokens as vLLM logs them ("GPU KV cache size")."""
    engine_blocks: int = 0
    """Blocks of full-attention KV the scheduler can hand out over all data-parallel ranks,
    the windowed layers' blocks set aside (:func:`kv_layout`); 0: ``num_gpu_blocks``."""
    kv_layout_note: str = ""
    """How windowed layers were accounted for, when the model has any."""
    max_model_len: int
    max_concurrency: float
    """kv_cache_tokens / max_model_len, as vLLM prints it."""

    def max_concurrency_for(self, tokens_per_request: int) -> float:
        """How many requests of this many tokens (prompt + output) the KV pool holds."""
        blocks = math.ceil(max(1, tokens_per_request) / self.block_size)
        return self.num_gpu_blocks / blocks

    def log_lines(self) -> list[str]:
        """What vLLM prints at start-up for the same numbers."""
        return [
            f"Model loading took {self.weights_gib:.4f} GiB",
            f"Available KV cache memory: {self.kv_cache_gib:.2f} GiB",
            f"GPU KV cache size: {self.kv_cache_tokens:,} tokens",
            f"# GPU blocks: {self.num_gpu_blocks}",
            f"Maximum concurrency for {self.max_model_len:,} tokens per request: "
            f"{self.max_concurrency:.2f}x",
            f"Graph capturing took {self.cuda_graph_gib:.2f} GiB",
        ]


_ROPE_BYTES = 2.0
"""The rotary cos/sin tables are built in the model's dtype."""


def weights_bytes(r: Deployment, rules: VllmMemoryRules | None = None) -> float:
    """Weight bytes on one GPU (:func:`servetune.arch.weights.rank_weights`, MXFP4 experts as
    this GPU's kernel lays them out), the rotary tables every rank holds whole
    (:attr:`~servetune.arch.architecture.Architecture.rope_cache_elements`: 2.5 GiB for
    Llama-4's 10M positions, 0.56 GiB for Gemma-3's two tables at head size 256), the MTP
    layers when they draft for speculative decoding, and the other buffers loaded with them
    (``rules``: which MXFP4 kernel lays the experts out on Hopper)."""
    kernel = (rules or RULES[DEFAULT_RULES]).hopper_mxfp4
    w = rank_weights(r.model, r.quantization, r.parallelism, r.gpu, kernel)
    rope = r.model.rope_cache_elements * _ROPE_BYTES
    # speculative decoding with the model's MTP layers loads them beside it (a deployment
    # without a ``speculation`` drafts with none)
    spec = getattr(r, "speculation", None)
    draft = 0.0
    if spec is not None and getattr(spec, "drafts_with_mtp", False):
        dense, experts = mtp_layer_weights(r.model, r.quantization, r.parallelism)
        draft = r.model.mtp_layers * (dense + experts)
    return w.resident + rope + draft + _WEIGHTS_EXTRA_GIB * GIB / r.tensor_parallel_size


def profile_shape(r: Deployment) -> tuple[int, int]:
    """(tokens, requests) of the profiling run: max_num_batched_tokens tokens over
    min(max_num_seqs, max_num_batched_tokens) requests."""
    tokens = r.max_num_batched_tokens
    return tokens, min(r.max_num_seqs, tokens)


def forward_peak_bytes(r: Deployment) -> float:
    """The profiling forward pass: the widest MLP's activations plus the residual stream per
    token. A MoE layer's fused kernel holds, per token and chosen expert, the gate/up output
    and its activation (3 × the expert width on this GPU) and the expert's output."""
    return forward_peak_for(r, profile_shape(r)[0])


def forward_peak_for(r: Deployment, tokens: int) -> float:
    """The activation peak of a forward pass of ``tokens`` tokens (see
    :func:`forward_peak_bytes`; SGLang's is a prefill chunk)."""
    m = r.model
    par = r.parallelism
    mlp = _FWD_BYTES_PER_INTERMEDIATE * m.intermediate_size / par.attn_tp
    if m.moe is not None:
        width = m.moe.expert_intermediate_size / par.moe_tp
        moe = m.moe.experts_per_token * (3 * width + m.hidden_size) * _HIDDEN_BYTES
        mlp = max(mlp if m.dense_layer_count else 0.0, moe)
    return tokens * (mlp + _FWD_BYTES_PER_HIDDEN * m.hidden_size)


def moe_workspace_bytes(r: Deployment) -> float:
    """The fused-MoE kernels' workspaces, which outlive the forward pass: vLLM's modular MoE
    kernel takes them from buffers shared by every layer and kept
    (``SharedResizableBuffer`` in fused_moe/modular_kernel.py), sized by the largest step,
    so they are still allocated when the profiling run's sampler peaks. Triton experts
    (``TritonExperts.workspace_shapes``): ``T × k × max(2I, H)`` and ``T × k × I`` plus the
    ``T × H`` output, 16 bits. The MXFP4 (OAI Triton ``matmul_ogs``) path allocates its
    outputs per call: none kept (gpt-oss's logged peak is the sampler's alone)."""
    m = r.model
    if m.moe is None or r.quantization == "mxfp4":
        return 0.0
    tokens, _ = profile_shape(r)
    inner = m.moe.expert_intermediate_size / r.parallelism.moe_tp
    k = m.moe.experts_per_token
    per_token = k * (max(2 * inner, m.hidden_size) + inner) + m.hidden_size
    return tokens * per_token * _HIDDEN_BYTES


def sampler_peak_bytes(r: Deployment, rules: VllmMemoryRules) -> float:
    """The dummy sampler over the profiled requests' logits, with the forward's last hidden
    states and the MoE workspaces (:func:`moe_workspace_bytes`) still allocated."""
    m = r.model
    tokens, seqs = profile_shape(r)
    if rules.sampler_bytes <= 0:
        return 0.0
    held = tokens * m.hidden_size * _HIDDEN_BYTES + moe_workspace_bytes(r)
    return seqs * m.vocab_size * rules.sampler_bytes + held


def activation_peak_bytes(r: Deployment, rules: VllmMemoryRules | None = None) -> float:
    """The profiling run's activation peak: the larger of the forward pass and the sampler."""
    rules = rules or RULES[DEFAULT_RULES]
    return max(forward_peak_bytes(r), sampler_peak_bytes(r, rules))


def cuda_graph_bytes(r: Deployment) -> float:
    return (0.35 + 0.005 * r.model.num_hidden_layers) * GIB


@dataclass(frozen=True)
class Budget:
    """The terms of the plan in bytes, before vLLM's start-up checks."""

    total: float
    requested: float
    weights: float
    forward: float
    sampler: float
    non_torch: float
    graphs: float
    graphs_in_budget: float
    used_at_start: float
    kv: float
    kv_per_token: float

    @property
    def activation(self) -> float:
        return max(self.forward, self.sampler)


def budget(r: Deployment, rules: VllmMemoryRules | None = None) -> Budget:
    """The memory terms of ``r`` under ``rules`` (no checks: ``kv`` may be negative)."""
    rules = rules or RULES[DEFAULT_RULES]
    tp = r.tensor_parallel_size
    total = r.gpu.usable_gib * GIB
    requested = float(math.ceil(total * r.gpu_memory_utilization))
    weights = weights_bytes(r, rules)
    fwd = forward_peak_bytes(r)
    samp = sampler_peak_bytes(r, rules)
    non_torch = (rules.non_torch_tp_gib if tp > 1 else rules.non_torch_gib) * GIB
    graphs = cuda_graph_bytes(r)
    in_budget = graphs if rules.cuda_graphs_in_budget else 0.0
    return Budget(
        total=total,
        requested=requested,
        weights=weights,
        forward=fwd,
        sampler=samp,
        non_torch=non_torch,
        graphs=graphs,
        graphs_in_budget=in_budget,
        used_at_start=(rules.start_used_tp_gib if tp > 1 else rules.start_used_gib) * GIB,
        kv=requested - weights - max(fwd, samp) - non_torch - in_budget,
        kv_per_token=r.model.kv_bytes_per_token(r.kv_dtype_bytes, r.parallelism.attn_tp),
    )


@dataclass(frozen=True)
class KvLayout:
    """How one GPU's KV bytes become blocks (see :func:`kv_layout`)."""

    num_blocks: int
    """vLLM's "# GPU blocks"."""
    tokens: int
    """vLLM's "GPU KV cache size" (tokens)."""
    engine_blocks: int
    """Full-attention blocks the scheduler has on this GPU once windows are set aside."""
    one_request_bytes: float
    """KV bytes one max_model_len request needs."""
    note: str = ""


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def kv_layout(r: Deployment, rules: VllmMemoryRules, kv: float) -> KvLayout:
    """The blocks of ``kv`` bytes. Every layer full attention (or rules before the hybrid
    manager): a block holds ``block_size`` tokens of every layer. With windowed layers and
    the hybrid manager (vLLM ≥ 0.10, ``kv_cache_utils``): the layers of each kind are cut into
    groups of ``min(layers per kind)`` layers; a block id is one page in each of a group's
    layers, shared by all groups, so the pool has ``kv / (page × group size)`` blocks and
    vLLM reports ``blocks // groups × block_size`` tokens; a request holds ``⌈n/B⌉`` blocks in
    every full-attention group and at most ``⌈(W−1)/B⌉ + 1`` in every windowed group. The
    simulated scheduler counts full-attention blocks: the windowed groups' blocks of
    ``max_num_seqs`` requests are set aside first (what a full batch holds; a lighter load
    holds fewer, so the pool is understated below full concurrency)."""
    m = r.model
    B = r.block_size
    per_kind = m.kv_elements_per_token(r.parallelism.attn_tp)
    counts = m.attention_counts
    windowed = {k: n for k, n in counts.items() if k != "full" and n}
    per_token = sum(per_kind.values()) * r.kv_dtype_bytes
    if not windowed or not rules.hybrid_kv_cache or not counts["full"]:
        blocks = int(kv // (per_token * B))
        need = _cdiv(r.max_model_len, B) * per_token * B
        note = ""
        if windowed:
            note = "windowed layers hold every token (no hybrid KV-cache manager)"
        return KvLayout(blocks, blocks * B, blocks, need, note)
    layer_bytes = per_token / m.num_hidden_layers * B  # one layer's page
    group = min(counts["full"], *windowed.values())
    g_full = _cdiv(counts["full"], group)
    g_win = {k: _cdiv(n, group) for k, n in windowed.items()}
    groups = g_full + sum(g_win.values())
    blocks = int(kv // (layer_bytes * group))
    window_blocks = 0
    for kind, g in g_win.items():
        w = m.window_of[kind] or 0
        window_blocks += g * min(_cdiv(r.max_model_len, B), _cdiv(w - 1, B) + 1)
    need_blocks = g_full * _cdiv(r.max_model_len, B) + window_blocks
    engine = max(0, (blocks - r.max_num_seqs * window_blocks)) // g_full
    note = (
        f"hybrid KV cache: {counts['full']} full-attention layers in {g_full} group(s), "
        + ", ".join(f"{windowed[k]} {k} layers in {g} group(s)" for k, g in g_win.items())
        + f"; {window_blocks} windowed blocks a request set aside for {r.max_num_seqs} requests"
    )
    return KvLayout(blocks, blocks // groups * B, engine, need_blocks * layer_bytes * group, note)


def plan_resolved(r: Deployment, rules: VllmMemoryRules | None = None) -> MemoryPlan:
    rules = rules or RULES[DEFAULT_RULES]
    b = budget(r, rules)
    total, requested, weights, graphs = b.total, b.requested, b.weights, b.graphs
    act, non_torch, kv, kv_per_token = b.activation, b.non_torch, b.kv, b.kv_per_token
    used_at_start = b.used_at_start
    tp = r.tensor_parallel_size
    where = f"on {r.gpu.name} ({r.gpu.usable_gib:g} GiB, TP={tp}, vLLM {rules.versions})"

    free_at_start = total - used_at_start
    if weights > free_at_start:
        raise SimError.over_fields(
            f"CUDA out of memory while loading the model: the weights of {r.model.name} need "
            f"{weights / GIB:.2f} GiB per GPU {where}.",
            hint="quantize ({quantization} fp8 or awq), raise {tensor_parallel_size}, "
            "or use a GPU with more memory",
            code="sim.weights_do_not_fit",
        )
    if requested > free_at_start:
        raise SimError.over_fields(
            f"Free memory on device ({free_at_start / GIB:.2f}/{total / GIB:.2f} GiB) on "
            f"startup is less than desired GPU memory utilization "
            f"({r.gpu_memory_utilization:g}, {requested / GIB:.2f} GiB). Decrease GPU memory "
            "utilization or reduce GPU memory used by other processes.",
            hint=f"lower {{gpu_memory_utilization}} to at most "
            f"{math.floor(free_at_start / total * 100) / 100:.2f}",
            code="sim.free_memory_short",
        )
    if kv <= 0:
        raise SimError.over_fields(
            "No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine. "
            f"(weights {weights / GIB:.2f} GiB + activations {act / GIB:.2f} GiB + other "
            f"{(non_torch + b.graphs_in_budget) / GIB:.2f} GiB exceed "
            f"{requested / GIB:.2f} GiB {where})",
            hint="raise {gpu_memory_utilization}, lower {max_num_batched_tokens} or "
            "{max_num_seqs}, quantize ({quantization} fp8/awq) or raise {tensor_parallel_size}",
            code="sim.no_kv_memory",
        )
    layout = kv_layout(r, rules, kv)
    blocks, tokens, needed = layout.num_blocks, layout.tokens, layout.one_request_bytes
    if needed > kv:
        est = tokens
        raise SimError.over_fields(
            "To serve at least one request with the model's max seq len "
            f"({r.max_model_len}), ({needed / GIB:.2f} GiB KV cache is needed, which is "
            f"larger than the available KV cache memory ({kv / GIB:.2f} GiB). Based on the "
            f"available memory, the estimated maximum model length is {est}. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
            f"engine. ({where}: weights {weights / GIB:.2f} GiB, profiling peak "
            f"{act / GIB:.2f} GiB, non-torch {non_torch / GIB:.2f} GiB)",
            hint=f"lower {{max_model_len}} to ≤ {est}, raise {{gpu_memory_utilization}}, lower "
            "{max_num_seqs} (the profiling sampler's peak grows with it), use "
            "{kv_cache_dtype} fp8, quantize, or raise {tensor_parallel_size}",
            code="sim.model_len_above_pool",
        )
    if not rules.cuda_graphs_in_budget and total - requested < graphs + used_at_start:
        raise SimError.over_fields(
            "CUDA out of memory during CUDA graph capture: "
            f"{(total - requested) / GIB:.2f} GiB are left outside gpu_memory_utilization "
            f"({r.gpu_memory_utilization:g}) but capture needs about "
            f"{(graphs + used_at_start) / GIB:.2f} GiB {where}.",
            hint="lower {gpu_memory_utilization} (e.g. to 0.9)",
            code="sim.graph_capture_oom",
        )
    return MemoryPlan(
        vllm_rules=rules.name,
        total_gib=total / GIB,
        requested_gib=requested / GIB,
        weights_gib=weights / GIB,
        activation_peak_gib=act / GIB,
        forward_peak_gib=b.forward / GIB,
        sampler_peak_gib=b.sampler / GIB,
        non_torch_gib=non_torch / GIB,
        cuda_graph_gib=graphs / GIB,
        kv_cache_gib=kv / GIB,
        kv_bytes_per_token=kv_per_token,
        block_size=r.block_size,
        num_gpu_blocks=blocks,
        kv_cache_tokens=tokens,
        engine_blocks=layout.engine_blocks * r.parallelism.attn_dp,
        kv_layout_note=layout.note,
        max_model_len=r.max_model_len,
        max_concurrency=tokens / r.max_model_len,
    )


def plan_for(
    r: Deployment,
    vllm_version: str | VllmMemoryRules | None = None,
    sampler: Sampler | None = None,
    hopper_mxfp4: HopperMxfp4Kernel | None = None,
) -> MemoryPlan:
    """vLLM's start-up memory plan for ``r``; raises SimError where vLLM refuses to start.

    ``vllm_version``: the vLLM release being planned for ("0.11.0", "0.10.1", "0.8.5",
    "0.7.2", "v0", or a :class:`VllmMemoryRules`); default: the 0.11-0.16 rules.
    ``sampler``, ``hopper_mxfp4``: the installation, see :func:`rules_for`."""
    if isinstance(vllm_version, VllmMemoryRules):
        rules = vllm_version
    else:
        rules = rules_for(vllm_version, sampler, hopper_mxfp4)
    return plan_resolved(r, rules)
