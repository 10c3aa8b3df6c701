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
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from servetune.arch.architecture import Architecture
from servetune.arch.cpu import find_device
from servetune.arch.gpus import GpuSpec
from servetune.arch.models import find_model
from servetune.arch.parallel import Parallelism
from servetune.arch.precision import kv_dtype_bytes, weight_format
from servetune.errors import ConfigError, SimError
from servetune.knobs import (
    DefaultContext,
    KnobValue,
    default,
    engine_knobs,
    has,
    render_command,
    spelling,
    vllm_batch_defaults,
)
from servetune.knobs.model import Spelling
from servetune.profiles import PROFILES
from servetune.profiles import find as find_profile
from servetune.results.calibration_file import Calibration
from servetune.sim.speculative import MTP_METHODS, Speculation, default_acceptance

_V = TypeVar("_V", int, bool)

SIM_KNOBS: tuple[str, ...] = tuple(engine_knobs("sim"))
"""The registry's knobs the simulated engine has (each an EngineConfig field)."""

UsageContext = Literal["openai_api_server", "llm_class"]
VLLM_V1 = "vllm-v1"
"""vLLM V1's semantics: its scheduler, memory planner, defaults, /metrics and ``vllm serve``."""
SGLANG_SRT = "sglang-srt"
"""SGLang's runtime (SRT): its scheduler policy, memory planner, server-argument defaults,
/metrics names and ``python -m sglang.launch_server`` line."""


def semantics_of(engine: str) -> str:
    """Whose semantics the simulated engine follows for ENGINE (its profile's
    ``sim_semantics``); a SimError naming the engines it models otherwise."""
    found = find_profile(engine)
    sem = found.sim_semantics if found is not None else None
    if sem is None:
        modelled = ", ".join(p.id for p in PROFILES if p.sim_semantics and not p.simulated)
        raise SimError(
            f"the simulated engine does not model {engine!r}",
            hint=f"--engine takes: {modelled}",
            code="sim.config",
        )
    return sem


def simulated_engines() -> list[str]:
    """The engines ``--engine`` may name (their profiles say how the simulator models them)."""
    return [p.id for p in PROFILES if p.sim_semantics and not p.simulated]


class EngineConfig(BaseModel):
    """The simulated engine's configuration, with vLLM's names (None = vLLM's default)."""

    model_config = ConfigDict(extra="forbid")

    engine: str = "vllm"
    """The engine simulated: its profile's ``sim_semantics`` decide the semantics."""
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
    chunked_prefill_size: int | None = None
    """SGLang: tokens of one prefill chunk (-1: off); None: SGLang's rule by GPU memory."""
    schedule_conservativeness: float = 1.0
    """SGLang: scales the new-token ratio its admission reserves for running requests."""
    max_cudagraph_capture_size: int | None = None
    """The largest batch captured as a CUDA graph (SGLang's --cuda-graph-max-bs); None: the
    engine's rule."""
    expert_parallel_size: int | None = None
    """SGLang's --ep-size (None: 1)."""
    enable_dp_attention: bool = False
    """SGLang's data-parallel attention (--dp replicas of the attention within --tp GPUs)."""
    sglang_version: str | None = None
    """The SGLang release whose defaults and memory rules are simulated (None: the newest
    rules, :mod:`servetune.arch.memory_sglang`); vLLM's planner takes ``vllm_version``."""
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
    calibration: Calibration | None = None
    """Not an engine flag: the simulator fitted to this deployment's own runs
    (``servetune sim calibrate``); its constants replace the catalog's."""

    @field_validator("engine")
    @classmethod
    def _modelled(cls, value: str) -> str:
        semantics_of(value)
        return value

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

    def launch_command(self) -> list[str]:
        """The command line of the engine this configuration simulates (``vllm serve …`` or
        ``python -m sglang.launch_server …``), every default resolved."""
        r = self.resolve()
        if r.semantics == SGLANG_SRT:
            return sglang_command(r, self._served_id(r))
        return ["vllm", "serve", *self.vllm_args()]

    def vllm_args(self) -> list[str]:
        """The ``vllm serve`` arguments (model first) that reproduce this configuration with
        every default resolved, spelled by the knob registry."""
        r = self.resolve()
        if r.semantics != VLLM_V1:
            raise SimError(
                f"this configuration simulates {r.engine}, which vllm serve does not run",
                hint="use launch_command() for the engine's own command line",
                code="sim.config",
            )
        values = {k: getattr(r, k) for k in SIM_KNOBS if k not in SGLANG_ONLY}
        if "max_cudagraph_capture_size" not in self.model_fields_set:
            values.pop("max_cudagraph_capture_size", None)
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


def _interconnect(cfg: EngineConfig, gpu: GpuSpec) -> float:
    """The all-reduce link's GB/s: the override (not an engine flag, either engine) or the
    catalog's."""
    if cfg.interconnect_gb_s is not None and not cfg.interconnect_gb_s > 0:
        raise SimError(
            f"--interconnect-gb-s must be > 0 (got {cfg.interconnect_gb_s})",
            hint="e.g. --interconnect-gb-s 300, or leave it out for the catalog's bandwidth",
            code="sim.config",
        )
    return cfg.interconnect_gb_s or gpu.interconnect_gb_s


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


