"""Simulated vs measured: the published vLLM runs of mixture-of-experts models.

Usage::

    .venv/bin/python benchmarks/sim_fidelity_moe.py                 # in sample and unseen
    .venv/bin/python benchmarks/sim_fidelity.py --moe               # the same
    .venv/bin/python benchmarks/sim_fidelity_moe.py --no-held-out   # the catalog's constants only
    .venv/bin/python benchmarks/sim_fidelity_moe.py --calibrate [--write]

Every vLLM case of ``benchmarks/data/moe_published_cases.json`` (issue 22, item 5; each case
names its publisher, ``source_group``, and its source) is reproduced on the simulator as it
ran: the same model from the catalog (its own ``config.json``), GPU, TP / DP / expert-parallel
flags, checkpoint precision, vLLM release (its memory planner's rules, with the sampler the
publisher's installation ran, :data:`SAMPLER`; async scheduling as the release defaults it,
after 0.11, or as the command line set it), endpoint (chat or
completions), client concurrency cap, and the prompts as published: input lengths from the
run's recorded input-token total, outputs from its generated-token total (the tokens missing
below prompts × length come from requests spread over the run stopping at half length, as in
:func:`sim_fidelity.output_lens`), all requests sent at t=0 after the client's single test
request (gpustack sends every prompt at once; dstack caps concurrency).

It prints, per model family and per GPU vendor, the median and worst |error| of output
throughput, mean TPOT and mean TTFT, with the catalog's constants (*in sample* once
``--calibrate --write`` has put the fit on all runs into ``efficiency.json``) and **unseen**:
leave one ``source_group`` out — the MoE constants (:data:`PARAMS`: the routed experts'
grouped-GEMM efficiency, the expert-parallel all-to-all latency, the compute and bandwidth
efficiency of the GPUs that have no dense fit: H200, B200, MI300X) fitted from
:data:`NEUTRAL` on the other sources' runs only, then the left-out source's runs predicted.
A constant the training runs cannot tell (a GPU with no run among them; the all-to-all when no
training run has data-parallel attention) takes the catalog's value for an uncalibrated GPU
(``efficiency.json`` ``default``) or the step model's documented default, never the left-out
runs' figures. The dense constants (the CPU costs, the API server's, H100's compute
efficiency) are the catalog's, fitted on the dense runs (``benchmarks/sim_fidelity.py``),
and are not refitted here. Cases out of scope are printed with the reason.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from servetune.arch.gpus import find_gpu
from servetune.errors import SimError
from servetune.results.schema import BenchConfig
from servetune.sim.config import EngineConfig
from servetune.sim.efficiency import Efficiency, efficiency
from servetune.sim.memory import plan_memory
from servetune.sim.offline_run import OfflineRun
from servetune.sim.perf import StepModel
from servetune.sim.policies import make_engine
from servetune.sim.semantics import SGLANG_SRT
from sim_fidelity import (
    EFFICIENCY_JSON,
    FIT_KEYS,
    FIT_TOL,
    TARGETS,
    _plan,
    async_default,
    err,
    metrics_of,
    output_lens,
)

HERE = Path(__file__).resolve().parent
MOE_CASES = HERE / "data" / "moe_published_cases.json"

GPU_MAP = {"H100": "H100-SXM", "H200": "H200", "B200": "B200", "MI300X": "MI300X"}
FIT_GPUS = ("H200", "B200", "MI300X")
"""GPUs with no dense fit (``benchmarks/sim_fidelity.py`` has no run on them): their compute
and bandwidth efficiency are fitted here."""
PARAMS = (
    ("grouped_gemm_efficiency", 0.15, 1.0),
    ("alltoall_latency_us", 5.0, 300.0),
    ("sglang_graph_layer_us", 1.0, 300.0),
    ("sglang_eager_layer_us", 10.0, 3000.0),
    *(
        (f"{g}_{k}", lo, hi)
        for g in FIT_GPUS
        for k, lo, hi in (
            ("mfu", 0.1, 0.8),
            ("mbu", 0.4, 0.95),
            ("allreduce_us", 5.0, 300.0),
        )
    ),
)
PARAM_NAMES = tuple(p[0] for p in PARAMS)
NEUTRAL: dict[str, float] = {
    "grouped_gemm_efficiency": 0.6,
    "alltoall_latency_us": 30.0,
    "sglang_graph_layer_us": 20.0,
    "sglang_eager_layer_us": 300.0,
    **{f"{g}_mfu": 0.5 for g in FIT_GPUS},
    **{f"{g}_mbu": 0.75 for g in FIT_GPUS},
    **{f"{g}_allreduce_us": 20.0 for g in FIT_GPUS},
}
"""Where every fit starts: round figures, none taken from a fit."""
METRICS = (
    ("output_tok_s", "out tok/s"),
    ("mean_tpot_ms", "mean TPOT"),
    ("mean_ttft_ms", "mean TTFT"),
)
WORST_TARGET = 35.0


# --- the cases --------------------------------------------------------------------------------
ENGINES = ("vllm", "sglang")


def load_cases(path: Path = MOE_CASES, engines: tuple[str, ...] = ENGINES) -> list[dict[str, Any]]:
    return [c for c in json.loads(path.read_text())["cases"] if c["engine"] in engines]


def family_of(model: str) -> str:
    m = model.lower()
    for key, name in (
        ("deepseek", "DeepSeek"),
        ("kimi", "Kimi-K2"),
        ("gpt-oss", "gpt-oss"),
        ("qwen3", "Qwen3-MoE"),
        ("glm", "GLM"),
        ("llama-4", "Llama-4"),
        ("mixtral", "Mixtral"),
    ):
        if key in m:
            return name
    return model


SAMPLER: dict[str, tuple[str, str]] = {
    "gpustack-performance-lab (MoE pages)": (
        "flashinfer",
        "gpustack's vLLM images sample with FlashInfer's top-k/top-p kernel: its published "
        "runs fit only under that sampler's profiling peak (Qwen3-32B on one H100 serving "
        "32,000-token prompts with 0.11.0, Qwen3-235B-A22B-2507 at 262,144 tokens on 8 x "
        "H100 bf16 and 4 x H100 FP8 with 0.11.0, gpt-oss-120b on one H100 with 0.10.2), where "
        "vLLM's own v0.11.0 image ran PyTorch's sort (servetune.arch.memory)",
    ),
}
"""The top-k/top-p implementation a publisher's installation ran where it was not the
release's default (``sampler`` of :func:`servetune.arch.memory.rules_for`), with why."""


