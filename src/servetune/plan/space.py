"""The candidate deployments: engine × GPU type × layout × quantization × knob set.

Each candidate is one replica's engine configuration (vLLM's names; unset = vLLM's default
for that GPU); the planner decides how many replicas. A *layout* is how one replica spreads
over its GPUs (:class:`Layout`): tensor parallel ``tpN``; for a mixture-of-experts model also
``tpN-ep`` (the experts spread whole over the N GPUs: ``--enable-expert-parallel``) and
``dpN-ep`` (data-parallel attention, each GPU its own requests and KV cache, the experts spread
over all N: ``--data-parallel-size N --enable-expert-parallel``), or any ``tpT-dpD[-ep]``
asked for. By default every ``--tp`` size gives ``tpN`` and, for a MoE model, ``tpN-ep`` and
``dpN-ep`` (:func:`default_layouts`). Quantization names: ``auto`` (the
model's own dtype, bf16/fp16), ``fp8`` (vLLM quantizes the weights to FP8 at load), ``awq``
and ``gptq`` (int4: a pre-quantized checkpoint of the model). Knob sets are ``default`` or
``key=value,…`` over EngineConfig's fields (``max_num_seqs=64``,
``max_num_batched_tokens=8192``, ``kv_cache_dtype=fp8``, …). Two candidates that resolve to the
same configuration (a knob set equal to the GPU's default) are planned once.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servetune.arch.models import find_model
from servetune.errors import ConfigError
from servetune.results.calibration_file import Calibration
from servetune.sim.config import EngineConfig
from servetune.sim.semantics import SGLANG_SRT, semantics_of, simulated_engines

QUANTIZATIONS = {
    "auto": None,
    "fp8": "fp8",
    "awq": "awq",
    "gptq": "gptq",
    "mxfp4": "mxfp4",
    "nvfp4": "nvfp4",
}
PREQUANTIZED = ("awq", "gptq", "nvfp4")
"""Formats vLLM cannot quantize to at load time: a pre-quantized checkpoint of the model."""
DEFAULT_GPUS = ("A100-80GB", "H100-SXM", "L40S", "L4")
DEFAULT_TP = (1, 2, 4)
DEFAULT_MOE_TP = (1, 2, 4, 8)
"""A mixture-of-experts model's default GPU counts per replica (one 8-GPU node at most)."""
DEFAULT_QUANTIZATIONS = ("auto", "fp8", "awq")
ENGINES = tuple(simulated_engines())
"""Engines the planner simulates, each by the simulated engine's semantics of it (vLLM V1's
scheduler and memory planner, SGLang's): :func:`engine_config` is the one place a candidate's
engine is turned into a configuration."""
DEFAULT_ENGINES = ("vllm",)
DEFAULT_KNOB_SETS = (
    "default",
    "max_num_batched_tokens=8192",
    "max_num_seqs=64",
    "kv_cache_dtype=fp8",
)
_KNOB_KEYS = {
    "max_num_seqs": int,
    "max_num_batched_tokens": int,
    "gpu_memory_utilization": float,
    "max_model_len": int,
    "kv_cache_dtype": str,
    "enable_chunked_prefill": bool,
    "enable_prefix_caching": bool,
    "long_prefill_token_threshold": int,
    "block_size": int,
}


class Layout(BaseModel):
    """How one replica spreads over its GPUs: ``tp × dp`` GPUs, the experts split or spread."""

    model_config = ConfigDict(frozen=True)

    tp: int = Field(ge=1)
    dp: int = Field(1, ge=1)
    ep: bool = False

    @property
    def gpus(self) -> int:
        return self.tp * self.dp

    @property
    def name(self) -> str:
        """``tp8``, ``tp8-ep``, ``dp8-ep``, ``tp4-dp2-ep``."""
        parts = [f"tp{self.tp}"] if self.tp > 1 or self.dp == 1 else []
        if self.dp > 1:
            parts.append(f"dp{self.dp}")
        if self.ep:
            parts.append("ep")
        return "-".join(parts)


_LAYOUT = re.compile(r"^(?:tp(\d+))?(?:[-+]?dp(\d+))?([-+]?ep)?$")


