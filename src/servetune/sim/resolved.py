"""ResolvedConfig: a configuration with every default applied and the catalog entries looked
up, as the simulated engine runs it, and the ``python -m sglang.launch_server`` line it stands
for under SGLang's semantics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
)

from servetune.arch.architecture import Architecture
from servetune.arch.gpus import GpuSpec
from servetune.arch.memory import Sampler
from servetune.arch.parallel import Parallelism
from servetune.arch.precision import HopperMxfp4Kernel, kv_dtype_bytes
from servetune.errors import ConfigError, SimError
from servetune.knobs import (
    KnobValue,
    render_command,
)
from servetune.results.calibration_file import Calibration
from servetune.sim.semantics import SGLANG_SRT, semantics_of
from servetune.sim.speculative import Speculation

INSTALLED = ("vllm_version", "sampler", "hopper_mxfp4")
"""The vLLM installation's fields (None: the release's defaults)."""


class ResolvedConfig(BaseModel):
    """An EngineConfig with every default applied and the catalog entries looked up."""

    model_config = ConfigDict(frozen=True)

    engine: str = "vllm"
    gpu: GpuSpec
    model: Architecture
    served_model_name: str
    tensor_parallel_size: int
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    async_scheduling: bool | None = None
    """None: the GPU calibration's."""
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    max_model_len: int
    enable_chunked_prefill: bool
    enable_prefix_caching: bool
    quantization: str | None
    kv_cache_dtype: str
    block_size: int
    long_prefill_token_threshold: int
    seed: int
    interconnect_gb_s: float
    speculative_method: str | None = None
    num_speculative_tokens: int | None = None
    speculation: Speculation | None = None
    """Speculative decoding as simulated (method, drafts per step, acceptance and its
    source); None: off."""
    defaults_applied: dict[str, KnobValue]
    """Knobs the user left unset and the value vLLM's rule gave them."""
    chunked_prefill_size: int = 0
    """SGLang: one prefill chunk's tokens (-1: off); 0 under vLLM's semantics."""
    schedule_conservativeness: float = 1.0
    max_cudagraph_capture_size: int | None = None
    """The largest CUDA-graph batch (SGLang: --cuda-graph-max-bs); None: vLLM's rule."""
    expert_parallel_size: int = 1
    enable_dp_attention: bool = False
    sglang_version: str | None = None
    vllm_version: str | None = None
    """The vLLM release (and installation: ``sampler``, ``hopper_mxfp4``) whose memory planner
    sizes the pool (:func:`servetune.arch.memory.rules_for`); None: its defaults."""
    sampler: Sampler | None = None
    hopper_mxfp4: HopperMxfp4Kernel | None = None
    calibration: Calibration | None = None
    """The calibration applied (its constants and KV pool), None: the catalog's."""

    @property
    def semantics(self) -> str:
        return semantics_of(self.engine)

    @property
    def mem_fraction_static(self) -> float:
        """SGLang's --mem-fraction-static (its semantics keep it in gpu_memory_utilization)."""
        return self.gpu_memory_utilization

    @property
    def cuda_graph_max_bs(self) -> int:
        return self.max_cudagraph_capture_size or 0

    @property
    def kv_dtype_bytes(self) -> float:
        return kv_dtype_bytes(self.kv_cache_dtype)

    @property
    def parallelism(self) -> Parallelism:
        """The layout of the GPUs: vLLM's TP × DP (:meth:`Parallelism.vllm`) or SGLang's TP
        with DP attention and EP inside it (:meth:`Parallelism.sglang`)."""
        if self.semantics == SGLANG_SRT:
            return Parallelism.sglang(
                self.tensor_parallel_size,
                self.data_parallel_size,
                self.enable_dp_attention,
                self.expert_parallel_size,
            )
        return Parallelism.vllm(
            self.tensor_parallel_size, self.data_parallel_size, self.enable_expert_parallel
        )

    def summary(self) -> dict[str, Any]:
        """The configuration for TargetInfo.simulated and run.json."""
        out: dict[str, Any] = {
            "engine": "servetune-sim",
            "simulates": self.engine,
            "semantics": self.semantics,
            "gpu": self.gpu.name,
            "model": self.model.name,
            **({"model_path": ref} if (ref := model_ref(self.model)) != self.model.name else {}),
            "tensor_parallel_size": self.tensor_parallel_size,
            "data_parallel_size": self.data_parallel_size,
            "enable_expert_parallel": self.enable_expert_parallel,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_model_len": self.max_model_len,
            "enable_chunked_prefill": self.enable_chunked_prefill,
            "enable_prefix_caching": self.enable_prefix_caching,
            "quantization": self.quantization,
            "kv_cache_dtype": self.kv_cache_dtype,
            "block_size": self.block_size,
            "long_prefill_token_threshold": self.long_prefill_token_threshold,
            "interconnect_gb_s": self.interconnect_gb_s,
            **{
                k: v for k in ("vllm_version", "sampler", "hopper_mxfp4") if (v := getattr(self, k))
            },
            **({"speculative": self.speculation.model_dump()} if self.speculation else {}),
            "defaults_applied": self.defaults_applied,
            **({"calibration": self.calibration.model_dump()} if self.calibration else {}),
        }
        if self.semantics == SGLANG_SRT:
            out.update(
                mem_fraction_static=self.gpu_memory_utilization,
                chunked_prefill_size=self.chunked_prefill_size,
                schedule_conservativeness=self.schedule_conservativeness,
                cuda_graph_max_bs=self.max_cudagraph_capture_size,
                expert_parallel_size=self.expert_parallel_size,
                enable_dp_attention=self.enable_dp_attention,
                sglang_version=self.sglang_version,
            )
        return out