def sampler_of(case: dict[str, Any]) -> Any:
    got = SAMPLER.get(case["source_group"])
    return got[0] if got else None


def version_of(case: dict[str, Any]) -> str:
    """The vLLM release ("0.7.3.dev138+g..." -> "0.7.3"; "main @ mid Aug 2025 (~0.10.1" ->
    "0.10.1"; "0.11.x" -> "0.11.0")."""
    text = str(case.get("engine_version") or "").replace("~", " ").replace("(", " ")
    for word in text.split():
        parts = word.split(".")
        if len(parts) >= 2 and parts[0] == "0" and parts[1].isdigit():
            tail = parts[2] if len(parts) > 2 else "0"
            digits = "".join(ch for ch in tail if ch.isdigit()) if tail != "x" else "0"
            return f"0.{parts[1]}.{digits or '0'}"
    return "0.11.0"


def v0_engine(case: dict[str, Any]) -> bool:
    """vLLM before 0.8 ran the V0 engine by default (V1 became the default in 0.8.0, vLLM PR
    #13726, release notes of v0.8.0)."""
    if case["engine"] != "vllm":
        return False
    v = version_of(case).split(".")
    return int(v[1]) < 8


V0_REASON = (
    "vLLM V0 engine (releases before 0.8.0 ran it by default, vLLM PR #13726): the simulator "
    "models V1's scheduler (mixed prefill/decode steps under one token budget) and V1's kernels; "
    "V0 runs a whole prompt's prefill as a step of its own ahead of every decode and had the "
    "0.7-era DeepSeek kernels (absorbed MLA weights materialised until PR #14770, v0.8.0; "
    "Triton block-FP8 GEMMs), none of which is modelled"
)
"""Why the V0 runs are out of scope (they are not simulated as something else)."""


def scope(case: dict[str, Any]) -> str | None:
    """None when the case is in scope, else why not."""
    w = case.get("workload") or {}
    if not case.get("complete", False):
        return "marked incomplete by its collector (see the case's notes)"
    if "sharegpt" in str(w.get("dataset", "")).lower():
        return "ShareGPT workload (the dataset file is not available offline)"
    if case.get("pipeline_parallel") or "pp2" in case["id"]:
        return "pipeline parallelism (not modelled)"
    if case.get("speculative"):
        return "speculative decoding run without a stated acceptance rate"
    if not str(w.get("dataset", "")).startswith("random"):
        return f"dataset {w.get('dataset')!r} (not the random one)"
    if case["gpu"] not in GPU_MAP:
        return f"GPU {case['gpu']!r} not identified"
    if v0_engine(case):
        return V0_REASON
    return None


