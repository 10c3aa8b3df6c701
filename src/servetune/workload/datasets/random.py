"""The ``random`` dataset: prompts of random tokens with exact lengths (vLLM's semantics)."""

from __future__ import annotations

import numpy as np

from servetune.results.schema import BenchConfig
from servetune.workload.random_prompts import exact_prompt, sample_lengths
from servetune.workload.spec import RequestSpec
from servetune.workload.tokens import TokenCounter


def random_requests(cfg: BenchConfig, tok: TokenCounter, n: int) -> list[RequestSpec]:
    rng = np.random.default_rng(cfg.seed)
    ins = sample_lengths(cfg.random_input_len, cfg.random_range_ratio, n, rng)
    outs = sample_lengths(cfg.random_output_len, cfg.random_range_ratio, n, rng)
    specs = []
    for i in range(n):
        text, count = exact_prompt(tok, int(ins[i]), rng)
        specs.append(RequestSpec(prompt=text, input_len=count, output_len=int(outs[i])))
    return specs
