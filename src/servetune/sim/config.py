"""EngineConfig: the simulated engine's knobs, named and defaulted as vLLM (V1) names them.

A knob left unset takes the value vLLM V1 gives it, so a configuration found on the simulator
is a ``vllm serve`` command line (:meth:`EngineConfig.vllm_args`). The knobs, their accepted
values, their spelling and vLLM's default rules (the scheduler budget by device, chunked
prefill and prefix caching on in V1, ``max(max_model_len, budget)`` with chunked prefill off)
are the knob registry's (:mod:`servetune.knobs`, engine ``sim``); ``max_model_len`` defaults
to the model's ``max_position_embeddings``. The offline ``LLM`` class's budget differs from
``vllm serve``'s: ``usage_context``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from servetune.arch.architecture import Architecture
from servetune.arch.gpus import GpuSpec, find_gpu
from servetune.arch.models import find_model
from servetune.arch.parallel import Parallelism
from servetune.arch.precision import kv_dtype_bytes, weight_format
from servetune.errors import ConfigError, SimError
from servetune.knobs import (
    DefaultContext,
    KnobValue,
    default,
    engine_knobs,
    render_command,
    spelling,
    vllm_batch_defaults,
)
from servetune.knobs.model import Spelling
from servetune.sim.speculative import MTP_METHODS, Speculation, default_acceptance

_V = TypeVar("_V", int, bool)

SIM_KNOBS: tuple[str, ...] = tuple(engine_knobs("sim"))
"""The registry's knobs the simulated engine has (each an EngineConfig field)."""

UsageContext = Literal["openai_api_server", "llm_class"]