def engine_config(case: dict[str, Any]) -> dict[str, Any]:
    if case["engine"] == "sglang":
        return sglang_engine_config(case)
    k = case.get("knobs") or {}
    model = case["model"]
    ec: dict[str, Any] = {
        "gpu": GPU_MAP[case["gpu"]],
        "model": model,
        "tensor_parallel_size": case.get("tensor_parallel") or 1,
        "data_parallel_size": case.get("data_parallel") or 1,
        "enable_expert_parallel": bool(case.get("expert_parallel")),
        "quantization": "fp8" if "fp8" in model.lower() else None,
    }
    flags = command_flags(str(k.get("server_cmd") or ""))
    for knob in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
        if isinstance(k.get(knob), int):
            ec[knob] = k[knob]
        elif knob in flags:
            ec[knob] = int(flags[knob])
    if "gpu_memory_utilization" in flags:
        ec["gpu_memory_utilization"] = float(flags["gpu_memory_utilization"])
    if v0_engine(case):
        ec["enable_chunked_prefill"] = False  # V0's default for contexts up to 32k
    if k.get("async_scheduling") is True:
        ec["async_scheduling"] = True
    else:
        ec["async_scheduling"] = async_default(version_of(case))
    return ec


def sglang_version_of(case: dict[str, Any]) -> str | None:
    """The SGLang release ("0.4.3.post2 (image ...)" -> "0.4.3"; "0.5.x" -> "0.5.0"; None
    where the case names none)."""
    for word in str(case.get("engine_version") or "").replace("~", " ").split():
        parts = word.split(".")
        if len(parts) >= 2 and parts[0] == "0" and parts[1].isdigit():
            tail = "".join(ch for ch in (parts[2] if len(parts) > 2 else "0") if ch.isdigit())
            return f"0.{parts[1]}.{tail or '0'}"
    return None


def sglang_engine_config(case: dict[str, Any]) -> dict[str, Any]:
    """The simulated engine for an SGLang case: ``--tp``, ``--dp`` with
    ``--enable-dp-attention``, ``--ep-size``, the checkpoint's precision, the release's rules
    (:mod:`servetune.arch.memory_sglang`) and the flags its command line sets."""
    k = case.get("knobs") or {}
    model = case["model"]
    flags = command_flags(str(k.get("server_cmd") or ""))
    dp_attn = bool(case.get("dp_attention"))
    ep = case.get("expert_parallel")
    ec: dict[str, Any] = {
        "engine": "sglang",
        "gpu": GPU_MAP[case["gpu"]],
        "model": model,
        "tensor_parallel_size": case.get("tensor_parallel") or 1,
        "data_parallel_size": (case.get("data_parallel") or 1) if dp_attn else 1,
        "enable_dp_attention": dp_attn,
        "expert_parallel_size": int(ep) if isinstance(ep, int) and ep > 1 else None,
        "quantization": "fp8" if "fp8" in model.lower() else None,
        "sglang_version": sglang_version_of(case),
    }
    for flag, knob, kind in (
        ("mem_fraction_static", "gpu_memory_utilization", float),
        ("max_running_requests", "max_num_seqs", int),
        ("chunked_prefill_size", "chunked_prefill_size", int),
        ("cuda_graph_max_bs", "max_cudagraph_capture_size", int),
        ("context_length", "max_model_len", int),
        ("page_size", "block_size", int),
    ):
        if flag in flags:
            ec[knob] = kind(flags[flag])
    if "--disable-radix-cache" in str(k.get("server_cmd") or ""):
        ec["enable_prefix_caching"] = False
    return ec


def command_flags(cmd: str) -> dict[str, str]:
    """``--max-model-len 32768`` -> {"max_model_len": "32768"} from a published command."""
    words = cmd.split()
    out: dict[str, str] = {}
    for i, w in enumerate(words[:-1]):
        if w.startswith("--") and not words[i + 1].startswith("-"):
            out[w[2:].replace("-", "_")] = words[i + 1]
    return out


def lengths(case: dict[str, Any]) -> list[tuple[int, int]]:
    """Each request's (input, output) tokens. SGLang's ``bench_serving --dataset-name random``
    at its default ``--random-range-ratio 0`` draws them uniform in [1, len]
    (:func:`sglang_random_lengths`, exact where the recorded totals confirm it); fixed lengths
    otherwise, the input from the recorded total, the outputs from the generated total
    (:func:`sim_fidelity.output_lens`)."""
    w, m = case["workload"], case["measured"]
    n = int(w["num_prompts"])
    drawn = sglang_random_lengths(case)
    if drawn is not None:
        return drawn
    inp = round(float(m.get("total_input_tokens") or n * w["input_len"]) / n)
    total_out = m.get("total_output_tokens")
    outs = output_lens(n, int(w["output_len"]), float(total_out) if total_out else None)
    return [(inp, o) for o in outs]


