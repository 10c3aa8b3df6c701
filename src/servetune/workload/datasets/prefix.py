"""The ``prefix`` dataset: G groups whose prompts share a P-token prefix, then a unique suffix.

Models a shared system prompt or few-shot header: a server with prefix caching computes each
group's prefix once. Prompt = group prefix (``--prefix-len``) + unique suffix
(``--random-input-len`` tokens); requests are spread over ``--prefix-num-groups`` groups.
"""

from __future__ import annotations

import numpy as np

from servetune.errors import ConfigError
from servetune.results.schema import BenchConfig
from servetune.workload.random_prompts import exact_prompt, sample_lengths
from servetune.workload.spec import RequestSpec
from servetune.workload.tokens import TokenCounter


def prefix_requests(cfg: BenchConfig, tok: TokenCounter, n: int) -> list[RequestSpec]:
    if cfg.prefix_num_groups < 1 or cfg.prefix_len < 1:
        raise ConfigError.over_fields(
            "{prefix_num_groups} and {prefix_len} must be at least 1 for the prefix dataset "
            f"(got {cfg.prefix_num_groups} and {cfg.prefix_len})",
            hint="e.g. {prefix_num_groups}=8 {prefix_len}=512",
        )
    rng = np.random.default_rng(cfg.seed)
    prefixes = [exact_prompt(tok, cfg.prefix_len, rng) for _ in range(cfg.prefix_num_groups)]
    groups = rng.integers(0, cfg.prefix_num_groups, size=n)
    ins = sample_lengths(cfg.random_input_len, cfg.random_range_ratio, n, rng)
    outs = sample_lengths(cfg.random_output_len, cfg.random_range_ratio, n, rng)
    specs = []
    for i in range(n):
        g = int(groups[i])
        head, _ = prefixes[g]
        tail, _ = exact_prompt(tok, int(ins[i]), rng)
        text = f"{head} {tail}"
        specs.append(
            RequestSpec(prompt=text, input_len=tok.count(text), output_len=int(outs[i]), group=g)
        )
    return specs
