"""Scenarios on the simulated engine (offline, virtual clock) that reproduce each rule's
condition for real, and the helpers the diagnose tests share.

Every scenario is Qwen2.5-7B-Instruct on one A100-80GB unless it says otherwise; the numbers
in the comments are what the simulator gives (they are asserted loosely, by the rule's own
thresholds, in the tests)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servetune.results.schema import BenchConfig, RunResult
from servetune.sim.config import EngineConfig
from servetune.sim.offline import run_offline

SEED_KNOBS: dict[str, Any] = {
    "max_model_len": 32768,
    "gpu_memory_utilization": 0.9,
    "max_num_seqs": 256,
    "max_num_batched_tokens": 8192,
}
"""The seed's baseline (its production procedure, step 1)."""


@dataclass(frozen=True)
class Scenario:
    bench: dict[str, Any]
    engine: dict[str, Any] = field(default_factory=dict)
    doc: str = ""

    def bench_config(self, data_dir: Path) -> BenchConfig:
        b = dict(self.bench)
        if b.get("dataset_path") == "MIXED":
            b["dataset_path"] = str(mixed_prompts(data_dir))
        return BenchConfig(**b)

    def engine_config(self, **change: Any) -> EngineConfig:
        return EngineConfig(**{**self.engine, **change})


SCENARIOS: dict[str, Scenario] = {
    # 2 req/s of 1024/128 on the seed's config: KV ≈ 0.4%, compute ≈ 9% of peak, no queue.
    "under_loaded": Scenario(
        {
            "num_prompts": 150,
            "request_rate": 2.0,
            "random_input_len": 1024,
            "random_output_len": 128,
        },
        SEED_KNOBS,
        "an under-loaded server",
    ),
    # 8 req/s of 1024/128: below saturation (~10.4 req/s), compute ≈ 40% of peak.
    "healthy": Scenario(
        {
            "num_prompts": 300,
            "request_rate": 8.0,
            "random_input_len": 1024,
            "random_output_len": 128,
        },
        SEED_KNOBS,
        "a server near but below its knee",
    ),
    # A small pool (gpu-memory-utilization 0.312: 168k tokens) for 4 req/s of ~2.5k-token
    # requests: KV > 90% for most of the run, preemptions climb.
    "kv_pool_full": Scenario(
        {
            "num_prompts": 250,
            "request_rate": 4.0,
            "random_input_len": 2048,
            "random_output_len": 512,
            "random_range_ratio": 0.5,
        },
        {"max_model_len": 8192, "gpu_memory_utilization": 0.312},
        "a KV pool too small for the load",
    ),
    # 10% of 12,000-token prompts among 200-token ones, chunked prefill off.
    "prefill_blocked": Scenario(
        {"num_prompts": 150, "request_rate": 2.0, "dataset_name": "jsonl", "dataset_path": "MIXED"},
        {"max_model_len": 16384, "max_num_batched_tokens": 16384, "enable_chunked_prefill": False},
        "long prompts mixed with short ones without chunked prefill",
    ),
    # The same traffic with chunked prefill on (2048-token steps): streams keep moving, but
    # short prompts wait behind a long prompt's chunks.
    "short_prompts_wait": Scenario(
        {"num_prompts": 150, "request_rate": 2.0, "dataset_name": "jsonl", "dataset_path": "MIXED"},
        {"max_model_len": 16384, "max_num_batched_tokens": 2048, "enable_chunked_prefill": True},
        "short prompts behind long chunked prefills",
    ),
    # Decode-heavy traffic against --max-num-seqs 16: the cap binds, KV and compute idle.
    "batch_capped": Scenario(
        {
            "num_prompts": 250,
            "request_rate": 4.0,
            "random_input_len": 256,
            "random_output_len": 512,
        },
        {"max_model_len": 4096, "max_num_seqs": 16},
        "a batch cap far below what the GPU can carry",
    ),
    # 14 req/s of 1024/128 where the server saturates at ~10.4 req/s (compute-bound).
    "overloaded": Scenario(
        {
            "num_prompts": 300,
            "request_rate": 14.0,
            "random_input_len": 1024,
            "random_output_len": 128,
        },
        SEED_KNOBS,
        "a rate past the knee",
    ),
    # A closed loop that keeps the pool at ~95% without running out of blocks.
    "kv_near_full": Scenario(
        {
            "num_prompts": 400,
            "max_concurrency": 65,
            "random_input_len": 2400,
            "random_output_len": 100,
        },
        {"max_model_len": 8192, "gpu_memory_utilization": 0.312},
        "a KV pool at its edge",
    ),
    # fp8 KV on the kv_pool_full traffic: healthy, quantized.
    "quantized": Scenario(
        {
            "num_prompts": 250,
            "request_rate": 4.0,
            "random_input_len": 2048,
            "random_output_len": 512,
            "random_range_ratio": 0.5,
        },
        {"max_model_len": 8192, "gpu_memory_utilization": 0.312, "kv_cache_dtype": "fp8"},
        "a quantized KV cache",
    ),
    # Issue 11 item 7: prompts from 80 to 16k tokens (uniform), chunked prefill off, below
    # capacity (~0.6 of ~1 req/s): P50 TPOT 27 ms, P99 230 ms; P99 ITL 0.79 s, longest ~1.4 s.
    "decode_stalls": Scenario(
        {
            "num_prompts": 150,
            "request_rate": 0.7,
            "random_input_len": 8040,
            "random_output_len": 256,
            "random_range_ratio": 0.99,
        },
        {"max_model_len": 16640, "max_num_batched_tokens": 16640, "enable_chunked_prefill": False},
        "long prefills stalling running decodes, chunked prefill off",
    ),
    # The same traffic on V1 with chunked prefill on but a 16k-token step budget: a long
    # prompt still runs as one step.
    "chunk_stalls": Scenario(
        {
            "num_prompts": 150,
            "request_rate": 0.7,
            "random_input_len": 8040,
            "random_output_len": 256,
            "random_range_ratio": 0.99,
        },
        {"max_model_len": 16640, "max_num_batched_tokens": 16384, "enable_chunked_prefill": True},
        "prefill chunks as big as the prompts",
    ),
    # Everything at once (rate inf): a throughput test.
    "burst": Scenario(
        {"num_prompts": 200, "random_input_len": 512, "random_output_len": 64},
        SEED_KNOBS,
        "all requests at once",
    ),
}


def mixed_prompts(data_dir: Path) -> Path:
    """A JSONL dataset: 1 prompt in 10 of 12,000 tokens, the others of 200 (approximate
    tokenizer: one word, one token)."""
    path = data_dir / "mixed_prompts.jsonl"
    if not path.exists():
        lines = []
        for i in range(100):
            n = 12000 if i % 10 == 0 else 200
            lines.append(json.dumps({"prompt": " ".join(["the"] * n), "output_len": 128}))
        path.write_text("\n".join(lines) + "\n")
    return path


def run_scenario(
    name: str, out: Path, data_dir: Path, bench: dict[str, Any] | None = None, **engine: Any
) -> RunResult:
    """Run scenario NAME (optionally with bench or engine knobs changed) into OUT."""
    sc = SCENARIOS[name]
    cfg = sc.bench_config(data_dir)
    if bench:
        cfg = cfg.model_copy(update=bench)
    return run_offline(cfg, sc.engine_config(**engine), out)