def model_ref(m: Architecture) -> str:
    """How a configuration names its model again: the local config.json it was read from,
    else the catalog name."""
    src = m.source
    return src if src.endswith(".json") and Path(src).is_absolute() else m.name


def sglang_command(r: ResolvedConfig, model: str) -> list[str]:
    """``python -m sglang.launch_server --model-path MODEL …`` for a configuration resolved
    with SGLang's semantics, spelled by the knob registry (engine ``sglang``)."""
    values: dict[str, Any] = {
        "tensor_parallel_size": r.tensor_parallel_size,
        "gpu_memory_utilization": r.gpu_memory_utilization,
        "max_num_seqs": r.max_num_seqs * r.parallelism.attn_dp,
        "max_num_batched_tokens": r.max_num_batched_tokens,
        "max_model_len": r.max_model_len,
        "max_cudagraph_capture_size": r.max_cudagraph_capture_size,
        "kv_cache_dtype": r.kv_cache_dtype,
    }
    if r.chunked_prefill_size > 0:
        values["chunked_prefill_size"] = r.chunked_prefill_size
    else:
        values["enable_chunked_prefill"] = False
    if r.data_parallel_size > 1:
        values["data_parallel_size"] = r.data_parallel_size
    if r.enable_dp_attention:
        values["enable_dp_attention"] = True
    if r.expert_parallel_size > 1:
        values["expert_parallel_size"] = r.expert_parallel_size
    if not r.enable_prefix_caching:
        values["enable_prefix_caching"] = False
    if r.async_scheduling is False:
        values["async_scheduling"] = False
    if r.block_size != 1:
        values["block_size"] = r.block_size
    if r.quantization is not None and r.quantization != r.model.checkpoint_quantization:
        values["quantization"] = r.quantization
    if r.schedule_conservativeness != 1.0:
        values["schedule_conservativeness"] = r.schedule_conservativeness
    try:
        return render_command("sglang", model, values, r.sglang_version).argv
    except ConfigError as exc:  # a value the registry refuses for SGLang: say which
        raise SimError(exc.message, hint=exc.hint, code="sim.config") from exc