SGLANG_ONLY: frozenset[str] = frozenset(
    k for k in SIM_KNOBS if not has("vllm", k) and has("sglang", k)
)
"""The simulator's knobs only SGLang's semantics honour (vLLM has no such flag)."""


def resolve(cfg: EngineConfig) -> ResolvedConfig:
    """Look up the GPU and model and apply the simulated engine's defaults and checks."""
    r = _RESOLVERS[semantics_of(cfg.engine)](cfg)
    return r if cfg.calibration is None else r.model_copy(update={"calibration": cfg.calibration})


def _refuse_sglang_only(cfg: EngineConfig) -> None:
    given = sorted(
        k
        for k in SGLANG_ONLY
        if k in cfg.model_fields_set and getattr(cfg, k) not in (None, False, 1, 1.0)
    )
    if given:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise SimError(
            f"{flags}: SGLang's knob(s), which vLLM does not have",
            hint="add --engine sglang to simulate SGLang, or drop them",
            code="sim.config",
        )


def _resolve_vllm(cfg: EngineConfig) -> ResolvedConfig:
    _refuse_sglang_only(cfg)
    gpu = find_device(cfg.gpu, cfg.calibration.deployment.device if cfg.calibration else None)
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
        interconnect_gb_s=_interconnect(cfg, gpu),
        speculative_method=speculation.method if speculation else None,
        num_speculative_tokens=speculation.k if speculation else None,
        speculation=speculation,
        defaults_applied=applied,
        max_cudagraph_capture_size=cfg.max_cudagraph_capture_size,
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


def _check_heads(model: Architecture, tp: int, flag: str) -> None:
    if model.num_attention_heads % tp:
        raise SimError(
            f"Total number of attention heads ({model.num_attention_heads}) must be divisible "
            f"by the attention's tensor parallel size ({tp}).",
            hint=f"choose {flag} so that it divides {model.num_attention_heads}",
            code="sim.heads_not_divisible",
        )
    if model.num_key_value_heads % tp and tp % model.num_key_value_heads:
        raise SimError(
            f"Total number of key/value heads ({model.num_key_value_heads}) and the "
            f"attention's tensor parallel size ({tp}) must divide one another.",
            hint=f"choose {flag} so that it divides the KV heads or is a multiple of them",
            code="sim.heads_not_divisible",
        )


SGLANG_MAX_PREFILL_TOKENS = 16384
"""``--max-prefill-tokens``' default (every release)."""


