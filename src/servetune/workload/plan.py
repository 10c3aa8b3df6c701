"""The plan of a run: every request and its scheduled send time, fixed before the start."""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict

from servetune.errors import ConfigError
from servetune.results.schema import BenchConfig
from servetune.workload.arrivals import arrival_offsets, count_for_duration
from servetune.workload.datasets import build_dataset
from servetune.workload.spec import RequestSpec
from servetune.workload.tokens import TokenCounter

DEFAULT_NUM_PROMPTS = 1000
_CLOSED_LOOP_DURATION_PROMPTS = 200_000


class Plan(BaseModel):
    """Requests in send order with their offsets (ns from the run's start)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    requests: list[RequestSpec]
    offsets_ns: list[int]
    duration_ns: int | None = None
    """Stop sending at this offset (``--duration``)."""
    planned_rate: float | None = None
    """The realized rate of the plan: (n − 1) / span of offsets; None when unbounded."""

    def __len__(self) -> int:
        return len(self.offsets_ns)


def validate_config(cfg: BenchConfig) -> None:
    """Reject impossible knob values before anything is generated."""
    if not cfg.request_rate > 0:
        raise ConfigError(
            f"--request-rate must be > 0 (got {cfg.request_rate:g})",
            hint="use a positive rate, or 'inf' (optionally with --max-concurrency N)",
        )
    if cfg.max_concurrency is not None and cfg.max_concurrency < 1:
        raise ConfigError(
            f"--max-concurrency must be ≥ 1 (got {cfg.max_concurrency})",
            hint="e.g. --max-concurrency 32, or leave it out for no cap",
        )
    if cfg.num_prompts < 1:
        raise ConfigError(
            f"--num-prompts must be ≥ 1 (got {cfg.num_prompts})", hint="e.g. --num-prompts 1000"
        )
    if cfg.duration_s is not None and not cfg.duration_s > 0:
        raise ConfigError(
            f"--duration must be > 0 seconds (got {cfg.duration_s})", hint="e.g. --duration 60"
        )
    if cfg.random_input_len < 1 or cfg.random_output_len < 1:
        raise ConfigError(
            "--random-input-len and --random-output-len must be ≥ 1 "
            f"(got {cfg.random_input_len} and {cfg.random_output_len})",
            hint="e.g. --random-input-len 1024 --random-output-len 128",
        )
    if not 0 <= cfg.random_range_ratio < 1:
        raise ConfigError(
            f"--random-range-ratio must be in [0, 1) (got {cfg.random_range_ratio})",
            hint="e.g. --random-range-ratio 0.5 (lengths L·0.5 to L·1.5), 0 for fixed lengths",
        )
    if not cfg.burstiness > 0:
        raise ConfigError(
            f"--burstiness must be > 0 (got {cfg.burstiness})",
            hint="e.g. --burstiness 0.5 (burstier than Poisson), 1 for Poisson arrivals",
        )
    if cfg.warmup_s < 0 or cfg.cooldown_s < 0:
        raise ConfigError(
            f"--warmup and --cooldown must be ≥ 0 seconds (got {cfg.warmup_s:g} and "
            f"{cfg.cooldown_s:g})",
            hint="e.g. --warmup 10 --cooldown 10, or 0 to measure the whole run",
        )
    if cfg.dataset_path is not None and cfg.dataset_name in ("random", "prefix"):
        # it was read by nobody: the run would send synthetic prompts the user did not ask for
        raise ConfigError(
            f"--dataset-path {cfg.dataset_path} is not read by --dataset-name "
            f"{cfg.dataset_name} (synthetic prompts)",
            hint="add --dataset-name jsonl or sharegpt to send the file's prompts, or drop "
            "--dataset-path",
        )
    if cfg.duration_s is not None and cfg.warmup_s + cfg.cooldown_s >= cfg.duration_s:
        # the summary's window would be empty: a run that measures nothing, exit 0
        raise ConfigError(
            f"--warmup {cfg.warmup_s:g} s + --cooldown {cfg.cooldown_s:g} s leave nothing of "
            f"--duration {cfg.duration_s:g} s to measure",
            hint="shorten the warm-up / cool-down, or lengthen --duration",
        )


def plan_size(cfg: BenchConfig, num_prompts_given: bool = True) -> int:
    """Number of requests to plan: --num-prompts, or enough to fill --duration."""
    if cfg.duration_s is None:
        return cfg.num_prompts
    if math.isinf(cfg.request_rate):
        cap = _CLOSED_LOOP_DURATION_PROMPTS
    else:
        cap = count_for_duration(cfg.request_rate, cfg.duration_s)
    return min(cfg.num_prompts, cap) if num_prompts_given else cap


def make_plan(cfg: BenchConfig, tok: TokenCounter, num_prompts_given: bool = True) -> Plan:
    """Draw the dataset and the arrivals, reproducibly from ``cfg.seed``."""
    validate_config(cfg)
    n = plan_size(cfg, num_prompts_given)
    arrival = "poisson" if cfg.arrival == "poisson" and cfg.burstiness == 1.0 else cfg.arrival
    if arrival == "poisson" and cfg.burstiness != 1.0:
        arrival = "gamma"
    offsets = arrival_offsets(arrival, cfg.request_rate, n, cfg.seed, cfg.burstiness)
    duration_ns = None if cfg.duration_s is None else int(cfg.duration_s * 1e9)
    if duration_ns is not None:
        offsets = offsets[offsets < cfg.duration_s]
        n = len(offsets)
    # A long closed-loop duration run reuses a bounded set of distinct prompts.
    distinct = min(n, 5000) if cfg.duration_s is not None else n
    base = build_dataset(cfg, tok, distinct)
    requests = base if distinct == n else [base[i % distinct] for i in range(n)]
    offsets_ns = (offsets * 1e9).astype(np.int64).tolist()
    planned = None
    if not math.isinf(cfg.request_rate) and n > 1 and offsets[-1] > 0:
        planned = (n - 1) / float(offsets[-1])
    if n == 0:
        raise ConfigError("the plan is empty: --duration is too short for --request-rate")
    return Plan(
        requests=requests, offsets_ns=offsets_ns, duration_ns=duration_ns, planned_rate=planned
    )
