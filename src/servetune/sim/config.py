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
from typing import Any, Literal, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from servetune.arch.architecture import Architecture
from servetune.arch.cpu import find_device
from servetune.arch.gpus import GpuSpec
from servetune.arch.memory import Sampler, rules_for
from servetune.arch.models import find_model
from servetune.arch.precision import HopperMxfp4Kernel, weight_format
from servetune.checks import Invalid, config_error
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
from servetune.knobs.registry import knob as registry_knob
from servetune.results.calibration_file import Calibration
from servetune.sim.resolved import ResolvedConfig, sglang_command
from servetune.sim.semantics import SGLANG_SRT, VLLM_V1, semantics_of
from servetune.sim.speculative import MTP_METHODS, Speculation, default_acceptance

_V = TypeVar("_V", int, bool)

SIM_KNOBS: tuple[str, ...] = tuple(engine_knobs("sim"))
"""The registry's knobs the simulated engine has (each an EngineConfig field)."""

UsageContext = Literal["openai_api_server", "llm_class"]


def _knob_range(name: str) -> Any:
    """The knob registry's range of knob NAME, as ``Field`` constraints."""
    k = registry_knob(name)
    return {
        **({"ge": k.low} if k.low is not None else {}),
        **({"le": k.high} if k.high is not None else {}),
    }


VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128)
"""The KV block sizes vLLM's ``--block-size`` takes (SGLang's page size: any in range)."""


