"""The simulated engine's catalogs: GPUs, models and the step-time calibration constants.

All three are JSON files under ``servetune/sim/data`` with a source per entry. Names are
matched case-insensitively against each entry's name and aliases (a Hugging Face id or its last
part for models); an unknown name is a :class:`~servetune.errors.SimError` that suggests the
closest names. A model can also be a local Hugging Face ``config.json`` (or its folder).
"""

from __future__ import annotations

import difflib
import json
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from servetune.errors import SimError


class GpuSpec(BaseModel):
    """One accelerator: memory, peak dense tensor throughput and memory bandwidth."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    aliases: list[str] = Field(default_factory=list)
    memory_gb: float
    usable_gib: float
    """Total device memory as vLLM sees it (what gpu_memory_utilization multiplies)."""
    mem_type: str = ""
    bf16_tflops: float
    fp8_tflops: float | None = None
    hbm_gb_s: float
    interconnect: str = ""
    interconnect_gb_s: float = 32.0
    price_usd_hr: float | None = None
    source: str = ""
    uncertain: list[str] = Field(default_factory=list)


class Efficiency(BaseModel):
    """Calibration constants of the step-time roofline for one GPU."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    mfu: float
    """Achieved share of peak tensor FLOP/s on compute-bound work (prefill)."""
    mbu: float
    """Achieved share of peak memory bandwidth on memory-bound work (decode)."""
    step_overhead_ms: float
    """Fixed time per engine step (scheduling, launch, sampling set-up)."""
    per_seq_overhead_us: float
    """Extra time per request in the step (input preparation, sampling, output processing)."""
    allreduce_latency_us: float = 10.0
    """Fixed time of one tensor-parallel all-reduce (2 per layer per step when TP > 1)."""
    frontend_per_request_ms: float = 0.0
    """Time of the API server's event loop per request (parsing, tokenising, handing it to the
    engine core), serial; tokens wait while it is busy (:mod:`servetune.sim.frontend`)."""
    frontend_chat_per_request_ms: float = 0.0
    """Extra loop time per request of the chat endpoint (the messages, the chat template),
    shared by a burst before any of its requests goes on
    (:class:`servetune.sim.frontend.SharedIntake`)."""
    frontend_per_token_us: float = 0.0
    """Time of the API server's event loop per output token (detokenising, building and
    writing the stream chunk), serial with the intake (:mod:`servetune.sim.frontend`)."""
    frontend_chat_per_token_us: float = 0.0
    """Extra loop time per output token of the chat endpoint (a chat stream chunk is a
    larger object to build and serialise: choices, delta, role)."""
    frontend_latency_ms: float = 0.0
    """Time from a token's sampling to its write to the client (the hop from the engine core
    to the API server, detokenising, HTTP): part of TTFT and E2E, not of the gaps."""
    async_scheduling: bool = False
    """The engine overlaps a step's CPU work with the GPU's (vLLM ``--async-scheduling``,
    default after 0.11.0): a step takes the longer of the two instead of their sum
    (:mod:`servetune.sim.perf`)."""
    source: str = ""


