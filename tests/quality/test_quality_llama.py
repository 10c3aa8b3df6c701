"""llama.cpp serving one model at F16 and quantized by llama.cpp's own llama-quantize: F16 vs
F16 passes at the noise floor, Q8_0 stays close to it and passes, Q4_K_M is measurably worse
and fails the default thresholds (perplexity +3.4%, top-1 disagreement +16% when written).
The model's weights carry its corpus's bigram statistics (see scripts/make_tiny_model.py), so
quantization error shows in its predictions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from quality_engines import base_url, golden_samples, llama, quantized

from servetune.cli import main
from servetune.engines import provisioned

pytestmark = pytest.mark.real_engine

ARGS = ["--prompts", "6", "--greedy-tokens", "12", "--max-k", "2048", "--concurrency", "4"]


def _quality(base: str, cand: str, model: provisioned.TinyModel, out: Path, *extra: str) -> dict:  # type: ignore[type-arg]
    code = main(
        [
            "quality",
            "--baseline",
            base,
            "--candidate",
            cand,
            "--texts",
            str(model.quality_eval),
            "--out",
            str(out),
            "--json",
            *ARGS,
            *extra,
        ]
    )
    doc: dict = json.loads((out / "quality.json").read_text())  # type: ignore[type-arg]
    assert code == (0 if doc["verdict"] == "pass" else 1)
    return doc


def _metric(doc: dict, name: str) -> dict:  # type: ignore[type-arg]
    return next(m for m in doc["metrics"] if m["name"] == name)


def test_f16_q8_q4(
    quality_model: provisioned.TinyModel,
    llama_bins: tuple[Path, Path],
    engine_logs: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server, quant = llama_bins
    f16 = quantized(quality_model, quant, "F16")
    q8 = quantized(quality_model, quant, "Q8_0")
    q4 = quantized(quality_model, quant, "Q4_K_M")
    assert q4.stat().st_size < q8.stat().st_size < f16.stat().st_size
    with (
        llama(server, f16, engine_logs) as base,
        llama(server, f16, engine_logs) as same,
        llama(server, q8, engine_logs) as eng8,
        llama(server, q4, engine_logs) as eng4,
    ):
        # business samples recorded from the baseline's own greedy answers
        import asyncio

        from servetune.quality.endpoint import Endpoint

        async def answers() -> list[tuple[str, str]]:
            prompts = [
                "The server and the",
                "A model of the cache",
                "Queue batch token",
                "Memory and latency",
            ]
            async with Endpoint(base_url(base), name="baseline") as ep:
                await ep.open()
                return [(p, (await ep.generate(p, 12)).text) for p in prompts]

        samples = golden_samples(tmp_path / "samples.jsonl", asyncio.run(answers()))
        same_doc = _quality(
            base_url(base),
            base_url(same),
            quality_model,
            tmp_path / "same",
            "--samples",
            str(samples),
        )
        q8_doc = _quality(base_url(base), base_url(eng8), quality_model, tmp_path / "q8")
        q4_doc = _quality(
            base_url(base),
            base_url(eng4),
            quality_model,
            tmp_path / "q4",
            "--samples",
            str(samples),
        )
    capsys.readouterr()
    for doc in (same_doc, q8_doc, q4_doc):
        assert doc["baseline"]["logprobs"] == "stepwise"  # llama.cpp ignores echo
        assert not doc["not_run"]
    # F16 vs F16: nothing beyond the floor, every check passes
    assert same_doc["verdict"] == "pass", same_doc["reason"]
    assert _metric(same_doc, "kl")["excess"] == pytest.approx(0.0, abs=1e-6)
    assert _metric(same_doc, "samples")["candidate"] == 0
    # Q8_0: close to the floor; passes
    kl8, kl4 = _metric(q8_doc, "kl")["excess"], _metric(q4_doc, "kl")["excess"]
    ppl8, ppl4 = _metric(q8_doc, "perplexity")["excess"], _metric(q4_doc, "perplexity")["excess"]
    assert q8_doc["verdict"] == "pass", q8_doc["reason"]
    assert kl8 < 0.002 and abs(ppl8) < 0.01
    # Q4_K_M: measurably worse than Q8_0 (its interval clear of zero) and failing the default
    # KL threshold
    assert kl4 > 5 * kl8 and _metric(q4_doc, "kl")["ci95"][0] > 0
    assert ppl4 > max(0.01, 5 * ppl8) and _metric(q4_doc, "perplexity")["ci95"][0] > 0
    assert q4_doc["verdict"] == "fail", q4_doc["reason"]
    assert (
        "fail" in _metric(q4_doc, "top1")["status"]
        or "fail" in _metric(q4_doc, "perplexity")["status"]
    )
    assert _metric(q4_doc, "samples")["texts"] == 5
