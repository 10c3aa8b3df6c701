"""The workload an offline run simulates: the plan ``bench`` would send, drawn once per
dataset and cached (a rate sweep, a tuner trying many rates, re-use it)."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from servetune.results.schema import BenchConfig
from servetune.sim.construct import construct_model
from servetune.workload.arrivals import arrival_offsets
from servetune.workload.plan import Plan, make_plan, plan_size, validate_config
from servetune.workload.random_prompts import sample_lengths
from servetune.workload.spec import RequestSpec
from servetune.workload.tokens import ApproxTokenizer, load_tokenizer


@lru_cache(maxsize=16)
def _dataset(cfg_json: str) -> tuple[Plan, str, bool]:
    """The plan of a configuration (its requests are what later plans of the same dataset
    reuse), the tokenizer's name and whether its counts are exact."""
    cfg = BenchConfig.model_validate_json(cfg_json)
    tok = load_tokenizer(cfg.tokenizer)
    if isinstance(tok, ApproxTokenizer) and cfg.dataset_name == "random" and not cfg.duration_s:
        return _random_lengths_plan(cfg), tok.name, tok.exact
    return make_plan(cfg, tok), tok.name, tok.exact


def _random_lengths_plan(cfg: BenchConfig) -> Plan:
    """The ``random`` dataset's requests as the simulator needs them: ``random_requests``
    draws the input and then the output lengths from ``cfg.seed`` before any prompt text, and
    under the approximate counter a prompt's count is its drawn length; so the same lengths,
    without the text (tests/sim/test_offline_api.py compares them with ``make_plan``'s)."""
    validate_config(cfg)
    n = plan_size(cfg)
    rng = np.random.default_rng(cfg.seed)
    ins = sample_lengths(cfg.random_input_len, cfg.random_range_ratio, n, rng).tolist()
    outs = sample_lengths(cfg.random_output_len, cfg.random_range_ratio, n, rng).tolist()
    requests = [
        construct_model(RequestSpec, {"prompt": "", "input_len": i, "output_len": o})
        for i, o in zip(ins, outs, strict=True)
    ]
    return Plan.model_construct(requests=requests, offsets_ns=[0] * n, duration_ns=None)


def workload_plan(bench_cfg: BenchConfig) -> tuple[Plan, str, bool]:
    """The plan ``bench`` would send for ``bench_cfg`` (``make_plan``'s draws), as the
    simulator needs it: (plan, tokenizer name, exact counts). The requests are drawn once per
    dataset: configurations that differ only in their arrivals (rate, burstiness, arrival
    process: a rate sweep, a tuner trying many rates) share them and draw only their
    arrivals, as ``make_plan`` does (tests/sim/test_offline_api.py compares the two); random
    prompts under the approximate counter carry no text (the simulator reads lengths)."""
    if bench_cfg.duration_s is not None or bench_cfg.dataset_name in ("multiturn", "trace"):
        # the plan's size depends on the rate; sessions arrive by session, not by request;
        # a trace's times are its own, scaled to the rate
        return _dataset(bench_cfg.model_dump_json())
    key = bench_cfg.model_copy(update={"request_rate": 1.0, "burstiness": 1.0}).model_dump_json(
        exclude={"arrival"}
    )
    base, name, exact = _dataset(key)
    validate_config(bench_cfg)
    arrival = bench_cfg.arrival
    if arrival == "poisson" and bench_cfg.burstiness != 1.0:
        arrival = "gamma"
    offsets = arrival_offsets(
        arrival, bench_cfg.request_rate, len(base), bench_cfg.seed, bench_cfg.burstiness
    )
    planned = None
    if not math.isinf(bench_cfg.request_rate) and len(offsets) > 1 and offsets[-1] > 0:
        planned = (len(offsets) - 1) / float(offsets[-1])
    plan = Plan.model_construct(
        requests=base.requests,
        offsets_ns=(offsets * 1e9).astype(np.int64).tolist(),
        duration_ns=None,
        planned_rate=planned,
    )
    return plan, name, exact
