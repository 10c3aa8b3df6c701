"""vLLM's CPU build serving the quality model in float32 (baseline) and bfloat16 (candidate):
prompt logprobs through echo, the bfloat16 loss measured beyond the float32 noise floor."""

from __future__ import annotations

import contextlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from quality_engines import base_url, vllm

from servetune.cli import main
from servetune.engines import provisioned

pytestmark = pytest.mark.real_engine


def test_float32_vs_bfloat16(
    quality_model: provisioned.TinyModel,
    vllm_python: Path,
    engine_logs: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(2) as pool:
        # both start at once (~30 s each on 2 cores); the stack stops whichever started
        starting = [
            pool.submit(stack.enter_context, vllm(vllm_python, quality_model, dt, engine_logs))
            for dt in ("float32", "bfloat16")
        ]
        fp32, bf16 = (f.result() for f in starting)
        code = main(
            [
                "quality",
                "--baseline",
                base_url(fp32),
                "--candidate",
                base_url(bf16),
                "--texts",
                str(quality_model.quality_eval),
                "--prompts",
                "6",
                "--greedy-tokens",
                "12",
                "--out",
                str(tmp_path),
                "--json",
            ]
        )
    doc = json.loads(capsys.readouterr().out)
    assert code == (0 if doc["verdict"] == "pass" else 1)
    assert doc["baseline"]["logprobs"] == "echo" and doc["candidate"]["logprobs"] == "echo"
    assert not doc["not_run"]
    m = {x["name"]: x for x in doc["metrics"]}
    # float32 against itself: (close to) nothing; bfloat16's rounding: measurable, small
    assert abs(m["kl"]["floor"]) < 1e-4
    assert m["kl"]["candidate"] > m["kl"]["floor"]
    assert m["kl"]["excess"] < 0.05 and abs(m["perplexity"]["excess"]) < 0.05
    ppl = doc["perplexity"]
    assert ppl["baseline"] < 1500  # the model predicts its corpus (uniform would be 2048)