def sglang_random_lengths(case: dict[str, Any]) -> list[tuple[int, int]] | None:
    """The lengths SGLang's ``bench_serving`` drew for a random-dataset run at range ratio 0:
    with its default ``--seed 1``, ``np.random.seed(1)``, the inputs
    ``randint(1, input_len + 1, n)``, then the outputs ``randint(1 or 0, output_len + 1, n)``
    (the low bound changed between releases; the one whose sum is the run's recorded
    generated-token total is taken; a 0 runs as 1 token). None unless the recorded input and
    output totals are both reproduced exactly."""
    import numpy as np

    w, m = case["workload"], case["measured"]
    if case["engine"] != "sglang" or not str(w.get("random_range_ratio", "")).startswith("0.0"):
        return None
    n, i_len, o_len = int(w["num_prompts"]), int(w["input_len"]), int(w["output_len"])
    for low in (1, 0):
        rng = np.random.RandomState(1)
        ins = rng.randint(1, i_len + 1, size=n)
        outs = rng.randint(low, o_len + 1, size=n)
        if int(ins.sum()) == m.get("total_input_tokens") and int(outs.sum()) == m.get(
            "total_output_tokens"
        ):
            return [(int(a), max(1, int(b))) for a, b in zip(ins, outs, strict=True)]
    return None


# --- simulating -------------------------------------------------------------------------------
ENGINE_PARAMS = ("graph_layer_us", "eager_layer_us")
"""The per-layer step constants fitted per engine (``efficiency.json`` ``engines``): SGLang's
here; vLLM's stay 0 (its dense fit's per-step CPU cost holds them, and its MoE runs here are
few and large-batch)."""


def efficiency_for(case: dict[str, Any], p: dict[str, float]) -> Efficiency:
    gpu = GPU_MAP[case["gpu"]]
    base = efficiency(find_gpu(gpu))
    upd: dict[str, Any] = {
        "grouped_gemm_efficiency": p["grouped_gemm_efficiency"],
        "alltoall_latency_us": p["alltoall_latency_us"],
    }
    if case["engine"] == "sglang":
        upd.update({k: p[f"sglang_{k}"] for k in ENGINE_PARAMS})
    if gpu in FIT_GPUS:
        upd["mfu"] = p[f"{gpu}_mfu"]
        upd["mbu"] = p[f"{gpu}_mbu"]
        upd["allreduce_latency_us"] = p[f"{gpu}_allreduce_us"]
    return base.model_copy(update=upd)


def relevant(case: dict[str, Any]) -> tuple[str, ...]:
    names = ["grouped_gemm_efficiency"]
    if case["engine"] == "sglang":
        names += [f"sglang_{k}" for k in ENGINE_PARAMS]
    if (case.get("data_parallel") or 1) > 1:
        names.append("alltoall_latency_us")
    gpu = GPU_MAP.get(case["gpu"], "")
    if gpu in FIT_GPUS:
        names += [f"{gpu}_mfu", f"{gpu}_mbu"]
        if (case.get("tensor_parallel") or 1) > 1:
            names.append(f"{gpu}_allreduce_us")
    return tuple(names)


_CACHE: dict[tuple[str, tuple[float, ...]], dict[str, float] | str] = {}


def simulate(case: dict[str, Any], p: dict[str, float]) -> dict[str, float] | str:
    """The case's simulated metrics, or the simulator's refusal."""
    key = (case["id"], tuple(round(p[n], 9) for n in relevant(case)))
    got = _CACHE.get(key)
    if got is not None:
        return got
    try:
        r = EngineConfig(**engine_config(case)).resolve()
        mem = plan_memory(r, version_of(case), sampler_of(case))
        eng = make_engine(r, mem, StepModel(r, efficiency_for(case, p)))
    except SimError as exc:
        _CACHE[key] = f"refused: {exc.message}"
        return _CACHE[key]
    w = case["workload"]
    lens = lengths(case)
    cap = w.get("max_concurrency")
    cfg = BenchConfig(
        random_input_len=max(i for i, _ in lens),
        random_output_len=max(o for _, o in lens),
        num_prompts=len(lens),
        endpoint="chat" if "chat" in str(w.get("endpoint", "")) else "completions",
        max_concurrency=int(cap) if cap else None,
    )
    # the client's test request (prompt 0) alone, then the run
    OfflineRun(_plan(lens[:1]), cfg, r, mem, engine=eng, prompt_ids=True).run()
    sim = OfflineRun(
        _plan(lens),
        cfg,
        r,
        mem,
        engine=eng,
        prompt_ids=True,
        warm_prompts=1,
        token_times=False,
    )
    sim.run()
    res = metrics_of(sim)
    _CACHE[key] = res
    return res


