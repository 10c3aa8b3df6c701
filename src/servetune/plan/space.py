"""The candidate deployments: GPU type × tensor-parallel size × quantization × knob set.

Each candidate is one replica's engine configuration (vLLM's names; unset = vLLM's default
for that GPU); the planner decides how many replicas. Quantization names: ``auto`` (the
model's own dtype, bf16/fp16), ``fp8`` (vLLM quantizes the weights to FP8 at load), ``awq``
and ``gptq`` (int4: a pre-quantized checkpoint of the model). Knob sets are ``default`` or
``key=value,…`` over EngineConfig's fields (``max_num_seqs=64``,
``max_num_batched_tokens=8192``, ``kv_cache_dtype=fp8``, …). Two candidates that resolve to the
same configuration (a knob set equal to the GPU's default) are planned once.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from servetune.errors import ConfigError
from servetune.sim.config import EngineConfig

QUANTIZATIONS = {"auto": None, "fp8": "fp8", "awq": "awq", "gptq": "gptq"}
DEFAULT_GPUS = ("A100-80GB", "H100-SXM", "L40S", "L4")
DEFAULT_TP = (1, 2, 4)
DEFAULT_QUANTIZATIONS = ("auto", "fp8", "awq")
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


class Candidate(BaseModel):
    gpu: str
    tensor_parallel_size: int
    quantization: str
    """auto / fp8 / awq / gptq."""
    knobs: dict[str, Any]
    knob_set: str
    engine: EngineConfig

    @property
    def label(self) -> str:
        return f"{self.gpu} tp{self.tensor_parallel_size} {self.quantization} {self.knob_set}"


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
            raise ConfigError(
                f"--knob-set {spec!r}: {item.strip()!r} is not KNOB=VALUE with a known knob",
                hint=f"knobs: {', '.join(_KNOB_KEYS)}; e.g. --knob-set max_num_seqs=64",
            )
        conv = _KNOB_KEYS[key]
        try:
            out[key] = _bool(value) if conv is bool else conv(value.strip())
        except ValueError:
            raise ConfigError(
                f"--knob-set {spec!r}: {value.strip()!r} is not a valid {key}"
            ) from None
    return out


def parse_quantizations(items: list[str]) -> list[str]:
    out = []
    for q in items:
        q = q.strip().lower()
        if q in ("none", "bf16", "fp16", "default"):
            q = "auto"
        if q not in QUANTIZATIONS:
            raise ConfigError(
                f"unknown quantization {q!r}", hint=f"use some of: {', '.join(QUANTIZATIONS)}"
            )
        out.append(q)
    return list(dict.fromkeys(out))


def candidates(
    model: str,
    gpus: list[str],
    tps: list[int],
    quantizations: list[str],
    knob_sets: list[str],
) -> list[Candidate]:
    out: list[Candidate] = []
    for gpu in gpus:
        for tp in tps:
            for q in quantizations:
                for spec in knob_sets:
                    knobs = parse_knob_set(spec)
                    try:
                        engine = EngineConfig(
                            gpu=gpu,
                            model=model,
                            tensor_parallel_size=tp,
                            quantization=QUANTIZATIONS[q],  # type: ignore[arg-type]
                            **knobs,
                        )
                    except ValidationError as exc:
                        raise ConfigError(
                            f"--knob-set {spec!r}: {exc.errors()[0]['msg']}"
                        ) from None
                    out.append(
                        Candidate(
                            gpu=gpu,
                            tensor_parallel_size=tp,
                            quantization=q,
                            knobs=knobs,
                            knob_set=spec.strip() or "default",
                            engine=engine,
                        )
                    )
    return out