class EngineConfig(BaseModel):
    """The simulated engine's configuration, with vLLM's names (None = vLLM's default)."""

    model_config = ConfigDict(extra="forbid")

    gpu: str = "A100-80GB"
    model: str = "Qwen/Qwen2.5-7B-Instruct"
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    """Replicas of the attention (and of the whole engine for a dense model); with a MoE
    model their MoE layers run together (data-parallel attention)."""
    enable_expert_parallel: bool = False
    async_scheduling: bool | None = None
    """None: the GPU calibration's (``efficiency.json``: on where the calibrated releases
    had it on by default)."""
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    block_size: int = 16
    long_prefill_token_threshold: int = 0
    """V1: cap on one request's prefill chunk per step (0 = none), so that a long prompt being
    chunked leaves budget for the requests behind it."""
    usage_context: UsageContext = "openai_api_server"
    served_model_name: str | None = None
    seed: int = 0
    interconnect_gb_s: float | None = None
    """Hardware override, not a vLLM flag: the GPUs' all-reduce bandwidth (GB/s) when it is
    not the catalog's (e.g. TP across containers that fall back to sockets)."""
    speculative_method: str | None = None
    num_speculative_tokens: int | None = None
    spec_acceptance_rate: float | None = None
    """Not a vLLM flag: the per-token acceptance rate of the drafts (0-1) on the traffic
    simulated; None: the method's published default (:mod:`servetune.sim.speculative`)."""

    @field_validator("quantization", "kv_cache_dtype", "speculative_method")
    @classmethod
    def _sim_choice(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Only the values the simulated engine models (the registry's ``sim`` choices)."""
        if value is None:
            return None
        assert info.field_name is not None  # a field validator
        s = spelling("sim", info.field_name)
        if isinstance(s, Spelling) and s.choices and value not in s.choices:
            raise ValueError(
                f"the simulated engine models {info.field_name} {', '.join(s.choices)} "
                f"(got {value!r})" + (f": {s.note}" if s.note else "")
            )
        return value

    def knob_values(self) -> dict[str, Any]:
        """The registry knobs set explicitly (engine-neutral names → values)."""
        return {k: getattr(self, k) for k in SIM_KNOBS if k in self.model_fields_set}

    def resolve(self) -> ResolvedConfig:
        """Look up the GPU and model, apply vLLM's defaults and check the knobs."""
        return resolve(self)

    def _served_id(self, r: ResolvedConfig) -> str:
        """The Hugging Face id to serve: the one asked for when it is an alias of the
        catalog entry (DeepSeek-R1 shares DeepSeek-V3's architecture), else the entry's."""
        asked = self.model
        if "/" in asked and not asked.endswith(".json") and asked in r.model.aliases:
            return asked
        return r.model.name

    def vllm_args(self) -> list[str]:
        """The ``vllm serve`` arguments (model first) that reproduce this configuration with
        every default resolved, spelled by the knob registry."""
        r = self.resolve()
        values = {k: getattr(r, k) for k in SIM_KNOBS}
        # knobs at their neutral value are left out of the line (vLLM's own default there)
        neutral = {"long_prefill_token_threshold": 0, "data_parallel_size": 1}
        for knob, value in neutral.items():
            if values.get(knob) == value:
                values.pop(knob, None)
        if not values.get("enable_expert_parallel"):
            values.pop("enable_expert_parallel", None)
        if "async_scheduling" not in self.model_fields_set:
            values.pop("async_scheduling", None)
        try:
            return render_command("vllm", self._served_id(r), values).argv[2:]
        except ConfigError as exc:  # a value the registry refuses for vLLM: a bug, say which
            raise SimError(exc.message, hint=exc.hint, code="sim.config") from exc


class ResolvedConfig(BaseModel):
    """An EngineConfig with every default applied and the catalog entries looked up."""

    model_config = ConfigDict(frozen=True)

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

    @property
    def kv_dtype_bytes(self) -> float:
        return kv_dtype_bytes(self.kv_cache_dtype)

    @property
    def parallelism(self) -> Parallelism:
        """vLLM's layout of TP × DP GPUs (:meth:`Parallelism.vllm`)."""
        return Parallelism.vllm(
            self.tensor_parallel_size, self.data_parallel_size, self.enable_expert_parallel
        )

    def summary(self) -> dict[str, Any]:
        """The configuration for TargetInfo.simulated and run.json."""
        return {
            "engine": "servetune-sim",
            "gpu": self.gpu.name,
            "model": self.model.name,
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
            **({"speculative": self.speculation.model_dump()} if self.speculation else {}),
            "defaults_applied": self.defaults_applied,
        }


def batch_defaults(gpu: GpuSpec, usage: UsageContext) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as vLLM V1 picks them for this device (the
    registry's rule, :func:`servetune.knobs.vllm_batch_defaults`)."""
    return vllm_batch_defaults(gpu.name, gpu.usable_gib, usage)


def _given_or_default(
    value: _V | None,
    knob: str,
    kind: Callable[[Any], _V],
    ctx: DefaultContext,
    applied: dict[str, KnobValue],
) -> _V:
    """The knob as given, or vLLM's default in this context (noted in ``applied``)."""
    if value is None:
        value = applied[knob] = kind(default("sim", knob, ctx))
    return value


def _at_least_one(value: int, flag: str) -> int:
    if value < 1:
        raise SimError(
            f"{flag} must be ≥ 1 (got {value})",
            hint=f"leave {flag} out for vLLM's default",
            code="sim.config",
        )
    return value


def _quantization(given: str | None, model: Architecture) -> str | None:
    """The weights' format: the checkpoint's own (a quantized checkpoint is loaded as it was
    published, as vLLM does), or the one asked for on a 16-bit checkpoint (fp8 quantizes
    online); asking a quantized checkpoint for another format is refused, as vLLM does."""
    fmt = weight_format(given).name if given else None
    own = model.checkpoint_quantization
    if own is None or fmt == own:
        return given
    if fmt is None:
        return own
    raise SimError(
        f"Quantization method specified in the model config ({own}) does not match the "
        f"quantization method specified in the `quantization` argument ({given}).",
        hint=f"{model.name} is published as {own}: leave --quantization out (or give {own})",
        code="sim.config",
    )


def resolve(cfg: EngineConfig) -> ResolvedConfig:
    gpu = find_gpu(cfg.gpu)
    model = find_model(cfg.model)
    applied: dict[str, KnobValue] = {}
    tp = cfg.tensor_parallel_size
    if tp < 1:
        raise SimError(
            f"--tensor-parallel-size must be ≥ 1 (got {tp})",
            hint="use 1, 2, 4 or 8",
            code="sim.config",
        )
    if model.num_attention_heads % tp:
        raise SimError(
            f"Total number of attention heads ({model.num_attention_heads}) must be divisible "
            f"by tensor parallel size ({tp}).",
            hint="choose a --tensor-parallel-size that divides "
            f"{model.num_attention_heads} (e.g. "
            + ", ".join(str(d) for d in (1, 2, 4, 8) if model.num_attention_heads % d == 0)
            + ")",
            code="sim.heads_not_divisible",
        )
    if model.num_key_value_heads % tp and tp % model.num_key_value_heads:
        raise SimError(
            f"Total number of key/value heads ({model.num_key_value_heads}) and tensor "
            f"parallel size ({tp}) must divide one another.",
            hint="choose a --tensor-parallel-size that divides the KV heads or a multiple",
            code="sim.heads_not_divisible",
        )
    dp = cfg.data_parallel_size
    if dp < 1:
        raise SimError(
            f"--data-parallel-size must be ≥ 1 (got {dp})",
            hint="use 1, 2, 4 or 8",
            code="sim.config",
        )
    expert_parallel = cfg.enable_expert_parallel and model.moe is not None
    if cfg.enable_expert_parallel and not expert_parallel:
        applied["enable_expert_parallel"] = False  # vLLM ignores it for a dense model
    quantization = _quantization(cfg.quantization, model)
    util = cfg.gpu_memory_utilization
    if not 0 < util <= 1:
        raise SimError(
            f"gpu_memory_utilization must be in (0, 1] (got {util:g}).",
            hint="--gpu-memory-utilization is the share of GPU memory vLLM may use, e.g. 0.9",
            code="sim.config",
        )
    max_model_len = cfg.max_model_len
    if max_model_len is None:
        max_model_len = model.max_position_embeddings
        applied["max_model_len"] = max_model_len
    _at_least_one(max_model_len, "--max-model-len")
    if max_model_len > model.max_position_embeddings:
        raise SimError(
            f"User-specified max_model_len ({max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={model.max_position_embeddings} in "
            "model's config.json).",
            hint=f"lower --max-model-len to at most {model.max_position_embeddings}",
            code="sim.model_len_above_model",
        )
    ctx = DefaultContext(device_name=gpu.name, device_gib=gpu.usable_gib, usage=cfg.usage_context)
    chunked = _given_or_default(
        cfg.enable_chunked_prefill, "enable_chunked_prefill", bool, ctx, applied
    )
    prefix = _given_or_default(
        cfg.enable_prefix_caching, "enable_prefix_caching", bool, ctx, applied
    )
    ctx = DefaultContext(
        device_name=gpu.name,
        device_gib=gpu.usable_gib,
        usage=cfg.usage_context,
        chunked_prefill=chunked,
        max_model_len=max_model_len,
    )
    max_num_seqs = _at_least_one(
        _given_or_default(cfg.max_num_seqs, "max_num_seqs", int, ctx, applied), "--max-num-seqs"
    )
    mnbt = _at_least_one(
        _given_or_default(cfg.max_num_batched_tokens, "max_num_batched_tokens", int, ctx, applied),
        "--max-num-batched-tokens",
    )
    if not chunked and mnbt < max_model_len:
        raise SimError(
            f"max_num_batched_tokens ({mnbt}) is smaller than max_model_len "
            f"({max_model_len}). This effectively limits the maximum sequence length to "
            "max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
            "max_num_batched_tokens or decrease max_model_len.",
            hint=f"raise --max-num-batched-tokens to ≥ {max_model_len}, lower --max-model-len, "
            "or turn on --enable-chunked-prefill",
            code="sim.batch_below_model_len",
        )
    if mnbt < max_num_seqs:
        raise SimError(
            f"max_num_batched_tokens ({mnbt}) must be greater than or equal to "
            f"max_num_seqs ({max_num_seqs}).",
            hint="raise --max-num-batched-tokens or lower --max-num-seqs",
            code="sim.batch_below_seqs",
        )
    if cfg.block_size not in (1, 8, 16, 32, 64, 128):
        raise SimError(
            f"--block-size must be one of 1, 8, 16, 32, 64, 128 (got {cfg.block_size})",
            hint="leave it out for 16, vLLM's default",
            code="sim.config",
        )
    if cfg.long_prefill_token_threshold < 0:
        raise SimError(
            f"--long-prefill-token-threshold must be ≥ 0 (got {cfg.long_prefill_token_threshold})",
            hint="e.g. --long-prefill-token-threshold 512, or 0 for no cap",
            code="sim.config",
        )
    if cfg.interconnect_gb_s is not None and not cfg.interconnect_gb_s > 0:
        raise SimError(
            f"--interconnect-gb-s must be > 0 (got {cfg.interconnect_gb_s})",
            hint="e.g. --interconnect-gb-s 300, or leave it out for the catalog's bandwidth",
            code="sim.config",
        )
    speculation = _speculation(cfg, model, applied)
    return ResolvedConfig(
        gpu=gpu,
        model=model,
        served_model_name=cfg.served_model_name or model.name,
        tensor_parallel_size=tp,
        data_parallel_size=dp,
        enable_expert_parallel=expert_parallel,
        async_scheduling=cfg.async_scheduling,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=mnbt,
        gpu_memory_utilization=util,
        max_model_len=max_model_len,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=prefix,
        quantization=quantization,
        kv_cache_dtype=cfg.kv_cache_dtype,
        block_size=cfg.block_size,
        long_prefill_token_threshold=cfg.long_prefill_token_threshold,
        seed=cfg.seed,
        interconnect_gb_s=cfg.interconnect_gb_s or gpu.interconnect_gb_s,
        speculative_method=speculation.method if speculation else None,
        num_speculative_tokens=speculation.k if speculation else None,
        speculation=speculation,
        defaults_applied=applied,
    )


def _speculation(
    cfg: EngineConfig, model: Architecture, applied: dict[str, KnobValue]
) -> Speculation | None:
    """Speculative decoding as asked (vLLM's rules: the MTP method drafts with the model's
    own MTP layers, ``num_speculative_tokens`` defaulting to how many it has), with its
    acceptance rate: the user's, or the method's published default."""
    method, k, a = cfg.speculative_method, cfg.num_speculative_tokens, cfg.spec_acceptance_rate
    if method is None:
        if k is not None or a is not None:
            given = "--num-speculative-tokens" if k is not None else "--spec-acceptance-rate"
            raise SimError(
                f"{given} without a speculative decoding method",
                hint="give --speculative-method mtp (the model's MTP layers) or ngram, or drop "
                f"{given}",
                code="sim.config",
            )
        return None
    if method in MTP_METHODS and not model.mtp_layers:
        raise SimError(
            f"{model.name} has no multi-token-prediction layers to draft with "
            f"(speculative method {method})",
            hint="mtp needs a model that ships MTP layers (DeepSeek-V3/R1: "
            "num_nextn_predict_layers); use ngram with --spec-acceptance-rate, or no "
            "speculative decoding",
            code="sim.config",
        )
    if k is None:
        if method not in MTP_METHODS:
            raise SimError(
                f"speculative method {method} needs --num-speculative-tokens",
                hint="e.g. --num-speculative-tokens 3",
                code="sim.config",
            )
        k = applied["num_speculative_tokens"] = model.mtp_layers
    if not 1 <= k <= 16:
        raise SimError(
            f"--num-speculative-tokens must be 1-16 (got {k})",
            hint="e.g. 1-3 for MTP",
            code="sim.config",
        )
    if a is not None:
        if not 0.0 <= a <= 1.0:
            raise SimError(
                f"--spec-acceptance-rate must be between 0 and 1 (got {a:g})",
                hint="the share of drafted tokens the target accepts, e.g. 0.8",
                code="sim.config",
            )
        source = "--spec-acceptance-rate"
    else:
        a, source = default_acceptance(method, k)
    return Speculation(method=method, k=k, acceptance=a, acceptance_source=source)
