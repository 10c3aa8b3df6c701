"""Datasets: turn a BenchConfig into the list of requests of a run."""

from __future__ import annotations

from servetune.errors import ConfigError
from servetune.results.schema import BenchConfig
from servetune.workload.spec import RequestSpec
from servetune.workload.tokens import TokenCounter

__all__ = ["build_dataset"]


def build_dataset(cfg: BenchConfig, tok: TokenCounter, n: int) -> list[RequestSpec]:
    """``n`` requests of the configured dataset, reproducible from ``cfg.seed``."""
    if cfg.dataset_name == "random":
        from servetune.workload.datasets.random import random_requests

        return random_requests(cfg, tok, n)
    if cfg.dataset_name == "prefix":
        from servetune.workload.datasets.prefix import prefix_requests

        return prefix_requests(cfg, tok, n)
    if cfg.dataset_path is None:
        raise ConfigError(  # BenchConfig refuses it; a copy made with model_copy does not
            f"dataset_name {cfg.dataset_name} needs a dataset_path",
            hint="give the file, or use the random dataset",
        )
    if cfg.dataset_name == "sharegpt":
        from servetune.workload.datasets.sharegpt import sharegpt_requests

        return sharegpt_requests(cfg, tok, n)
    from servetune.workload.datasets.jsonl import jsonl_requests

    return jsonl_requests(cfg, tok, n)