class EngineConfig(BaseModel):
    """The simulated engine's configuration, with vLLM's names (None = vLLM's default)."""

    model_config = ConfigDict(extra="forbid")

    engine: str = "vllm"
    """The engine simulated: its profile's ``sim_semantics`` decide the semantics."""
    gpu: str = "A100-80GB"
    model: str = "Qwen/Qwen2.5-7B-Instruct"
    tensor_parallel_size: int = Field(1, **_knob_range("tensor_parallel_size"))
    data_parallel_size: int = Field(1, **_knob_range("data_parallel_size"))
    """Replicas of the attention (and of the whole engine for a dense model); with a MoE
    model their MoE layers run together (data-parallel attention)."""
    enable_expert_parallel: bool = False
    async_scheduling: bool | None = None
    """None: the GPU calibration's (``efficiency.json``: on where the calibrated releases
    had it on by default)."""
    max_num_seqs: int | None = Field(None, **_knob_range("max_num_seqs"))
    max_num_batched_tokens: int | None = Field(None, **_knob_range("max_num_batched_tokens"))
    gpu_memory_utilization: float = Field(0.9, **_knob_range("gpu_memory_utilization"))
    """vLLM's share of the GPU's memory; SGLang's --mem-fraction-static."""
    max_model_len: int | None = Field(None, **_knob_range("max_model_len"))
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    block_size: int = Field(16, **_knob_range("block_size"))
    """vLLM: one of :data:`VLLM_BLOCK_SIZES`; SGLang: its page size (default 1 there)."""
    long_prefill_token_threshold: int = Field(0, **_knob_range("long_prefill_token_threshold"))
    """V1: cap on one request's prefill chunk per step (0 = none), so that a long prompt being
    chunked leaves budget for the requests behind it."""
    chunked_prefill_size: int | None = Field(None, **_knob_range("chunked_prefill_size"))
    """SGLang: tokens of one prefill chunk (-1: off); None: SGLang's rule by GPU memory."""
    schedule_conservativeness: float = Field(1.0, **_knob_range("schedule_conservativeness"))
    """SGLang: scales the new-token ratio its admission reserves for running requests."""
    max_cudagraph_capture_size: int | None = Field(
        None, **_knob_range("max_cudagraph_capture_size")
    )
    """The largest batch captured as a CUDA graph (SGLang's --cuda-graph-max-bs); None: the
    engine's rule."""
    expert_parallel_size: int | None = Field(None, **_knob_range("expert_parallel_size"))
    """SGLang's --ep-size (None: 1)."""
    enable_dp_attention: bool = False
    """SGLang's data-parallel attention (--dp replicas of the attention within --tp GPUs)."""
    sglang_version: str | None = None
    """The SGLang release whose defaults and memory rules are simulated (None: the newest
    rules, :mod:`servetune.arch.memory_sglang`); vLLM's planner takes ``vllm_version``."""
    vllm_version: str | None = None
    """Not a vLLM flag: the vLLM release whose start-up memory planner sizes the KV pool
    ("0.8.5", "0.10.1", "0.11.0", "0.19", "v0"; None: the 0.11-0.16 rules,
    :func:`servetune.arch.memory.rules_for`); SGLang's planner takes ``sglang_version``."""
    sampler: Sampler | None = None
    """Not a vLLM flag: the top-k/top-p implementation the installation's profiling run
    samples with, where it is not the release's (FlashInfer in gpustack's images, PyTorch's
    sort in vLLM's own 0.11 image; :data:`servetune.arch.memory.SAMPLER_BYTES`)."""
    hopper_mxfp4: HopperMxfp4Kernel | None = None
    """Not a vLLM flag: the MXFP4 expert kernel the installation runs on Hopper, where it is
    not the release image's (Marlin from vLLM's pip wheel, Triton with ``triton_kernels``)."""
    usage_context: UsageContext = "openai_api_server"
    served_model_name: str | None = None
    seed: int = 0
    interconnect_gb_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Hardware override, not a vLLM flag: the GPUs' all-reduce bandwidth (GB/s) when it is
    not the catalog's (e.g. TP across containers that fall back to sockets)."""
    speculative_method: str | None = None
    num_speculative_tokens: int | None = Field(None, **_knob_range("num_speculative_tokens"))
    spec_acceptance_rate: float | None = Field(None, ge=0.0, le=1.0)
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
            raise Invalid(
                f"the simulated engine models {{{info.field_name}}} {', '.join(s.choices)} "
                f"(got {value!r})" + (f": {s.note}" if s.note else ""),
                code="sim.config",
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        """The rules between knobs that need no catalog (those that need the GPU or the
        model, or the defaults they give, are checked when resolved)."""
        k, a = self.num_speculative_tokens, self.spec_acceptance_rate
        if self.speculative_method is None and (k is not None or a is not None):
            given = "{num_speculative_tokens}" if k is not None else "{spec_acceptance_rate}"
            raise Invalid(
                f"{given} without a speculative decoding method",
                hint="give {speculative_method} mtp (the model's MTP layers) or ngram, or drop "
                f"{given}",
                code="sim.config",
            )
        if semantics_of(self.engine) == SGLANG_SRT:
            self._sglang_rules()
        else:
            self._vllm_rules()
        return self

    def _vllm_rules(self) -> None:
        given = sorted(
            k
            for k in SGLANG_ONLY
            if k in self.model_fields_set and getattr(self, k) not in (None, False, 1, 1.0)
        )
        if given:
            raise Invalid(
                ", ".join("{" + k + "}" for k in given)
                + ": SGLang's knob(s), which vLLM does not have",
                hint="give {engine} sglang to simulate SGLang, or drop them",
                code="sim.config",
            )
        if self.sglang_version is not None:
            raise Invalid(
                "{sglang_version} applies to SGLang's semantics",
                hint="give {engine} sglang, or drop {sglang_version}",
                code="sim.config",
            )
        if self.vllm_version or self.sampler or self.hopper_mxfp4:
            try:
                rules_for(self.vllm_version, self.sampler, self.hopper_mxfp4)
            except SimError as exc:
                message, hint = exc.templates or (exc.message, exc.hint)
                raise Invalid(message, hint=hint, code=exc.code or "sim.config") from None
        if self.block_size not in VLLM_BLOCK_SIZES:
            raise Invalid(
                "{block_size} must be one of "
                f"{', '.join(map(str, VLLM_BLOCK_SIZES))} (got {self.block_size})",
                hint="leave it out for 16, vLLM's default",
                code="sim.config",
            )
        method = self.speculative_method
        if method is not None and method not in MTP_METHODS and self.num_speculative_tokens is None:
            raise Invalid(
                f"speculative method {method} needs {{num_speculative_tokens}}",
                hint="e.g. {num_speculative_tokens} 3",
                code="sim.config",
            )

    def _sglang_rules(self) -> None:
        vllm_only = [
            "{" + k + "}" for k in ("vllm_version", "sampler", "hopper_mxfp4") if getattr(self, k)
        ]
        if vllm_only:
            raise Invalid(
                ", ".join(vllm_only) + ": the vLLM installation's, which SGLang's semantics "
                "do not read",
                hint="drop them (SGLang's release is {sglang_version}), or simulate vLLM",
                code="sim.config",
            )
        if self.speculative_method is not None:
            raise Invalid(
                "speculative decoding under SGLang's semantics is not modelled (its "
                "EAGLE/NEXTN draft workers, their memory and their scheduling)",
                hint="drop {speculative_method}, or simulate it with {engine} vllm",
                code="sim.config",
            )
        tp, dp = self.tensor_parallel_size, self.data_parallel_size
        if dp > 1 and not self.enable_dp_attention:
            raise Invalid(
                f"{{data_parallel_size}} {dp} without {{enable_dp_attention}} runs {dp} "
                "independent copies of the engine behind SGLang's router, which one "
                "simulated engine does not model",
                hint=f"simulate {dp} replicas of one copy ({{replicas}} {dp}), or turn on "
                "{enable_dp_attention} (DP attention inside {tensor_parallel_size} GPUs)",
                code="sim.config",
            )
        if self.enable_dp_attention and tp % dp:
            raise Invalid(
                f"{{tensor_parallel_size}} {tp} must be divisible by {{data_parallel_size}} "
                f"{dp} with {{enable_dp_attention}}",
                hint="DP attention splits the {tensor_parallel_size} GPUs into "
                "{data_parallel_size} attention replicas",
                code="sim.config",
            )
        ep = self.expert_parallel_size or 1
        if tp % ep:
            raise Invalid(
                f"{{expert_parallel_size}} {ep} must divide {{tensor_parallel_size}} {tp}",
                hint="SGLang spreads the experts over ep of the tp GPUs",
                code="sim.config",
            )

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
    return cfg.interconnect_gb_s or gpu.interconnect_gb_s


def refusal(exc: ValidationError) -> SimError:
    """EngineConfig's refusal (EXC) as a SimError over its fields (code ``sim.config``, or
    the rule's own)."""
    err = config_error(exc, model=EngineConfig)
    out = SimError(err.message, err.hint, code="sim.config" if err.code == "config" else err.code)
    out.templates = err.templates
    return out


def checked(cfg: EngineConfig) -> EngineConfig:
    """CFG with its ranges and rules checked as the model states them (a copy made with
    ``model_copy`` skipped them): a SimError over fields."""
    try:
        return EngineConfig.model_validate(cfg.model_dump(exclude_unset=True))
    except ValidationError as exc:
        raise refusal(exc) from None


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
    raise SimError.over_fields(
        f"Quantization method specified in the model config ({own}) does not match the "
        f"quantization method specified in the `quantization` argument ({given}).",
        hint=f"{model.name} is published as {own}: leave {{quantization}} out (or give {own})",
        code="sim.config",
    )


SGLANG_ONLY: frozenset[str] = frozenset(
    k for k in SIM_KNOBS if not has("vllm", k) and has("sglang", k)
)
"""The simulator's knobs only SGLang's semantics honour (vLLM has no such flag)."""


def resolve(cfg: EngineConfig) -> ResolvedConfig:
    """Look up the GPU and model and apply the simulated engine's defaults and checks."""
    cfg = checked(cfg)
    r = _RESOLVERS[semantics_of(cfg.engine)](cfg)
    return r if cfg.calibration is None else r.model_copy(update={"calibration": cfg.calibration})


def _resolve_vllm(cfg: EngineConfig) -> ResolvedConfig:
    gpu = find_device(cfg.gpu, cfg.calibration.deployment.device if cfg.calibration else None)
    model = find_model(cfg.model)
    applied: dict[str, KnobValue] = {}
    tp = cfg.tensor_parallel_size
    if model.num_attention_heads % tp:
        raise SimError.over_fields(
            f"Total number of attention heads ({model.num_attention_heads}) must be divisible "
            f"by tensor parallel size ({tp}).",
            hint="choose a {tensor_parallel_size} that divides "
            f"{model.num_attention_heads} (e.g. "
            + ", ".join(str(d) for d in (1, 2, 4, 8) if model.num_attention_heads % d == 0)
            + ")",
            code="sim.heads_not_divisible",
        )
    if model.num_key_value_heads % tp and tp % model.num_key_value_heads:
        raise SimError.over_fields(
            f"Total number of key/value heads ({model.num_key_value_heads}) and tensor "
            f"parallel size ({tp}) must divide one another.",
            hint="choose a {tensor_parallel_size} that divides the KV heads or a multiple",
            code="sim.heads_not_divisible",
        )
    dp = cfg.data_parallel_size
    expert_parallel = cfg.enable_expert_parallel and model.moe is not None
    if cfg.enable_expert_parallel and not expert_parallel:
        applied["enable_expert_parallel"] = False  # vLLM ignores it for a dense model
    quantization = _quantization(cfg.quantization, model)
    util = cfg.gpu_memory_utilization
    max_model_len = cfg.max_model_len
    if max_model_len is None:
        max_model_len = model.max_position_embeddings
        applied["max_model_len"] = max_model_len
    if max_model_len > model.max_position_embeddings:
        raise SimError.over_fields(
            f"User-specified max_model_len ({max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={model.max_position_embeddings} in "
            "model's config.json).",
            hint=f"lower {{max_model_len}} to at most {model.max_position_embeddings}",
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
    max_num_seqs = _given_or_default(cfg.max_num_seqs, "max_num_seqs", int, ctx, applied)
    mnbt = _given_or_default(
        cfg.max_num_batched_tokens, "max_num_batched_tokens", int, ctx, applied
    )
    if not chunked and mnbt < max_model_len:
        raise SimError.over_fields(
            f"max_num_batched_tokens ({mnbt}) is smaller than max_model_len "
            f"({max_model_len}). This effectively limits the maximum sequence length to "
            "max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
            "max_num_batched_tokens or decrease max_model_len.",
            hint=f"raise {{max_num_batched_tokens}} to ≥ {max_model_len}, lower "
            "{max_model_len}, or turn on {enable_chunked_prefill}",
            code="sim.batch_below_model_len",
        )
    if mnbt < max_num_seqs:
        raise SimError.over_fields(
            f"max_num_batched_tokens ({mnbt}) must be greater than or equal to "
            f"max_num_seqs ({max_num_seqs}).",
            hint="raise {max_num_batched_tokens} or lower {max_num_seqs}",
            code="sim.batch_below_seqs",
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
        vllm_version=cfg.vllm_version,
        sampler=cfg.sampler,
        hopper_mxfp4=cfg.hopper_mxfp4,
    )


def _speculation(
    cfg: EngineConfig, model: Architecture, applied: dict[str, KnobValue]
) -> Speculation | None:
    """Speculative decoding as asked (vLLM's rules: the MTP method drafts with the model's
    own MTP layers, ``num_speculative_tokens`` defaulting to how many it has), with its
    acceptance rate: the user's, or the method's published default. The rules that need no
    model (a method for the drafts, their number, the ranges) are the model's."""
    method, k, a = cfg.speculative_method, cfg.num_speculative_tokens, cfg.spec_acceptance_rate
    if method is None:
        return None
    if method in MTP_METHODS and not model.mtp_layers:
        raise SimError.over_fields(
            f"{model.name} has no multi-token-prediction layers to draft with "
            f"(speculative method {method})",
            hint="mtp needs a model that ships MTP layers (DeepSeek-V3/R1: "
            "num_nextn_predict_layers); use ngram with {spec_acceptance_rate}, or no "
            "speculative decoding",
            code="sim.config",
        )
    if k is None:  # an MTP method (the model says the others need one)
        k = applied["num_speculative_tokens"] = model.mtp_layers
    if not 1 <= k <= 16:  # the model's MTP layers
        raise SimError.over_fields(
            f"{{num_speculative_tokens}} must be 1-16 (got {k})",
            hint="e.g. 1-3 for MTP",
            code="sim.config",
        )
    if a is not None:
        source = "--spec-acceptance-rate"
    else:
        a, source = default_acceptance(method, k)
    return Speculation(method=method, k=k, acceptance=a, acceptance_source=source)


def _check_heads(model: Architecture, tp: int, fields: str) -> None:
    if model.num_attention_heads % tp:
        raise SimError.over_fields(
            f"Total number of attention heads ({model.num_attention_heads}) must be divisible "
            f"by the attention's tensor parallel size ({tp}).",
            hint=f"choose {fields} so that it divides {model.num_attention_heads}",
            code="sim.heads_not_divisible",
        )
    if model.num_key_value_heads % tp and tp % model.num_key_value_heads:
        raise SimError.over_fields(
            f"Total number of key/value heads ({model.num_key_value_heads}) and the "
            f"attention's tensor parallel size ({tp}) must divide one another.",
            hint=f"choose {fields} so that it divides the KV heads or is a multiple of them",
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
    gpu = find_device(cfg.gpu, cfg.calibration.deployment.device if cfg.calibration else None)
    model = find_model(cfg.model)
    rules = ms.rules_for(cfg.sglang_version)
    applied: dict[str, KnobValue] = {}
    tp = cfg.tensor_parallel_size
    dp = cfg.data_parallel_size
    dp_attn = cfg.enable_dp_attention
    attn_dp = dp if dp_attn else 1
    _check_heads(model, tp // attn_dp, "{tensor_parallel_size} / {data_parallel_size}")
    ep = cfg.expert_parallel_size or 1
    if ep > 1 and model.moe is None:
        applied["expert_parallel_size"] = 1  # a dense model has no experts to spread
        ep = 1
    quantization = _quantization(cfg.quantization, model)
    max_model_len = cfg.max_model_len
    if max_model_len is None:
        max_model_len = model.max_position_embeddings
        applied["max_model_len"] = max_model_len
    if max_model_len > model.max_position_embeddings:
        raise SimError.over_fields(
            f"User-specified context_length ({max_model_len}) is greater than the derived "
            f"context_length ({model.max_position_embeddings}). This may lead to incorrect "
            "model outputs or CUDA errors.",
            hint=f"lower {{max_model_len}} to at most {model.max_position_embeddings}",
            code="sim.model_len_above_model",
        )
    page = cfg.block_size if "block_size" in given else 1
    if "block_size" not in given:
        applied["block_size"] = page
    mpt = cfg.max_num_batched_tokens
    if mpt is None:
        mpt = applied["max_num_batched_tokens"] = SGLANG_MAX_PREFILL_TOKENS
    chunk_given = cfg.chunked_prefill_size
    if cfg.enable_chunked_prefill is False:
        chunk_given = -1
    mfs_given = cfg.gpu_memory_utilization if "gpu_memory_utilization" in given else None
    graph_given = cfg.max_cudagraph_capture_size
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
        raise SimError.over_fields(
            f"{{chunked_prefill_size}} {chunk} must be a multiple of {{block_size}} {page}",
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
    seqs_given = cfg.max_num_seqs
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
