"""A real engine that cannot start fails fast, and the error quotes the engine's own reason."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from real_engines import llama_options, vllm_options

from servetune.engines import (
    EngineKnobs,
    EngineOptions,
    build_command,
    free_port,
    launch,
    provisioned,
)
from servetune.errors import EngineError

pytestmark = pytest.mark.real_engine

# vLLM's CPU build imports torch and validates its config before it can refuse: ~15-40 s
# on 2 shared cores. "Fast" means: it did not wait for the 420 s readiness timeout.
VLLM_FAIL_WITHIN_S = 180.0


def fail_to_launch(
    engine: str, model: Path, knobs: EngineKnobs, opts: EngineOptions, log: Path
) -> tuple[EngineError, float]:
    spec = build_command(engine, model, knobs, opts, port=free_port(), served_model_name="tiny")
    t0 = time.monotonic()
    with pytest.raises(EngineError) as info:
        asyncio.run(launch(spec, log, ready_timeout_s=420))
    return info.value, time.monotonic() - t0


def test_vllm_max_model_len_beyond_the_model(
    vllm_python: Path, tiny: provisioned.TinyModel, tmp_path: Path
) -> None:
    err, took = fail_to_launch(
        "vllm-cpu",
        tiny.hf_dir,
        EngineKnobs(max_model_len=4096),
        vllm_options(vllm_python),
        tmp_path / "vllm.log",
    )
    assert took < VLLM_FAIL_WITHIN_S
    assert "max_model_len (4096) is greater than the derived max_model_len" in err.message
    assert "lower max_model_len" in (err.hint or "")


def test_vllm_kv_cache_too_small_for_one_sequence(
    vllm_python: Path, tiny: provisioned.TinyModel, tmp_path: Path
) -> None:
    # 1 MiB of KV holds ~512 tokens of this model; one 2048-token sequence needs 4 MiB.
    opts = vllm_options(vllm_python).model_copy(update={"cpu_kv_cache_gib": 1 / 1024})
    err, took = fail_to_launch(
        "vllm-cpu", tiny.hf_dir, EngineKnobs(max_model_len=2048), opts, tmp_path / "vllm.log"
    )
    assert took < VLLM_FAIL_WITHIN_S
    assert "larger than the available KV cache memory" in err.message
    assert "estimated maximum model length is" in err.message
    assert "max_model_len" in (err.hint or "")


def test_llama_server_unknown_flag(
    llama_server: Path, tiny: provisioned.TinyModel, tmp_path: Path
) -> None:
    opts = llama_options(llama_server).model_copy(update={"extra_args": ["--no-such-flag"]})
    err, took = fail_to_launch("llama.cpp", tiny.gguf, EngineKnobs(), opts, tmp_path / "l.log")
    assert took < 30
    assert "invalid argument: --no-such-flag" in err.message


def test_llama_server_model_it_cannot_load(llama_server: Path, tmp_path: Path) -> None:
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"GGUF but not really")
    err, took = fail_to_launch(
        "llama.cpp", bad, EngineKnobs(), llama_options(llama_server), tmp_path / "l.log"
    )
    assert took < 30
    assert "failed to load model" in err.message or "error loading model" in err.message
