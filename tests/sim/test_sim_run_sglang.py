"""``sim run --engine sglang`` end to end: a dense model and the MoE deployments people run
(DeepSeek-R1 TP8 on H200 with and without DP attention, Qwen3-235B-A22B FP8 TP4 on H100)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servetune.cli import main
from servetune.results.schema import BenchConfig
from servetune.sim.config import EngineConfig
from servetune.sim.offline import simulate

WORKLOAD = BenchConfig(
    num_prompts=200, random_input_len=1024, random_output_len=256, request_rate=16, seed=1
)


def _run(**kw: object) -> tuple[object, dict]:  # type: ignore[type-arg]
    res = simulate(WORKLOAD, EngineConfig(engine="sglang", **kw))  # type: ignore[arg-type]
    info = res.target.simulated
    assert info is not None
    return res, info


@pytest.mark.parametrize(
    "kw",
    [
        {"gpu": "H200", "model": "deepseek-ai/DeepSeek-R1", "tensor_parallel_size": 8},
        {
            "gpu": "H200",
            "model": "deepseek-ai/DeepSeek-R1",
            "tensor_parallel_size": 8,
            "data_parallel_size": 8,
            "enable_dp_attention": True,
        },
        {
            "gpu": "H100-SXM",
            "model": "Qwen/Qwen3-235B-A22B-FP8",
            "quantization": "fp8",
            "tensor_parallel_size": 4,
        },
    ],
    ids=["dsr1-tp8", "dsr1-tp8-dp8-attn", "qwen3-235b-fp8-tp4"],
)
def test_moe_deployments(kw: dict) -> None:  # type: ignore[type-arg]
    res, info = _run(**kw)
    s = res.summary  # type: ignore[attr-defined]
    assert s.completed == 200 and s.failed == 0
    assert info["semantics"] == "sglang-srt"
    mem = info["memory"]
    assert mem["sglang_rules"] == "0.5" and mem["kv_cache_tokens"] > 0
    argv = info["launch_args"]
    assert argv[:3] == ["python", "-m", "sglang.launch_server"]
    assert "--mem-fraction-static" in argv
    if kw.get("enable_dp_attention"):
        assert "--enable-dp-attention" in argv and mem["engine_blocks"] == 8 * mem["num_gpu_blocks"]
    # every request got its planned tokens; token times never run backwards
    assert s.output_throughput > 0 and s.tpot.mean > 0
    assert res.server is not None  # type: ignore[attr-defined]
    assert res.server.summary["engine_version"] == "2025+"  # type: ignore[attr-defined]


def test_dp_attention_holds_more_requests_at_once() -> None:
    """Eight attention replicas keep eight pools: a load that fills the TP8 pool does not
    fill theirs."""
    heavy = BenchConfig(
        num_prompts=300, random_input_len=8000, random_output_len=1000, request_rate=1000, seed=2
    )
    base = {"gpu": "H200", "model": "deepseek-ai/DeepSeek-R1", "tensor_parallel_size": 8}
    tp = simulate(heavy, EngineConfig(engine="sglang", **base))  # type: ignore[arg-type]
    dp = simulate(
        heavy,
        EngineConfig(engine="sglang", data_parallel_size=8, enable_dp_attention=True, **base),  # type: ignore[arg-type]
    )
    tp_tokens = tp.target.simulated["memory"]["kv_cache_tokens"]  # type: ignore[index]
    dp_mem = dp.target.simulated["memory"]  # type: ignore[index]
    assert dp_mem["engine_blocks"] * dp_mem["page_size"] > tp_tokens
    assert dp.summary.completed == tp.summary.completed == 300


def test_sim_run_cli_dense(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r"
    code = main(
        [
            "sim",
            "run",
            "--engine",
            "sglang",
            "--gpu",
            "H100-SXM",
            "--model",
            "Llama-3.1-8B",
            "--mem-fraction-static",
            "0.85",
            "--max-running-requests",
            "64",
            "--chunked-prefill-size",
            "2048",
            "--num-prompts",
            "100",
            "--request-rate",
            "20",
            "--result-dir",
            str(out),
        ]
    )
    assert code == 0
    err = capsys.readouterr().err
    assert "python -m sglang.launch_server" in err and "KV Cache is allocated. #tokens:" in err
    run = json.loads((out / "run.json").read_text())
    sim = run["target"]["simulated"]
    assert sim["mem_fraction_static"] == 0.85 and sim["max_num_seqs"] == 64
    assert sim["chunked_prefill_size"] == 2048
    assert run["server"]["names_found"]["running"] == "sglang:num_running_reqs"
    assert run["summary"]["completed"] == 100
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 100


def test_sglang_flags_need_the_engine(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "plan", "--gpu", "H100-SXM", "--mem-fraction-static", "0.8"]) == 2
    assert "--engine sglang" in capsys.readouterr().err
    assert main(["sim", "plan", "--gpu", "H100-SXM", "--schedule-conservativeness", "0.5"]) == 2
    assert "SGLang's knob" in capsys.readouterr().err
    assert (
        main(
            [
                "sim",
                "plan",
                "--engine",
                "sglang",
                "--gpu",
                "H200",
                "--model",
                "DeepSeek-R1",
                "--tp",
                "8",
                "--dp",
                "8",
            ]
        )
        == 2
    )
    assert "--enable-dp-attention" in capsys.readouterr().err
