"""Planning a mixture-of-experts model: layouts (TP, TP + EP, DP attention + EP) × GPU types
× precision, priced by the GPUs a replica takes, the served id as asked, and the note that
says why the winning layout won."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servetune.cli import main
from servetune.errors import ConfigError
from servetune.plan.layouts import layout_notes
from servetune.plan.pricing import set_replicas
from servetune.plan.request import PlanRequest
from servetune.plan.space import (
    Layout,
    candidates,
    check_engines,
    default_layouts,
    parse_layout,
)
from servetune.plan.workload import synthetic
from servetune.results.plan_file import PlannedCandidate, PlannedPoint, PlanResult
from servetune.results.schema import Slo


@pytest.mark.parametrize(
    ("spec", "tp", "dp", "ep", "name"),
    [
        ("tp8", 8, 1, False, "tp8"),
        ("tp8-ep", 8, 1, True, "tp8-ep"),
        ("dp8-ep", 1, 8, True, "dp8-ep"),
        ("tp4-dp2-ep", 4, 2, True, "tp4-dp2-ep"),
        ("tp2+dp2", 2, 2, False, "tp2-dp2"),
        ("tp1", 1, 1, False, "tp1"),
    ],
)
def test_layouts_are_read(spec: str, tp: int, dp: int, ep: bool, name: str) -> None:
    lay = parse_layout(spec)
    assert (lay.tp, lay.dp, lay.ep, lay.name, lay.gpus) == (tp, dp, ep, name, tp * dp)


@pytest.mark.parametrize("bad", ["ep", "8", "tp", "tpx", "dp0-ep", "tp8-pp2"])
def test_a_bad_layout_is_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"layout|≥ 1"):
        parse_layout(bad)


def test_default_layouts_add_expert_and_data_parallel_for_moe_only() -> None:
    assert [x.name for x in default_layouts([1, 2], moe=False)] == ["tp1", "tp2"]
    got = [x.name for x in default_layouts([1, 8], moe=True)]
    assert got == ["tp1", "tp8", "tp8-ep", "dp8-ep"]


def test_candidates_carry_the_layout_into_the_engine() -> None:
    cands = candidates(
        "deepseek-ai/DeepSeek-R1", ["H200"], [8], ["auto"], ["default"], None, ["vllm"]
    )
    assert [c.label for c in cands] == [
        "H200 tp8 auto default",
        "H200 tp8-ep auto default",
        "H200 dp8-ep auto default",
    ]
    dp = cands[2]
    assert dp.gpus_per_replica == 8
    assert dp.engine.data_parallel_size == 8 and dp.engine.enable_expert_parallel
    assert dp.engine.tensor_parallel_size == 1
    line = dp.engine.vllm_args()
    assert line[0] == "deepseek-ai/DeepSeek-R1"  # the alias's id, served as asked
    assert "--data-parallel-size" in line and "--enable-expert-parallel" in line


def test_an_engine_the_simulator_lacks_is_refused() -> None:
    assert check_engines(["vllm", "VLLM", "sglang"]) == ["vllm", "sglang"]
    with pytest.raises(ConfigError, match="does not simulate engine 'trtllm'") as e:
        check_engines(["trtllm"])
    assert "vllm, sglang" in (e.value.hint or "")


def test_sglang_candidates_spell_the_layout_as_sglang_does() -> None:
    """SGLang's --tp counts every GPU of the engine: vLLM's dp8-ep is --tp 8 --dp 8
    --enable-dp-attention --ep-size 8 there, and each row says which engine it is."""
    cands = candidates(
        "deepseek-ai/DeepSeek-R1",
        ["H200"],
        [8],
        ["auto"],
        ["default"],
        engines=["vllm", "sglang"],
    )
    by_label = {c.label: c for c in cands}
    assert len(by_label) == 6
    tp8 = by_label["sglang H200 tp8 auto default"].engine
    assert (tp8.tensor_parallel_size, tp8.data_parallel_size, tp8.enable_dp_attention) == (
        8,
        1,
        False,
    )
    dp = by_label["sglang H200 dp8-ep auto default"]
    assert dp.engine_name == "sglang" and dp.gpus_per_replica == 8
    e = dp.engine
    assert (e.tensor_parallel_size, e.data_parallel_size, e.enable_dp_attention) == (8, 8, True)
    assert e.expert_parallel_size == 8
    line = e.launch_command()
    assert line[:3] == ["python", "-m", "sglang.launch_server"]
    assert "--enable-dp-attention" in line and line[line.index("--tp-size") + 1] == "8"
    r = e.resolve()
    assert r.parallelism.attn_dp == 8 and r.expert_parallel_size == 8


def test_a_dense_models_data_parallel_layout_is_refused_on_sglang() -> None:
    with pytest.raises(ConfigError, match="independent copies") as e:
        candidates(
            "Qwen/Qwen2.5-7B-Instruct",
            ["H100-SXM"],
            [2],
            ["auto"],
            ["default"],
            layouts=[parse_layout("tp1-dp2")],
            engines=["sglang"],
        )
    assert "replicas of tp1" in (e.value.hint or "")


def test_sglang_rows_are_planned_with_their_own_launch_line(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    rc = main(
        [
            "plan",
            "--model",
            "Qwen/Qwen2.5-7B-Instruct",
            "--gpus",
            "L4",
            "--tp",
            "1",
            "--quantizations",
            "auto",
            "--knob-set",
            "default",
            "--engines",
            "vllm,sglang",
            "--peak-rate",
            "2",
            "--slo",
            "ttft:3000",
            "tpot:200",
            "--requests-per-point",
            "100",
            "--top",
            "2",
            "--no-progress",
            "--json",
            "-o",
            str(out),
        ]
    )
    assert rc == 0
    rows = json.loads(out.read_text())["candidates"]
    lines = {r["engine"]: r["vllm_serve"] for r in rows}
    assert lines["vllm"].startswith("vllm serve Qwen/Qwen2.5-7B-Instruct")
    assert lines["sglang"].startswith("python -m sglang.launch_server --model-path Qwen/")


def _row(label: str, tp: int, dp: int, ep: bool, **kw: object) -> PlannedCandidate:
    base: dict[str, object] = dict(
        label=label,
        gpu="H200",
        tensor_parallel_size=tp,
        data_parallel_size=dp,
        enable_expert_parallel=ep,
        quantization="auto",
        knob_set="default",
        status="ok",
        usd_per_gpu_hour=3.0,
    )
    base.update(kw)
    return PlannedCandidate.model_validate(base)


def test_replicas_and_dollars_count_every_gpu_of_a_replica() -> None:
    req = PlanRequest(
        model="deepseek-ai/DeepSeek-R1",
        peak_rate=10,
        slo=Slo(ttft=2000),
        candidates=[],
        workload=synthetic(256, 64, 0.0, 100, 0, 1.0),
    )
    c = _row("H200 dp8-ep auto default", 1, 8, True, slo_max_rate_per_replica=4.0)
    set_replicas(c, req, 3, req.workload)
    assert c.gpus_per_replica == 8 and c.gpus_total == 24
    assert c.usd_per_hour == pytest.approx(24 * 3.0)
    assert c.headroom == pytest.approx(3 * 4.0 / 10 - 1)


def _sat(rate: float, tpot: float) -> PlannedPoint:
    return PlannedPoint(
        rate=None, request_throughput=rate, input_tok_s=0, output_tok_s=0, tpot_p50_ms=tpot
    )


def _at(kv: float) -> PlannedPoint:
    return PlannedPoint(
        rate=1, request_throughput=1, input_tok_s=0, output_tok_s=0, kv_cache_usage_mean=kv
    )


def _plan(rows: list[PlannedCandidate]) -> PlanResult:
    return PlanResult(
        created_at="now",
        model="deepseek-ai/DeepSeek-R1",
        peak_rate=10,
        average_rate=10,
        slo=Slo(ttft=2000),
        workload="w",
        mean_input_tokens=1,
        mean_output_tokens=1,
        requests_per_point=100,
        pricing="on-demand",
        r=4,
        formula="f",
        candidates=rows,
    )


def test_the_note_names_the_kv_pool_when_it_held_the_other_back() -> None:
    common = dict(replicas=3, gpus_total=24, usd_per_hour=72.0, limiting_metric="ttft")
    dp = _row(
        "H200 dp8-ep auto default",
        1,
        8,
        True,
        slo_max_rate_per_replica=4.0,
        engine_kv_tokens=8_000_000,
        saturation=_sat(5.0, 40),
        at_slo=_at(0.3),
        **common,
    )
    tp = _row(
        "H200 tp8 auto default",
        8,
        1,
        False,
        slo_max_rate_per_replica=1.5,
        engine_kv_tokens=1_000_000,
        saturation=_sat(2.0, 40),
        at_slo=_at(0.9),
        **{**common, "replicas": 7, "gpus_total": 56, "usd_per_hour": 168.0},
    )
    notes = layout_notes(_plan([dp, tp]), dp)
    assert "why dp8-ep on H200" in notes[0]
    assert "each GPU holds 0.5 req/s at the SLO against 0.188" in notes[0]
    assert "8.0x the KV pool per GPU (MLA keeps one latent per token" in notes[0]


def test_the_note_does_not_blame_a_kv_pool_that_was_not_full() -> None:
    common = dict(replicas=3, gpus_total=24, usd_per_hour=72.0, limiting_metric="overload")
    dp = _row(
        "H200 dp8-ep auto default",
        1,
        8,
        True,
        slo_max_rate_per_replica=4.0,
        engine_kv_tokens=8_000_000,
        saturation=_sat(5.0, 30),
        at_slo=_at(0.05),
        **common,
    )
    tp = _row(
        "H200 tp8 auto default",
        8,
        1,
        False,
        slo_max_rate_per_replica=3.0,
        engine_kv_tokens=1_000_000,
        saturation=_sat(3.5, 40),
        at_slo=_at(0.04),
        **{**common, "replicas": 4, "gpus_total": 32, "usd_per_hour": 96.0},
    )
    text = layout_notes(_plan([dp, tp]), dp)[0]
    assert "KV pool per GPU" not in text
    assert "saturated 0.625 vs 0.438 req/s per GPU: data-parallel attention" in text


def test_a_moe_plan_across_gpus_says_which_layout_won_and_why(tmp_path: Path) -> None:
    """DeepSeek-R1 (FP8) on one node: H100 cannot hold its weights in any layout (said with
    vLLM's words), the others are planned in three layouts each; the winner's note compares
    it with the other layouts of its GPU and names the best row of every other GPU."""
    out = tmp_path / "plan.json"
    argv = [
        "plan",
        "--json",
        "-o",
        str(out),
        "--workers",
        "1",
        "--model",
        "deepseek-ai/DeepSeek-R1",
        "--gpus",
        "H100,H200",
        "--tp",
        "8",
        "--knob-set",
        "max_model_len=8192",
        "--input-len",
        "512",
        "--output-len",
        "128",
        "--peak-rate",
        "6",
        "--slo",
        "ttft:3000",
        "tpot:100",
        "--requests-per-point",
        "100",
        "--top",
        "3",
    ]
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    rows = {c["label"]: c for c in doc["candidates"]}
    assert {c["status"] for c in rows.values() if c["gpu"] == "H100-SXM"} == {"cannot_start"}
    assert (
        "CUDA out of memory while loading the model"
        in rows["H100-SXM tp8 auto max_model_len=8192"]["reason"]
    )
    w = doc["winner"]
    assert w["gpu"] == "H200" and w["gpus_total"] == w["replicas"] * 8
    assert w["vllm_serve"].startswith("vllm serve deepseek-ai/DeepSeek-R1 ")
    assert any(n.startswith("why ") and "Against" in n for n in w["notes"])
    assert any("H100-SXM: none holds it (CUDA out of memory" in n for n in w["notes"])
    assert (
        Layout(
            tp=w["tensor_parallel_size"], dp=w["data_parallel_size"], ep=w["enable_expert_parallel"]
        ).gpus
        == 8
    )