def _resolve_sglang(cfg: EngineConfig) -> ResolvedConfig:
    """SGLang's server arguments resolved as ``ServerArgs`` does (the memory defaults by
    :func:`servetune.arch.memory_sglang.memory_settings`), ``--max-running-requests`` from the
    token pool when not given."""
    from servetune.arch import memory_sglang as ms

    given = cfg.model_fields_set
    if cfg.speculative_method is not None:
        raise SimError(
            "speculative decoding under SGLang's semantics is not modelled (its EAGLE/NEXTN "
            "draft workers, their memory and their scheduling)",
            hint="drop --speculative-method, or simulate it with --engine vllm",
            code="sim.config",
        )
    gpu = find_device(cfg.gpu, cfg.calibration.deployment.device if cfg.calibration else None)
    model = find_model(cfg.model)
    rules = ms.rules_for(cfg.sglang_version)
    applied: dict[str, KnobValue] = {}
    tp = _at_least_one(cfg.tensor_parallel_size, "--tp")
    dp = _at_least_one(cfg.data_parallel_size, "--dp")
    dp_attn = cfg.enable_dp_attention
    if dp > 1 and not dp_attn:
        raise SimError(
            f"--dp {dp} without --enable-dp-attention runs {dp} independent copies of the "
            "engine behind SGLang's router, which one simulated engine does not model",
            hint=f"simulate one copy with `sim run --replicas {dp}`, or add "
            "--enable-dp-attention (DP attention inside --tp GPUs)",
            code="sim.config",
        )
    if dp_attn and tp % dp:
        raise SimError(
            f"--tp {tp} must be divisible by --dp {dp} with --enable-dp-attention",
            hint="DP attention splits the --tp GPUs into --dp attention replicas",
            code="sim.config",
        )
    attn_dp = dp if dp_attn else 1
    _check_heads(model, tp // attn_dp, "--tp / --dp")
    ep = _at_least_one(cfg.expert_parallel_size or 1, "--ep-size")
    if tp % ep:
        raise SimError(
            f"--ep-size {ep} must divide --tp {tp}",
            hint="SGLang spreads the experts over ep of the tp GPUs",
            code="sim.config",
        )
    if ep > 1 and model.moe is None:
        applied["expert_parallel_size"] = 1  # a dense model has no experts to spread
        ep = 1
    quantization = _quantization(cfg.quantization, model)
    max_model_len = cfg.max_model_len
    if max_model_len is None:
        max_model_len = model.max_position_embeddings
        applied["max_model_len"] = max_model_len
    _at_least_one(max_model_len, "--context-length")
    if max_model_len > model.max_position_embeddings:
        raise SimError(
            f"User-specified context_length ({max_model_len}) is greater than the derived "
            f"context_length ({model.max_position_embeddings}). This may lead to incorrect "
            "model outputs or CUDA errors.",
            hint=f"lower --context-length to at most {model.max_position_embeddings}",
            code="sim.model_len_above_model",
        )
    page = cfg.block_size if "block_size" in given else 1
    if "block_size" not in given:
        applied["block_size"] = page
    mpt = cfg.max_num_batched_tokens
    if mpt is None:
        mpt = applied["max_num_batched_tokens"] = SGLANG_MAX_PREFILL_TOKENS
    _at_least_one(mpt, "--max-prefill-tokens")
    chunk_given = cfg.chunked_prefill_size
    if cfg.enable_chunked_prefill is False:
        chunk_given = -1
    mfs_given = cfg.gpu_memory_utilization if "gpu_memory_utilization" in given else None
    if mfs_given is not None and not 0 < mfs_given <= 1:
        raise SimError(
            f"--mem-fraction-static must be in (0, 1] (got {mfs_given:g}).",
            hint="the share of the free GPU memory for weights and KV cache, e.g. 0.85",
            code="sim.config",
        )
    graph_given = cfg.max_cudagraph_capture_size
    if graph_given is not None:
        _at_least_one(graph_given, "--cuda-graph-max-bs")
    settings = ms.memory_settings(
        gpu.usable_gib,
        tp,
        rules,
        dp=dp,
        dp_attention=dp_attn,
        chunked_prefill_size=chunk_given,
        cuda_graph_max_bs=graph_given,
        mem_fraction_static=mfs_given,
        max_prefill_tokens=mpt,
    )
    chunk = settings.chunked_prefill_size if settings.chunked_prefill_size > 0 else -1
    if chunk_given is None:
        applied["chunked_prefill_size"] = chunk
    if chunk > 0 and chunk % page:
        raise SimError(
            f"--chunked-prefill-size {chunk} must be a multiple of --page-size {page}",
            hint="give a chunk size that is a whole number of pages",
            code="sim.config",
        )
    if graph_given is None:
        applied["max_cudagraph_capture_size"] = settings.cuda_graph_max_bs
    if mfs_given is None:
        applied["gpu_memory_utilization"] = settings.mem_fraction_static
    prefix = cfg.enable_prefix_caching
    if prefix is None:
        prefix = applied["enable_prefix_caching"] = True
    overlap = cfg.async_scheduling
    if overlap is None:
        overlap = True
        applied["async_scheduling"] = True
    if cfg.schedule_conservativeness < 0:
        raise SimError(
            f"--schedule-conservativeness must be ≥ 0 (got {cfg.schedule_conservativeness:g})",
            hint="1.0 is SGLang's default; lower admits more requests at once",
            code="sim.config",
        )
    seqs_given = cfg.max_num_seqs
    if seqs_given is not None:
        _at_least_one(seqs_given, "--max-running-requests")
    r = ResolvedConfig(
        engine=cfg.engine,
        gpu=gpu,
        model=model,
        served_model_name=cfg.served_model_name or model.name,
        tensor_parallel_size=tp,
        data_parallel_size=dp,
        enable_expert_parallel=ep > 1,
        async_scheduling=overlap,
        max_num_seqs=max(1, (seqs_given or 2048) // attn_dp),
        max_num_batched_tokens=mpt,
        gpu_memory_utilization=settings.mem_fraction_static,
        max_model_len=max_model_len,
        enable_chunked_prefill=chunk > 0,
        enable_prefix_caching=prefix,
        quantization=quantization,
        kv_cache_dtype=cfg.kv_cache_dtype,
        block_size=page,
        long_prefill_token_threshold=0,
        seed=cfg.seed,
        interconnect_gb_s=_interconnect(cfg, gpu),
        defaults_applied=applied,
        chunked_prefill_size=chunk,
        schedule_conservativeness=cfg.schedule_conservativeness,
        max_cudagraph_capture_size=settings.cuda_graph_max_bs,
        expert_parallel_size=ep,
        enable_dp_attention=dp_attn,
        sglang_version=cfg.sglang_version,
    )
    try:
        plan = ms.plan(r, rules, seqs_given)
    except SimError:
        return r  # the memory planner refuses it, with SGLang's words, when it is planned
    if seqs_given is None:
        applied["max_num_seqs"] = plan.max_running_requests * attn_dp
    return r.model_copy(
        update={"max_num_seqs": plan.max_running_requests, "defaults_applied": applied}
    )


_RESOLVERS: dict[str, Callable[[EngineConfig], ResolvedConfig]] = {
    VLLM_V1: _resolve_vllm,
    SGLANG_SRT: _resolve_sglang,
}


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