def parse_layout(spec: str) -> Layout:
    """``tp8`` / ``tp8-ep`` / ``dp8-ep`` / ``tp4-dp2-ep`` → a :class:`Layout`."""
    m = _LAYOUT.match(spec.strip().lower())
    if m is None or not (m.group(1) or m.group(2)):
        raise ConfigError.over_fields(
            f"{{layouts}} {spec!r} is not a layout",
            hint="tpN (tensor parallel), tpN-ep (experts spread), dpN-ep (data-parallel "
            "attention, experts spread), tpT-dpD[-ep]; e.g. {layouts}=tp8,dp8-ep",
        )
    tp, dp = int(m.group(1) or 1), int(m.group(2) or 1)
    if tp < 1 or dp < 1:
        raise ConfigError.over_fields(
            f"{{layouts}} {spec!r}: sizes must be ≥ 1", hint="e.g. tp8, dp8-ep"
        )
    return Layout(tp=tp, dp=dp, ep=bool(m.group(3)))


def default_layouts(tps: list[int], moe: bool) -> list[Layout]:
    """``tpN`` for every size; for a MoE model also ``tpN-ep`` and ``dpN-ep`` (N > 1)."""
    out: list[Layout] = []
    for n in tps:
        out.append(Layout(tp=n))
        if moe and n > 1:
            out += [Layout(tp=n, ep=True), Layout(tp=1, dp=n, ep=True)]
    return out


class Candidate(BaseModel):
    gpu: str
    tensor_parallel_size: int
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    quantization: str
    """auto / fp8 / awq / gptq / mxfp4 / nvfp4."""
    knobs: dict[str, Any]
    knob_set: str
    engine_name: str = "vllm"
    engine: EngineConfig
    router: str | None = None
    """The routing policy in front of its replicas (``--router``; None: planned one replica
    at a time, :mod:`servetune.plan.fleet` otherwise)."""

    @property
    def layout(self) -> Layout:
        return Layout(
            tp=self.tensor_parallel_size, dp=self.data_parallel_size, ep=self.enable_expert_parallel
        )

    @property
    def gpus_per_replica(self) -> int:
        return self.tensor_parallel_size * self.data_parallel_size

    @property
    def label(self) -> str:
        base = f"{self.gpu} {self.layout.name} {self.quantization} {self.knob_set}"
        if self.engine_name != DEFAULT_ENGINES[0]:  # unnamed, as when it was the only one
            base = f"{self.engine_name} {base}"
        return base if self.router is None else f"{base} · {self.router}"


def _bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)


def parse_knob_set(spec: str) -> dict[str, Any]:
    """``default`` → {}; ``max_num_seqs=64,kv_cache_dtype=fp8`` → the knobs."""
    s = spec.strip()
    if s in ("", "default"):
        return {}
    out: dict[str, Any] = {}
    for item in s.split(","):
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_").lstrip("_")
        if not sep or key not in _KNOB_KEYS:
            raise ConfigError.over_fields(
                f"{{knob_sets}} {spec!r}: {item.strip()!r} is not KNOB=VALUE with a known knob",
                hint=f"knobs: {', '.join(_KNOB_KEYS)}; e.g. max_num_seqs=64",
            )
        conv = _KNOB_KEYS[key]
        try:
            out[key] = _bool(value) if conv is bool else conv(value.strip())
        except ValueError:
            raise ConfigError.over_fields(
                f"{{knob_sets}} {spec!r}: {value.strip()!r} is not a valid {key}"
            ) from None
    return out


def parse_quantizations(items: list[str]) -> list[str]:
    out = []
    for q in items:
        q = q.strip().lower()
        if q in ("none", "bf16", "fp16", "default"):
            q = "auto"
        if q == "modelopt_fp4":
            q = "nvfp4"
        if q not in QUANTIZATIONS:
            raise ConfigError(
                f"unknown quantization {q!r}", hint=f"use some of: {', '.join(QUANTIZATIONS)}"
            )
        out.append(q)
    return list(dict.fromkeys(out))