class ModelSpec(BaseModel):
    """A dense decoder-only transformer, as its Hugging Face config.json describes it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    aliases: list[str] = Field(default_factory=list)
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    max_position_embeddings: int
    attention_bias: bool = False
    source: str = ""
    uncertain: list[str] = Field(default_factory=list)

    # --- shapes ---------------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def layer_linear_params(self) -> int:
        """Weights of one layer's matrix multiplications (q, k, v, o and the gated MLP)."""
        h = self.hidden_size
        attn = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        return attn + 3 * h * self.intermediate_size

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def param_count(self) -> int:
        """All parameters: embeddings, lm_head (unless tied), layers, biases and norms."""
        h = self.hidden_size
        per_layer = self.layer_linear_params + 2 * h
        if self.attention_bias:
            per_layer += self.q_dim + 2 * self.kv_dim
        head = 0 if self.tie_word_embeddings else self.embedding_params
        return self.embedding_params + head + self.num_hidden_layers * per_layer + h

    def kv_bytes_per_token(self, dtype_bytes: float, tp: int = 1) -> float:
        """KV cache bytes per token on one GPU (K and V, all layers, this GPU's heads)."""
        heads = max(1, self.num_key_value_heads // tp) if tp > 1 else self.num_key_value_heads
        return 2 * self.num_hidden_layers * heads * self.head_dim * dtype_bytes


class CatalogEntryNotFound(SimError):
    """An unknown GPU or model name."""

    default_code = "sim.catalog"


def _data(name: str) -> Any:
    return json.loads(resources.files("servetune.sim.data").joinpath(name).read_text("utf-8"))


@lru_cache(maxsize=1)
def gpus() -> tuple[GpuSpec, ...]:
    return tuple(GpuSpec.model_validate(g) for g in _data("gpus.json")["gpus"])


@lru_cache(maxsize=1)
def models() -> tuple[ModelSpec, ...]:
    return tuple(ModelSpec.model_validate(m) for m in _data("models.json")["models"])


@lru_cache(maxsize=1)
def _efficiency_table() -> dict[str, Any]:
    data: dict[str, Any] = _data("efficiency.json")
    return data


def efficiency(gpu: GpuSpec) -> Efficiency:
    """The GPU's calibrated constants, or the default set (with its provenance); the host
    constants (the API server's latency) are shared by every GPU."""
    table = _efficiency_table()
    entry = table["gpus"].get(gpu.name) or table["default"]
    host = table.get("host") or {}
    return Efficiency.model_validate({**{k: v for k, v in host.items() if k != "source"}, **entry})


def _norm(s: str) -> str:
    return s.strip().lower().replace("_", "-").replace(" ", "-")


class _Named(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def aliases(self) -> list[str]: ...


E = TypeVar("E", bound=_Named)


def _match(name: str, entries: tuple[E, ...], what: str, flag: str) -> E:
    key = _norm(name)
    for entry in entries:
        names = [entry.name, *entry.aliases]
        if any(_norm(n) == key for n in names):
            return entry
        # a Hugging Face id's last part matches too
        if any(_norm(n).split("/")[-1] == key for n in names):
            return entry
    known = [x.name for x in entries]
    pool = {_norm(n): x.name for x in entries for n in [x.name, *x.aliases]}
    close = difflib.get_close_matches(key, list(pool), n=3, cutoff=0.5)
    suggestions = list(dict.fromkeys(pool[c] for c in close))
    hint = (
        f"did you mean {', '.join(suggestions)}? " if suggestions else ""
    ) + f"known: {', '.join(known)} (servetune sim {what}s)"
    raise CatalogEntryNotFound(f"unknown {what} {name!r} for {flag}", hint=hint)


def find_gpu(name: str) -> GpuSpec:
    return _match(name, gpus(), "gpu", "--gpu")


def gpu_alias_note(name: str) -> str | None:
    """A line for the user when ``--gpu NAME`` is not a GPU's own name but picks one by alias
    (``a100`` is the A100-80GB), naming the other GPUs of the catalog it could have meant;
    None for a GPU's own name (any case) or an unknown one (an error elsewhere)."""
    try:
        gpu = find_gpu(name)
    except CatalogEntryNotFound:
        return None
    key = _norm(name)
    if re.sub(r"[^a-z0-9]", "", key) == re.sub(r"[^a-z0-9]", "", _norm(gpu.name)):
        return None  # its own name, spelled with other separators
    also = [
        g.name
        for g in gpus()
        if g.name != gpu.name
        and any(_norm(n) == key or _norm(n).startswith(key + "-") for n in [g.name, *g.aliases])
    ]
    return f"--gpu {name} is taken as {gpu.name}" + (
        f" (the catalog also has {', '.join(also)}: name it to use that one)" if also else ""
    )


def model_from_hf_config(path: str | Path) -> ModelSpec:
    """A ModelSpec from a local Hugging Face ``config.json`` (or the folder holding it)."""
    p = Path(path).expanduser()
    file = p / "config.json" if p.is_dir() else p
    try:
        cfg = json.loads(file.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SimError(
            f"cannot read model config {file}: {exc}",
            hint="give a Hugging Face config.json (or its folder) or a catalog name",
        ) from exc
    if not isinstance(cfg, dict):  # a JSON array or a bare value: no field to read
        raise SimError(
            f"{file} is not a model config: expected a JSON object of fields, found "
            f"{type(cfg).__name__}",
            hint="give a Hugging Face config.json (or its folder) or a catalog name",
        )
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    try:
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        spec = ModelSpec(
            name=str(cfg.get("_name_or_path") or p.parent.name if p.is_file() else p.name),
            num_hidden_layers=int(cfg["num_hidden_layers"]),
            hidden_size=hidden,
            num_attention_heads=heads,
            num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            intermediate_size=int(cfg["intermediate_size"]),
            vocab_size=int(cfg["vocab_size"]),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            max_position_embeddings=int(cfg.get("max_position_embeddings") or 4096),
            attention_bias=bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2")),
            source=str(file),
        )
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise SimError(
            f"{file} lacks a field the simulator needs: {exc}",
            hint="the simulator models dense decoder-only transformers (Llama/Qwen/Mistral "
            "style: num_hidden_layers, hidden_size, num_attention_heads, intermediate_size, "
            "vocab_size)",
        ) from exc
    if cfg.get("num_local_experts") or cfg.get("num_experts"):
        raise SimError(
            f"{file} describes a mixture-of-experts model, which the simulator does not model",
            hint="use a dense model from `servetune sim models`",
        )
    return spec


def find_model(name: str) -> ModelSpec:
    """A catalog model by name or alias, or a local config.json path."""
    p = Path(name).expanduser()
    if name.endswith(".json") or (p.is_dir() and (p / "config.json").is_file()):
        return model_from_hf_config(p)
    return _match(name, models(), "model", "--model")