def _sim_one(args: tuple[dict[str, Any], dict[str, float]]) -> dict[str, float] | str:
    return simulate(*args)


class Pool:
    """Simulates a batch of (case, constants) in ``jobs`` processes, cached by what each
    case depends on."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self._pool: Any = None

    def __enter__(self) -> Pool:
        if self.jobs > 1:
            import multiprocessing

            self._pool = multiprocessing.get_context("fork").Pool(self.jobs)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.terminate()

    def run(self, reqs: list[tuple[dict[str, Any], dict[str, float]]]) -> list[Any]:
        keys = [(c["id"], tuple(round(p[n], 9) for n in relevant(c))) for c, p in reqs]
        todo = {k: r for k, r in zip(keys, reqs, strict=True) if k not in _CACHE}
        if todo:
            if self._pool is not None and len(todo) > 1:
                done = self._pool.map(_sim_one, list(todo.values()), chunksize=1)
            else:
                done = [simulate(c, p) for c, p in todo.values()]
            _CACHE.update(zip(todo.keys(), done, strict=True))
        return [_CACHE[k] for k in keys]


def errors(
    cases: list[dict[str, Any]], res: list[dict[str, float] | str]
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for c, r in zip(cases, res, strict=True):
        if isinstance(r, str):
            continue
        m = c["measured"]
        out[c["id"]] = {k: err(r[k], m[k]) for k, _ in METRICS if m.get(k) and k in r}
    return out


# --- the constants ----------------------------------------------------------------------------
def catalog_params() -> dict[str, float]:
    """The constants the simulator uses today (``efficiency.json``; a GPU without an entry
    takes ``default``; the MoE constants their ``moe`` entry or the step model's defaults)."""
    p: dict[str, float] = {}
    any_gpu = efficiency(find_gpu("H200"))
    p["grouped_gemm_efficiency"] = any_gpu.grouped_gemm_efficiency
    p["alltoall_latency_us"] = any_gpu.alltoall_latency_us
    sgl = efficiency(find_gpu("H200"), SGLANG_SRT)
    for k in ENGINE_PARAMS:
        p[f"sglang_{k}"] = getattr(sgl, k)
    for g in FIT_GPUS:
        e = efficiency(find_gpu(g))
        p[f"{g}_mfu"], p[f"{g}_mbu"] = e.mfu, e.mbu
        p[f"{g}_allreduce_us"] = e.allreduce_latency_us
    return p


FIT_LOG: list[str] = []


def fit(
    cases: list[dict[str, Any]],
    start: dict[str, float],
    free: tuple[str, ...],
    pool: Pool,
    max_nfev: int = 12,
) -> dict[str, float]:
    """Least squares (soft-L1) on the log errors of output tok/s, mean TPOT and mean TTFT of
    ``cases`` within :data:`PARAMS`' bounds, as ``sim_fidelity.fit`` does for the dense runs
    (a forward-difference Jacobian, its columns simulated together)."""
    import numpy as np
    from scipy.optimize import least_squares

    bounds = {n: (lo, hi) for n, lo, hi in PARAMS}
    lo = np.array([bounds[n][0] for n in free])
    hi = np.array([bounds[n][1] for n in free])
    floor = np.maximum(0.05 * (hi - lo), 1e-6)

    def params(x: Any) -> dict[str, float]:
        return {**start, **{n: float(v) for n, v in zip(free, x, strict=True)}}

    def vector(res: list[Any]) -> Any:
        out = []
        for c, r in zip(cases, res, strict=True):
            for k in FIT_KEYS:
                meas = c["measured"].get(k)
                if not meas:
                    continue
                sim = r.get(k) if isinstance(r, dict) else None
                out.append(math.log(sim / meas) if sim and sim > 0 else 3.0)
        return np.array(out)

    def many(xs: list[Any]) -> list[Any]:
        reqs = [(c, params(x)) for x in xs for c in cases]
        got = pool.run(reqs)
        n = len(cases)
        return [vector(got[i * n : (i + 1) * n]) for i in range(len(xs))]

    def jac(x: Any) -> Any:
        steps = []
        for i in range(len(x)):
            h = 0.03 * max(abs(x[i]), floor[i])
            steps.append(-h if x[i] + h > hi[i] else h)
        xs = [x]
        for i, h in enumerate(steps):
            xi = x.copy()
            xi[i] += h
            xs.append(xi)
        fs = many(xs)
        return np.column_stack([(fs[i + 1] - fs[0]) / steps[i] for i in range(len(x))])

    x0 = np.array([min(max(start[n], bounds[n][0]), bounds[n][1]) for n in free])
    sol = least_squares(
        lambda x: many([x])[0],
        x0,
        jac=jac,
        bounds=(lo, hi),
        x_scale=np.maximum(np.abs(x0), floor),
        max_nfev=max_nfev,
        loss="soft_l1",
        f_scale=0.3,
        ftol=FIT_TOL,
        xtol=FIT_TOL,
    )
    FIT_LOG.append(f"{sol.nfev} evaluations, {'converged' if sol.status > 0 else 'stopped'}")
    return params(sol.x)


def tells(cases: list[dict[str, Any]], p: dict[str, float], name: str, pool: Pool) -> bool:
    """Can these runs tell constant ``name``? Only when their results move both ways, by ≥ 1%
    on a fitted metric, as it moves ±20% (``sim_fidelity.tells``' rule)."""
    mine = [c for c in cases if name in relevant(c)]
    if not mine:
        return False
    lo, hi = PARAMS[PARAM_NAMES.index(name)][1:]
    variants = [p, {**p, name: min(hi, p[name] * 1.2)}, {**p, name: max(lo, p[name] * 0.8)}]
    got = pool.run([(c, q) for q in variants for c in mine])
    n = len(mine)
    base, up, down = got[:n], got[n : 2 * n], got[2 * n :]

    def moved(a: list[Any], b: list[Any]) -> float:
        out = 0.0
        for x, y in zip(a, b, strict=True):
            if isinstance(x, dict) and isinstance(y, dict):
                for k in FIT_KEYS:
                    if x.get(k) and y.get(k):
                        out = max(out, abs(math.log(x[k] / y[k])))
        return out

    return moved(base, up) >= 0.01 and moved(base, down) >= 0.01


def loso(
    cases: list[dict[str, Any]], pool: Pool, max_nfev: int, quiet: bool = False
) -> tuple[dict[str, dict[str, float]], dict[str, tuple[dict[str, float], list[str]]]]:
    """Leave one ``source_group`` out: the MoE constants fitted from :data:`NEUTRAL` on the
    other groups' runs (only those they can tell), then the left-out group's runs predicted.
    A constant the training runs cannot tell takes the catalog's value for a GPU without a
    fit (``efficiency.json`` ``default``) or the step model's default (the all-to-all)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for c in cases:
        groups.setdefault(publisher_of(c), []).append(c)
    default = efficiency_table_default()
    errs: dict[str, dict[str, float]] = {}
    folds: dict[str, tuple[dict[str, float], list[str]]] = {}
    for name, held in groups.items():
        train = [c for c in cases if publisher_of(c) != name]
        if not train:
            continue
        t = time.perf_counter()
        start = dict(NEUTRAL)
        free = [n for n in PARAM_NAMES if tells(train, start, n, pool)]
        untold = [n for n in PARAM_NAMES if n not in free]
        for n in untold:  # what the simulator takes for a GPU nobody calibrated
            if n.endswith("_mfu"):
                start[n] = default["mfu"]
            elif n.endswith("_mbu"):
                start[n] = default["mbu"]
            elif n.endswith("_allreduce_us"):
                start[n] = default["allreduce_latency_us"]
            elif n.startswith("sglang_"):
                start[n] = float(Efficiency.model_fields[n.removeprefix("sglang_")].default)
            else:
                start[n] = float(Efficiency.model_fields[n].default)
        q = fit(train, start, tuple(free), pool, max_nfev) if free else start
        if not free:
            FIT_LOG.append("nothing to fit")
        folds[name] = (q, untold)
        res = pool.run([(c, q) for c in held])
        e = errors(held, res)
        errs.update(e)
        if not quiet:
            meds = summary(e)
            print(
                f"  left out {name} ({len(held)} runs): fitted {', '.join(free) or 'nothing'} "
                f"on {len(train)} runs in {time.perf_counter() - t:.0f} s ({FIT_LOG[-1]}); "
                + ", ".join(f"{lab} {meds[k][0]:.1f}%" for k, lab in METRICS if meds[k][1]),
                file=sys.stderr,
            )
    return errs, folds


def publisher_of(case: dict[str, Any]) -> str:
    """The unit left out: the publisher. The sgl-cookbook docs are one repository (one
    benchmark method, the same 8 x B200 machines for the NVIDIA docs), so they are one source,
    its AMD docs (AMD's engineers, MI300X) another; every other ``source_group`` is its own."""
    g = str(case["source_group"])
    if g.startswith("sgl-cookbook/"):
        return "sgl-cookbook-AMD" if g.endswith("-AMD") else "sgl-cookbook"
    return g


def efficiency_table_default() -> dict[str, Any]:
    table: dict[str, Any] = json.loads(EFFICIENCY_JSON.read_text())["default"]
    return table


def write_params(p: dict[str, float], n_cases: int, sources: list[str], how: str) -> None:
    """The fitted MoE constants into efficiency.json: ``moe`` (grouped GEMM, all-to-all) and
    the H200 / B200 / MI300X entries (their mfu and mbu; the CPU costs stay the dense fit's)."""
    table = json.loads(EFFICIENCY_JSON.read_text())
    where = (
        f"fitted by benchmarks/sim_fidelity_moe.py --calibrate (least squares, soft-L1, on the "
        f"log errors of output tok/s, mean TPOT and mean TTFT of the {n_cases} in-scope vLLM "
        f"MoE runs of benchmarks/data/moe_published_cases.json from {len(sources)} sources: "
        f"{', '.join(sources)}; {how})"
    )
    told = set(json.loads(json.dumps(p)).keys())
    moe = table.setdefault("moe", {})
    moe["grouped_gemm_efficiency"] = round(p["grouped_gemm_efficiency"], 4)
    moe["alltoall_latency_us"] = round(p["alltoall_latency_us"], 2)
    moe["source"] = (
        "grouped_gemm_efficiency " + where + "; alltoall_latency_us not told by these runs "
        "(none has data-parallel attention): the step model's default (DeepEP's intranode "
        "dispatch/combine take tens of us at small batches)"
    )
    for g in FIT_GPUS:
        if f"{g}_mfu" not in told or not p.get(f"{g}_told"):
            continue
        entry = table["gpus"].setdefault(g, dict(table["default"]))
        entry["mfu"] = round(p[f"{g}_mfu"], 4)
        entry["mbu"] = round(p[f"{g}_mbu"], 4)
        entry["allreduce_latency_us"] = round(p[f"{g}_allreduce_us"], 2)
        entry["source"] = (
            f"mfu, mbu and the TP all-reduce latency {where}; the CPU costs are the dense "
            "fit's (see A100-80GB-PCIe)"
        )
    EFFICIENCY_JSON.write_text(json.dumps(table, indent=2, ensure_ascii=False) + "\n")


# --- printing ---------------------------------------------------------------------------------
def summary(e: dict[str, dict[str, float]]) -> dict[str, tuple[float, int, float]]:
    """metric -> (median |error|, n, worst signed error)."""
    out: dict[str, tuple[float, int, float]] = {}
    for k, _ in METRICS:
        v = [x[k] for x in e.values() if k in x]
        out[k] = (
            statistics.median(abs(x) for x in v) if v else float("nan"),
            len(v),
            max(v, key=abs) if v else float("nan"),
        )
    return out


def vendor_of(case: dict[str, Any]) -> str:
    return "AMD" if find_gpu(GPU_MAP[case["gpu"]]).vendor == "amd" else "NVIDIA"


def table_rows(
    cases: list[dict[str, Any]], e_in: dict[str, dict[str, float]], e_out: dict[str, Any]
) -> list[str]:
    def line(label: str, ids: set[str]) -> str:
        cells = [f"{label:<22} {len(ids):>3}"]
        for e in (e_in, e_out):
            s = summary({i: v for i, v in e.items() if i in ids})
            for k, _ in METRICS:
                med, n, worst = s[k]
                cells.append(f"{med:5.1f} {worst:+6.0f}" if n else f"{'-':>5} {'-':>6}")
        return " | ".join(cells)

    head = f"{'group':<22} {'n':>3}"
    sub = " | ".join(f"{lab:>12}" for _, lab in METRICS)
    rows = [
        "median |error| % and worst signed error % per metric; in sample | unseen (LOSO)",
        f"{head} | {sub} | {sub}",
    ]
    groups: dict[str, set[str]] = {}
    for c in cases:
        groups.setdefault(f"family {family_of(c['model'])}", set()).add(c["id"])
    for c in cases:
        groups.setdefault(f"vendor {vendor_of(c)}", set()).add(c["id"])
    for c in cases:
        groups.setdefault(f"engine {c['engine']}", set()).add(c["id"])
    for c in cases:
        groups.setdefault(f"source {publisher_of(c)[:15]}", set()).add(c["id"])
    for label, ids in groups.items():
        rows.append(line(label, ids))
    rows.append(line("all", {c["id"] for c in cases}))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--cases", default=str(MOE_CASES))
    ap.add_argument(
        "--engine", choices=("vllm", "sglang", "all"), default="all", help="whose runs (all)"
    )
    ap.add_argument("--no-held-out", action="store_true", help="the catalog's constants only")
    ap.add_argument("--calibrate", action="store_true", help="fit on all runs, print them")
    ap.add_argument("--write", action="store_true", help="with --calibrate: into efficiency.json")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--fit-evals", type=int, default=12, help="least-squares evaluations a fit")
    ap.add_argument("--json", help="write the per-case errors here")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    engines = ENGINES if args.engine == "all" else (args.engine,)
    everything = load_cases(Path(args.cases), engines)
    cases, out_of_scope = [], []
    for c in everything:
        why = scope(c)
        (out_of_scope.append((c, why)) if why else cases.append(c))
    with Pool(args.jobs) as pool:
        p = catalog_params()
        res = pool.run([(c, p) for c in cases])
        for c, r in zip(cases, res, strict=True):
            if isinstance(r, str):
                out_of_scope.append((c, r))
        refused = {c["id"] for c, r in zip(cases, res, strict=True) if isinstance(r, str)}
        cases = [c for c in cases if c["id"] not in refused]
        res = [r for r in res if not isinstance(r, str)]
        if args.calibrate:
            free = tuple(n for n in PARAM_NAMES if tells(cases, NEUTRAL, n, pool))
            q = fit(cases, dict(NEUTRAL), free, pool, args.fit_evals)
            for g in FIT_GPUS:
                q[f"{g}_told"] = float(f"{g}_mfu" in free or f"{g}_mbu" in free)
            print(f"fit on all {len(cases)} runs ({FIT_LOG[-1]}), free {', '.join(free)}:")
            for n in PARAM_NAMES:
                print(f"  {n:<26} {q[n]:.4f}" + ("" if n in free else "  (not told: start)"))
            if args.write:
                srcs = sorted({c["source_group"] for c in cases})
                write_params(q, len(cases), srcs, FIT_LOG[-1])
                print(f"written to {EFFICIENCY_JSON}")
            return 0
        e_in = errors(cases, res)
        if not args.quiet:
            print(f"{'case':<62} {'metric':<10} {'sim':>10} {'measured':>10} {'err':>7}")
            for c, r in zip(cases, res, strict=True):
                for k, lab in METRICS:
                    if c["measured"].get(k) and k in r:
                        print(
                            f"{c['id'][:62]:<62} {lab:<10} {r[k]:>10.1f} "
                            f"{c['measured'][k]:>10.1f} {e_in[c['id']][k]:>+6.1f}%"
                        )
        e_out: dict[str, dict[str, float]] = {}
        folds: dict[str, Any] = {}
        if not args.no_held_out:
            e_out, folds = loso(cases, pool, args.fit_evals, args.quiet)
    print()
    print(f"out of scope ({len(out_of_scope)} of {len(everything)} runs):")
    reasons: dict[str, list[str]] = {}
    for c, why in out_of_scope:
        reasons.setdefault(why, []).append(c["id"])
    for why, ids in reasons.items():
        print(f"  {len(ids):>3} {why[:240]}: {', '.join(ids[:3])}{' ...' if len(ids) > 3 else ''}")
    print()
    print(f"in scope: {len(cases)} runs from {len({c['source_group'] for c in cases})} sources")
    for row in table_rows(cases, e_in, e_out):
        print(row)
    if folds:
        print()
        for name, (q, untold) in folds.items():
            shown = ", ".join(f"{n} {q[n]:.3g}" for n in PARAM_NAMES)
            print(f"fold without {name}: {shown}; not told: {', '.join(untold) or 'none'}")
        s = summary(e_out)
        print()
        print("targets on unseen sources:")
        for k, lab in METRICS:
            med, n, worst = s[k]
            print(
                f"  {lab:<10} median {med:5.1f}% (target ≤ {TARGETS[k]:.0f}%: "
                f"{'met' if med <= TARGETS[k] else 'missed'}), worst {worst:+.1f}% "
                f"(target ≤ {WORST_TARGET:.0f}%: "
                f"{'met' if abs(worst) <= WORST_TARGET else 'missed'})"
            )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"in_sample": e_in, "unseen": e_out}, indent=1) + "\n"
        )
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