def check_engines(items: list[str]) -> list[str]:
    out = list(dict.fromkeys(e.strip().lower() for e in items if e.strip()))
    for e in out:
        if e not in ENGINES:
            raise ConfigError.over_fields(
                f"the planner does not simulate engine {e!r}",
                hint=f"{{engines}} takes: {', '.join(ENGINES)}",
            )
    return out


def engine_config(
    engine: str,
    gpu: str,
    model: str,
    layout: Layout,
    quantization: str,
    knobs: dict[str, Any],
    calibration: Calibration | None = None,
    installation: dict[str, Any] | None = None,
) -> EngineConfig:
    """One candidate's simulated configuration, with ``--calibration``'s constants when given
    (on every candidate: one on another GPU or model than the profile's transfers them, and
    its notes say so) and the vLLM installation's facts (``installation``: vllm_version,
    sampler, hopper_mxfp4; vLLM's candidates only).

    The layout is spelled as each engine does: vLLM's ``tpT-dpD[-ep]`` is
    ``--tensor-parallel-size T --data-parallel-size D [--enable-expert-parallel]``; SGLang's
    ``--tp`` counts every GPU of the engine, so the same layout is ``--tp T·D`` with
    ``--dp D --enable-dp-attention`` (D attention replicas inside it) and ``--ep-size T·D``
    for experts spread over them. A dense model's DP replicas are independent copies behind
    SGLang's router, which one simulated engine does not model: plan them as replicas."""
    assert engine in ENGINES, engine
    common: dict[str, Any] = {
        "calibration": calibration,
        "gpu": gpu,
        "model": model,
        "quantization": QUANTIZATIONS[quantization],
        **knobs,
    }
    if semantics_of(engine) == SGLANG_SRT:
        gpus = layout.gpus
        if layout.dp > 1 and find_model(model).moe is None:
            raise ConfigError(
                f"layout {layout.name} on sglang: data parallelism of a dense model is "
                f"{layout.dp} independent copies of the engine behind SGLang's router",
                hint=f"plan them as replicas of {Layout(tp=layout.tp).name} (the planner "
                "counts replicas), or leave sglang out of the engines for this layout",
            )
        return EngineConfig(
            engine=engine,
            tensor_parallel_size=gpus,
            data_parallel_size=layout.dp,
            enable_dp_attention=layout.dp > 1,
            expert_parallel_size=gpus if layout.ep else None,
            **common,
        )
    return EngineConfig(
        tensor_parallel_size=layout.tp,
        data_parallel_size=layout.dp,
        enable_expert_parallel=layout.ep,
        **common,
        **(installation or {}),
    )


def candidates(
    model: str,
    gpus: list[str],
    tps: list[int],
    quantizations: list[str],
    knob_sets: list[str],
    layouts: list[Layout] | None = None,
    engines: list[str] | None = None,
    calibration: Calibration | None = None,
    installation: dict[str, Any] | None = None,
) -> list[Candidate]:
    """Every engine × GPU × layout × quantization × knob set (``layouts``: the default ones
    of ``tps``, :func:`default_layouts`)."""
    if layouts is None:
        layouts = default_layouts(tps, find_model(model).moe is not None)
    out: list[Candidate] = []
    for engine in check_engines(list(engines or DEFAULT_ENGINES)):
        for gpu in gpus:
            for lay in dict.fromkeys(layouts):
                for q in quantizations:
                    for spec in knob_sets:
                        knobs = parse_knob_set(spec)
                        try:
                            cfg = engine_config(
                                engine, gpu, model, lay, q, knobs, calibration, installation
                            )
                        except ValidationError as exc:
                            raise ConfigError.over_fields(
                                f"{{knob_sets}} {spec!r}: {exc.errors()[0]['msg']}"
                            ) from None
                        out.append(
                            Candidate(
                                gpu=gpu,
                                tensor_parallel_size=lay.tp,
                                data_parallel_size=lay.dp,
                                enable_expert_parallel=lay.ep,
                                quantization=q,
                                knobs=knobs,
                                knob_set=spec.strip() or "default",
                                engine_name=engine,
                                engine=cfg,
                            )
                        )
    return out
