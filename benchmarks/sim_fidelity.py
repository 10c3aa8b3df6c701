"""Simulated vs measured: every case of benchmarks/data/published_cases.json.

Usage::

    .venv/bin/python benchmarks/sim_fidelity.py                 # in sample and unseen
    .venv/bin/python benchmarks/sim_fidelity.py --no-held-out   # in sample only (~15 s)
    .venv/bin/python benchmarks/sim_fidelity.py --calibrate     # refit, print efficiency.json
    .venv/bin/python benchmarks/sim_fidelity.py --moe           # the MoE runs (sim_fidelity_moe.py)

Prints, per case and metric, the simulated value, the measured one and the error, then the
median absolute error per metric over the cases in scope — in sample (the constants of
``src/servetune/sim/data/efficiency.json``, fitted on these same cases) and **unseen**: leave
one source out (for each publisher of runs — dennislee22, gpustack, kvcached — the constants
fitted from neutral starting values on the other publishers' cases only, then the left-out
publisher's cases predicted; see :func:`loso`). The unseen figure is the fidelity to quote for
a run nobody has fitted on. Which cases are out of scope, and why, is printed too. Each case
names its source (repository and commit, file, or issue URL) in the data file.

How the published runs are reproduced (each point is read from the runs' own logs, none is
fitted):

* ``vllm bench serve`` (benchmark_serving.py) sends ``input_requests[0]`` alone as a test
  request before the measured run, then all prompts at t=0 (request rate inf); the duration
  runs from the first send to the last completion; output throughput = generated tokens /
  duration. The generated-token totals of the published runs (output tok/s × duration) are
  a little below prompts × output length (no ``--ignore-eos``): the missing tokens are taken
  from a few requests spread over the run, each stopping at half its length.
* The seeded random dataset makes prompt ``i`` the same token run in every run with the same
  seed (``offsets[i] + i + arange(len)`` — numpy draws nothing for a zero-width length range,
  so ``offsets`` does not depend on the number of prompts or their lengths), so runs against
  one server hit the prefix cache of the runs before them. The dennislee22 README prints the
  server's log lines after each run (API-server pid, time, cumulative prefix-cache hit rate):
  :data:`SESSIONS` lists, per server process, the runs in the order they ran there (runs
  that are not published cases included); the simulator replays each session on one engine,
  so the cache state at the start of a case is the simulator's own. The hit rates confirm
  the order where it matters (e.g. util 0.25 n50 started with prompts 0–29 cached: 56.1%
  logged = the arithmetic of that history; util 0.5 n50 and n100 ran on fresh servers: 1.9%
  and 1.0%).
* A run at a finite ``--request-rate`` (kvcached, 16 req/s) gets Poisson arrivals from the
  simulator's own generator: the same process, not vLLM's draws.
* Runs sent to ``/v1/chat/completions`` (gpustack) cost the API server more per request (the
  chat template, rendered for a whole burst before any of its requests goes on:
  ``servetune.sim.frontend.SharedIntake``) and per streamed token (a chat chunk): two fitted
  constants.
* Knobs a case does not state take vLLM's defaults, except ``gpu_memory_utilization`` where
  a case logs its KV-cache GiB: then the utilisation is solved from that figure.
* The dennislee22 TP=2 runs are two Kubernetes pods on one node: TP=2 scaled no better than
  TP=1 (2,292 vs 2,338 tok/s at 50 prompts), which is NCCL over the pod network rather than
  NVLink; their all-reduce latency and bandwidth are two of the fitted constants.

Fitted constants (``--calibrate``; least squares on the log errors of output throughput,
mean TPOT and mean TTFT of the in-scope cases, each within bounds a real server can be in):
the compute efficiency of each GPU generation (Ampere, Hopper), one memory-bandwidth
efficiency for every GPU, the step and per-request CPU costs, the API server's intake time
per request, its extras per chat request and per streamed chat token, its token latency,
the pod network's all-reduce latency and bandwidth — 11 numbers (:data:`PARAMS`). The
bandwidth efficiency also has a measured prior (``efficiency.json``, ``priors``;
:func:`measured_priors`); every fit runs until a step changes the cost or every constant by
less than :data:`FIT_TOL` and says whether it got there; a fold fits a GPU generation's compute
efficiency only from training runs that can tell it (:func:`tells`); what a fold's training
runs cannot tell comes from measurements of the mechanism (``efficiency.json``, ``untold``;
:func:`untold`): the GEMM's reach per GPU generation, the chat path's extra API-server cost.

The step model knows vLLM's async scheduling (on by default after 0.11: a step's CPU work
overlaps the GPU's, :func:`async_default`); TP across Kubernetes pods with no pod runs to fit
on takes NCCL's socket-transport cost (:data:`SOCKET_PRIOR`).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servetune.arch.gpus import find_gpu
from servetune.errors import SimError
from servetune.results.schema import BenchConfig
from servetune.sim.config import EngineConfig
from servetune.sim.efficiency import Efficiency, efficiency
from servetune.sim.engine import Engine
from servetune.sim.memory import plan_memory
from servetune.sim.offline_run import OfflineRun
from servetune.sim.perf import StepModel
from servetune.workload.arrivals import arrival_offsets
from servetune.workload.plan import Plan
from servetune.workload.spec import RequestSpec

HERE = Path(__file__).resolve().parent
DEFAULT_CASES = HERE / "data" / "published_cases.json"
EFFICIENCY_JSON = HERE.parent / "src" / "servetune" / "sim" / "data" / "efficiency.json"

GPU_MAP = {
    "A100-80GB": "A100-80GB",
    "A100-40GB": "A100-40GB",
    "H100-SXM-80GB": "H100-SXM",
    "H200-SXM-141GB": "H200",
    "RTX 3090 24GB": "RTX-3090",
}
METRICS = (
    ("output_tok_s", "out tok/s"),
    ("mean_tpot_ms", "mean TPOT"),
    ("mean_ttft_ms", "mean TTFT"),
    ("median_tpot_ms", "med TPOT"),
    ("p99_ttft_ms", "p99 TTFT"),
)
FIT_KEYS = ("output_tok_s", "mean_tpot_ms", "mean_ttft_ms")
TARGETS = {"output_tok_s": 10.0, "mean_tpot_ms": 15.0, "mean_ttft_ms": 15.0}


# --- the published runs, as they ran -------------------------------------------------------
@dataclass(frozen=True)
class Run:
    input_len: int
    output_len: int
    n: int
    case: str | None = None
    """The published case this run is (None: a run of the session that is not a case)."""
    check: str | None = None
    """A run of the README that is not a published case, kept as an out-of-sample check
    (its figures in :data:`CHECKS`; never used in a fit)."""
    rate: float = math.inf
    """Requests per second (Poisson arrivals, ``vllm bench serve --request-rate``)."""
    chat: bool = False
    """Sent to ``/v1/chat/completions`` (``--backend openai-chat``)."""


@dataclass(frozen=True)
class Session:
    name: str
    source: str
    runs: tuple[Run, ...]


def _dl(tail: str) -> str:
    return f"dl-qwen2-7b-a100x1-{tail}"


_R = "github:dennislee22/vLLM-benchmarking README.md, log lines after each run"
SESSIONS: tuple[Session, ...] = (
    Session(
        "7B TP1 util0.25 (pid 113)",
        f"{_R}: APIServer pid=113, 09-06 20:57-21:07; n10 first on a fresh server (8.9% = "
        "the test prompt's 63 blocks), then n1 (22.7%), n20 (40.6%), n30 (53.0%), n50 (56.1% "
        "= prompts 0-29 cached)",
        (
            Run(1024, 1024, 10, _dl("util025-rand1k1k-n10")),
            Run(1024, 1024, 1, _dl("util025-rand1k1k-n1")),
            Run(1024, 1024, 20, check="7B TP1 util0.25 n20"),
            Run(1024, 1024, 30, check="7B TP1 util0.25 n30"),
            Run(1024, 1024, 50, _dl("util025-rand1k1k-n50")),
            Run(1024, 1024, 75, check="7B TP1 util0.25 n75"),
        ),
    ),
    Session(
        "7B TP1 util0.25 (pid 1671)",
        f"{_R}: APIServer pid=1671, 09-04 01:13-01:23: n500, n200, n100 in that order; what "
        "ran before n500 is not shown (a 5,867-block cache: at most ~90 prompts fit anyway)",
        (
            Run(1024, 1024, 500, _dl("util025-rand1k1k-n500")),
            Run(1024, 1024, 200, _dl("util025-rand1k1k-n200")),
            Run(1024, 1024, 100, _dl("util025-rand1k1k-n100")),
        ),
    ),
    Session(
        "7B TP1 util0.5 (pid 136)",
        f"{_R}: APIServer pid=136, 09-09 01:31-01:43: n50 on a fresh server (1.9%), n30 "
        "(38.5%), n20 (50.7%), an n10 not shown (the 56.1% of n1 needs it), n1",
        (
            Run(1024, 1024, 50, _dl("util05-rand1k1k-n50")),
            Run(1024, 1024, 30, check="7B TP1 util0.5 n30"),
            Run(1024, 1024, 20, check="7B TP1 util0.5 n20"),
            Run(1024, 1024, 10),
            Run(1024, 1024, 1, _dl("util05-rand1k1k-n1")),
        ),
    ),
    Session(
        "7B TP1 util0.5 (pid 118)",
        f"{_R}: APIServer pid=118, 09-09 02:24: n10 on a fresh server (8.9%)",
        (
            Run(1024, 1024, 10, _dl("util05-rand1k1k-n10")),
            Run(1024, 1024, 75, check="7B TP1 util0.5 n75"),
        ),
    ),
    Session(
        "7B TP1 util0.5 (pid 2739)",
        f"{_R}: APIServer pid=2739, 09-04 01:33-01:40: n100 on a fresh server (1.0%), n200 "
        "(33.3% = prompts 0-99 cached), n500",
        (
            Run(1024, 1024, 100, _dl("util05-rand1k1k-n100")),
            Run(1024, 1024, 200, _dl("util05-rand1k1k-n200")),
            Run(1024, 1024, 500, _dl("util05-rand1k1k-n500")),
        ),
    ),
    Session(
        "7B TP2 util0.25 (pid 1423)",
        f"{_R}: APIServer pid=1423, 09-06 21:18-21:26: n1 on a fresh server (49.2% = "
        "1008/2048), an n10 not shown (the 40.6% of n20 needs it, as on pid 113), n20, n30, "
        "n75",
        (
            Run(1024, 1024, 1, "dl-qwen2-7b-a100x2tp2-util025-rand1024-1024-n1"),
            Run(1024, 1024, 10),
            Run(1024, 1024, 20, check="7B TP2 util0.25 n20"),
            Run(1024, 1024, 30, check="7B TP2 util0.25 n30"),
            Run(1024, 1024, 75, check="7B TP2 util0.25 n75"),
        ),
    ),
    Session(
        "7B TP2 util0.25 (pid 2202)",
        f"{_R}: APIServer pid=2202, 09-03 01:30-02:08 (started after pid 1217's last run): "
        "4096/4096 n100, 1024/7168 n100, 7168/1024 n100, 1024/1024 n10, 4096/4096 n10, "
        "1024/7168 n10, 1024/1024 n50",
        (
            Run(4096, 4096, 100, "dl-qwen2-7b-a100x2tp2-util025-rand4096-4096-n100"),
            Run(1024, 7168, 100, check="7B TP2 util0.25 1024/7168 n100"),
            Run(7168, 1024, 100, "dl-qwen2-7b-a100x2tp2-util025-rand7168-1024-n100"),
            Run(1024, 1024, 10, check="7B TP2 util0.25 n10"),
            Run(4096, 4096, 10, check="7B TP2 util0.25 4096/4096 n10"),
            Run(1024, 7168, 10, check="7B TP2 util0.25 1024/7168 n10"),
            Run(1024, 1024, 50, "dl-qwen2-7b-a100x2tp2-util025-rand1024-1024-n50"),
            Run(4096, 4096, 50, check="7B TP2 util0.25 4096/4096 n50"),
            Run(1024, 7168, 50, check="7B TP2 util0.25 1024/7168 n50"),
        ),
    ),
    Session(
        "7B TP2 util0.25 (pid 1217)",
        f"{_R}: APIServer pid=1217, 09-03 01:13-01:15: n100 on a fresh server (1.0%), n200 "
        "(33.3% = prompts 0-99 cached)",
        (
            Run(1024, 1024, 100, "dl-qwen2-7b-a100x2tp2-util025-rand1024-1024-n100"),
            Run(1024, 1024, 200, "dl-qwen2-7b-a100x2tp2-util025-rand1024-1024-n200"),
            Run(1024, 1024, 500, check="7B TP2 util0.25 n500"),
        ),
    ),
    Session(
        "7B TP2 util0.25 (pid 144, n1000)",
        f"{_R}: APIServer pid=144, 09-03 23:10; what ran before is not shown (a 1,000-prompt "
        "run on a 28,000-block cache: the start hardly matters)",
        (Run(1024, 1024, 1000, "dl-qwen2-7b-a100x2tp2-util025-rand1024-1024-n1000"),),
    ),
    Session(
        "7B TP2 util0.25 (1024/128 n500)",
        f"{_R}: pid=144 again, but the pid is reused across restarts (a util-0.5 run logs it "
        "too at 23:29): history unknown, taken as a fresh server",
        (Run(1024, 128, 500, "dl-qwen2-7b-a100x2tp2-util025-rand1024-128-n500"),),
    ),
    Session(
        "7B TP2 util0.25 (128/1024 n500)",
        f"{_R}: history unknown (see the 1024/128 run), taken as a fresh server",
        (Run(128, 1024, 500, "dl-qwen2-7b-a100x2tp2-util025-rand128-1024-n500"),),
    ),
    Session(
        "32B TP1 (pid 133)",
        f"{_R}: APIServer pid=133, 09-09 20:52-20:57: n10 on a fresh server (8.9%), n50",
        (
            Run(1024, 1024, 10, "dl-qwen25-32b-a100x1-rand1k1k-n10"),
            Run(1024, 1024, 50, "dl-qwen25-32b-a100x1-rand1k1k-n50"),
            Run(1024, 1024, 75, check="32B TP1 n75"),
        ),
    ),
    Session(
        "32B TP1 (pid 1358)",
        f"{_R}: APIServer pid=1358, 09-09 21:23: history not shown (39,700-token cache: ~38 "
        "prompts at most), taken as fresh",
        (Run(1024, 1024, 100, "dl-qwen25-32b-a100x1-rand1k1k-n100"),),
    ),
    Session(
        "32B TP2 (pid 126)",
        f"{_R}: APIServer pid=126, 09-07 00:41-00:56: n1 on a fresh server (49.2%), n10 "
        "(22.7%), n50, n100, n30, n20",
        (
            Run(1024, 1024, 1, "dl-qwen25-32b-a100x2tp2-rand1k1k-n1"),
            Run(1024, 1024, 10, check="32B TP2 n10"),
            Run(1024, 1024, 50, "dl-qwen25-32b-a100x2tp2-rand1k1k-n50"),
            Run(1024, 1024, 100, check="32B TP2 n100"),
            Run(1024, 1024, 30, check="32B TP2 n30"),
            Run(1024, 1024, 20, "dl-qwen25-32b-a100x2tp2-rand1k1k-n20"),
            Run(1024, 1024, 15, check="32B TP2 n15"),
        ),
    ),
    Session(
        "72B TP2 (pid 3151)",
        f"{_R}: APIServer pid=3151, 09-06 22:08: n1 on a fresh server (49.2%), then n10 (its "
        "log lines are a copy of n1's)",
        (
            Run(1024, 1024, 1, "dl-qwen2-72b-a100x2tp2-rand1k1k-n1"),
            Run(1024, 1024, 10, "dl-qwen2-72b-a100x2tp2-rand1k1k-n10"),
        ),
    ),
    Session(
        "72B TP2 (pid 2014)",
        f"{_R}: APIServer pid=2014, 09-07 01:25-01:29: n30 then n50 (what ran before n30 is "
        "not shown; 43,000-token cache)",
        (
            Run(1024, 1024, 30, check="72B TP2 n30"),
            Run(1024, 1024, 50, "dl-qwen2-72b-a100x2tp2-rand1k1k-n50"),
            Run(1024, 1024, 100, check="72B TP2 n100"),
        ),
    ),
)


def _m(
    dur: float, out: float, ttft: tuple[float, float, float], tpot: tuple[float, float]
) -> dict[str, float]:
    return {
        "duration_s": dur,
        "output_tok_s": out,
        "mean_ttft_ms": ttft[0],
        "median_ttft_ms": ttft[1],
        "p99_ttft_ms": ttft[2],
        "mean_tpot_ms": tpot[0],
        "median_tpot_ms": tpot[1],
    }


CHECKS: dict[str, dict[str, float]] = {
    # The README's "Serving Benchmark Result" of runs that are not published cases:
    # duration s, output tok/s, (mean, median, p99) TTFT ms, (mean, median) TPOT ms.
    "7B TP1 util0.25 n20": _m(15.22, 1338.72, (463.10, 364.37, 843.99), (14.36, 14.46)),
    "7B TP1 util0.25 n30": _m(16.74, 1830.69, (1033.68, 935.87, 1444.56), (15.19, 15.28)),
    "7B TP1 util0.25 n75": _m(35.99, 2131.91, (1140.94, 791.30, 2675.82), (24.02, 20.90)),
    "7B TP1 util0.5 n30": _m(15.56, 1967.90, (241.74, 240.32, 274.05), (14.93, 14.93)),
    "7B TP1 util0.5 n20": _m(14.70, 1387.31, (195.24, 199.99, 239.46), (14.12, 14.12)),
    "7B TP1 util0.5 n75": _m(25.64, 2991.02, (2598.85, 2543.58, 5063.67), (22.21, 22.27)),
    "7B TP2 util0.25 n20": _m(15.10, 1349.66, (550.45, 405.39, 1038.90), (14.17, 14.30)),
    "7B TP2 util0.25 n30": _m(16.58, 1847.17, (633.56, 729.59, 1101.59), (15.52, 15.43)),
    "7B TP2 util0.25 n75": _m(27.52, 2787.42, (1740.61, 1217.12, 4508.35), (24.93, 25.39)),
    "7B TP2 util0.25 1024/7168 n100": _m(
        295.52, 2404.42, (3659.36, 4546.82, 4865.53), (32.63, 28.91)
    ),
    "7B TP2 util0.25 n10": _m(13.92, 735.47, (601.91, 632.50, 916.26), (12.99, 12.96)),
    "7B TP2 util0.25 4096/4096 n10": _m(58.58, 699.24, (1676.30, 1790.69, 2613.44), (13.88, 13.85)),
    "7B TP2 util0.25 1024/7168 n10": _m(95.04, 726.59, (111.47, 112.36, 122.76), (13.23, 13.24)),
    "7B TP2 util0.25 4096/4096 n50": _m(
        102.53, 1957.56, (5291.07, 5070.00, 11893.81), (27.01, 23.72)
    ),
    "7B TP2 util0.25 1024/7168 n50": _m(146.97, 2380.86, (279.73, 278.82, 348.43), (20.40, 20.46)),
    "7B TP2 util0.25 n500": _m(143.45, 3515.49, (38204.56, 7941.96, 90563.28), (62.28, 59.75)),
    "32B TP1 n75": _m(226.03, 339.77, (61850.53, 10445.43, 150225.82), (76.73, 66.38)),
    "32B TP2 n10": _m(42.22, 242.57, (1853.66, 1965.27, 2940.46), (39.38, 39.27)),
    "32B TP2 n100": _m(193.49, 529.23, (44143.73, 11137.92, 151305.50), (80.12, 68.97)),
    "32B TP2 n30": _m(56.86, 540.32, (5368.61, 5441.43, 9262.94), (50.04, 49.98)),
    "32B TP2 n15": _m(40.58, 378.49, (213.45, 218.21, 236.19), (39.44, 39.43)),
    "72B TP2 n30": _m(148.43, 203.16, (10949.72, 11190.15, 19102.59), (104.71, 102.82)),
    "72B TP2 n100": _m(452.91, 219.94, (142448.58, 138530.00, 381085.60), (139.24, 119.61)),
}


def series_of(case: dict[str, Any]) -> str:
    """One server configuration (GPU, model, TP, memory knobs): the unit held out."""
    if case["id"].startswith("gs-"):
        return f"gpustack {gpu_of(case)}"
    k = case.get("knobs") or {}
    util = k.get("gpu_memory_utilization")
    return f"{case['model'].split('/')[-1]} TP{case.get('tensor_parallel') or 1}" + (
        f" util{util}" if util else ""
    )


# --- mapping a case to the simulator ---------------------------------------------------------
def gpu_of(case: dict[str, Any]) -> str:
    g = str(case["gpu"])
    if case["id"].startswith("dl-") and g == "A100-80GB":
        # SXM or PCIe is not stated; TP=2 scaled no better than TP=1 (2,292 vs 2,338 tok/s
        # at 50 prompts), which an NVLink pair would not show: modelled as the PCIe card.
        return "A100-80GB-PCIe"
    if g.startswith("A100-SXM"):
        return "A100-80GB"
    return GPU_MAP.get(g, g)


def scope(case: dict[str, Any]) -> str | None:
    """None when the case is in scope, else why not."""
    if case["engine"] != "vLLM":
        return f"{case['engine']}: another engine (printed for reference, not in the medians)"
    if "gpt-oss" in case["model"]:
        return "mixture-of-experts model with sliding-window layers (not modelled)"
    if "crossnode" in case["id"] or "across 2 nodes" in case.get("notes", "").lower():
        return "tensor parallelism across two nodes over the network (not modelled)"
    if (case.get("workload") or {}).get("dataset") == "sharegpt":
        return "ShareGPT workload (the dataset file is not available offline)"
    if case.get("out_of_scope"):
        return str(case["out_of_scope"])
    return None


def source_of(case: dict[str, Any]) -> str:
    """Who published the case: the unit left out (one lab's runs share a host, a client, a
    way of working; a fit is only tested on runs it has not seen when whole sources are)."""
    src = str(case.get("source", ""))
    for key, name in (
        ("dennislee22", "dennislee22"),
        ("gpustack", "gpustack"),
        ("TensorRT-LLM", "nvidia-trtllm"),
        ("vllm-project/vllm", "vllm-issues"),
        ("kvcached", "kvcached"),
    ):
        if key in src:
            return name
    return src.split()[0] if src else "unknown"


def vllm_version_of(case: dict[str, Any]) -> str:
    """The vLLM release of a case, for the memory planner's rules ("0.10.1.1 (V1)" ->
    "0.10.1.1"; the V0 engine -> "v0")."""
    text = str(case.get("engine_version") or "")
    if text.startswith("V0"):
        return "v0"
    for word in text.replace("(", " ").split():
        w = word.lstrip("v")
        if w[:2] == "0." and w.replace(".", "").isdigit():
            return w
    return "0.11.0"


def solve_util(ec: dict[str, Any], kv_gib: float, version: str | None = None) -> float:
    """The gpu_memory_utilization whose plan leaves ``kv_gib`` for the KV cache."""
    lo, hi = 0.05, 0.99
    for _ in range(40):
        mid = (lo + hi) / 2
        try:
            kv = plan_memory(
                EngineConfig(**{**ec, "gpu_memory_utilization": mid}), version
            ).kv_cache_gib
        except SimError:
            kv = -1.0
        if kv < kv_gib:
            lo = mid
        else:
            hi = mid
    return round((lo + hi) / 2, 3)


def engine_config(case: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    k = case.get("knobs") or {}
    notes: list[str] = []
    model = case["model"]
    quant = None
    if "FP8" in model or case.get("dtype") == "fp8":
        quant = "fp8"
    model = model.split(" ")[0]
    ec: dict[str, Any] = {
        "gpu": gpu_of(case),
        "model": model,
        "tensor_parallel_size": case.get("tensor_parallel") or 1,
        "quantization": quant,
    }
    for knob in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
        if isinstance(k.get(knob), int):
            ec[knob] = k[knob]
    if k.get("chunked_prefill") is False:
        ec["enable_chunked_prefill"] = False
    if "V0" in case.get("engine_version", "") and k.get("chunked_prefill") is None:
        ec["enable_chunked_prefill"] = False  # V0 default for contexts < 32k
    if case["id"].startswith("dl-") and "max_model_len" not in ec:
        ec["max_model_len"] = 16384
        notes.append("max_model_len 16384 from the case notes")
    util = k.get("gpu_memory_utilization")
    kv_gib = (case.get("measured") or {}).get("available_kv_cache_gib_per_gpu")
    if isinstance(util, (int, float)):
        ec["gpu_memory_utilization"] = float(util)
    elif kv_gib:
        ec["gpu_memory_utilization"] = solve_util(ec, kv_gib, vllm_version_of(case))
        notes.append(f"util {ec['gpu_memory_utilization']} solved from the logged {kv_gib} GiB")
    return ec, notes


def pod_network(case: dict[str, Any]) -> bool:
    """TP across two Kubernetes pods on one node (NCCL over the pod network)."""
    return case["id"].startswith("dl-") and (case.get("tensor_parallel") or 1) > 1


SOCKET_PRIOR = {"pod_allreduce_latency_us": 34.0, "pod_link_gb_s": 9.0}
"""TP across pods when no other source's pod runs can be fitted on: vLLM's ranks in two pods
share no IPC namespace, so NCCL can use neither P2P nor shared memory between them and falls
back to its network transport (TCP sockets). Its cost, from a public nccl-tests run between
containers over TCP sockets (openucx/ucx#10055, ``all_reduce_perf``, NCCL_SOCKET_IFNAME): an
8-byte all-reduce takes ~34 us and large ones reach ~9 GB/s bus bandwidth. Not fitted, and
not read from the runs it is used for."""


# --- the fitted constants ----------------------------------------------------------------------
PARAMS = (
    # name, lower, upper: hard bounds, each a range a real server can be in (see PARAM_WHY)
    ("ampere_mfu", 0.30, 0.80),
    ("hopper_mfu", 0.20, 0.80),
    ("mbu", 0.55, 0.92),
    ("step_overhead_ms", 0.3, 5.0),
    ("per_seq_overhead_us", 2.0, 80.0),
    ("frontend_per_request_ms", 0.5, 20.0),
    ("frontend_chat_per_request_ms", 0.0, 40.0),
    ("frontend_chat_per_token_us", 0.0, 1000.0),
    ("frontend_latency_ms", 0.0, 30.0),
    ("pod_allreduce_latency_us", 10.0, 300.0),
    ("pod_link_gb_s", 1.0, 32.0),
)
PARAM_NAMES = tuple(p[0] for p in PARAMS)
PARAM_WHY = {
    "ampere_mfu": "share of dense BF16 peak the GEMMs and attention reach on an Ampere GPU "
    "(A100, A10G, RTX 3090); above 0.8 no vLLM kernel mix gets there",
    "hopper_mfu": "the same on a Hopper GPU (H100, H200): its own, as Hopper's kernels in vLLM "
    "reach a smaller share of a datasheet peak that doubled",
    "mbu": "share of the datasheet memory bandwidth a decode step streams weights and KV at: "
    "one value for every GPU (a copy kernel reaches 0.85-0.92 of HBM or GDDR peak)",
    "step_overhead_ms": "CPU per engine step (scheduling, input preparation, output)",
    "per_seq_overhead_us": "CPU per request in a step",
    "frontend_per_request_ms": "the API server's serial intake per request (completions)",
    "frontend_chat_per_request_ms": "its extra per chat request (messages, chat template)",
    "frontend_chat_per_token_us": "its extra per streamed token of a chat request (a chat "
    "chunk: choices, delta, role)",
    "frontend_latency_ms": "sampling to client, per token",
    "pod_allreduce_latency_us": "TP over a Kubernetes pod network: NCCL latency per all-reduce",
    "pod_link_gb_s": "TP over a Kubernetes pod network: its bandwidth",
}
FIXED = {"frontend_per_token_us": 0.0}
"""Not fitted: the API server's cost per streamed token. V1's output processing runs in the API
server process beside the engine core, and the fits that let it move put it at 0 on every
source but one, where it stood in for the chat intake (179 µs a token, which would make the
0.6B burst of kvcached 10× slower than it ran)."""


def family(gpu: str) -> str | None:
    """The GPU generation whose compute efficiency applies (None: neither)."""
    if gpu.startswith(("A100", "A10", "RTX-3090")):
        return "ampere"
    if gpu.startswith(("H100", "H200")):
        return "hopper"
    return None


def load_params() -> dict[str, float]:
    """The constants in efficiency.json, as the fit's parameter vector."""
    table = json.loads(EFFICIENCY_JSON.read_text())
    a100, h100 = table["gpus"]["A100-80GB"], table["gpus"]["H100-SXM"]
    host, pod = table.get("host", {}), table.get("pod_network", {})
    return {
        "ampere_mfu": a100["mfu"],
        "hopper_mfu": h100["mfu"],
        "mbu": a100["mbu"],
        "step_overhead_ms": a100["step_overhead_ms"],
        "per_seq_overhead_us": a100["per_seq_overhead_us"],
        "frontend_per_request_ms": host.get("frontend_per_request_ms", 0.0),
        "frontend_chat_per_request_ms": host.get("frontend_chat_per_request_ms", 0.0),
        "frontend_chat_per_token_us": host.get("frontend_chat_per_token_us", 0.0),
        "frontend_latency_ms": host.get("frontend_latency_ms", 0.0),
        "pod_allreduce_latency_us": pod.get("allreduce_latency_us", 50.0),
        "pod_link_gb_s": pod.get("link_gb_s", 4.0),
        **FIXED,
    }


def write_params(p: dict[str, float]) -> None:
    """Put fitted constants into efficiency.json (sources kept; transferred entries follow
    the generation they were transferred from)."""
    table = json.loads(EFFICIENCY_JSON.read_text())
    shared = {
        "mbu": round(p["mbu"], 4),
        "step_overhead_ms": round(p["step_overhead_ms"], 3),
        "per_seq_overhead_us": round(p["per_seq_overhead_us"], 2),
    }
    for name, entry in [("default", table["default"]), *table["gpus"].items()]:
        fam = "hopper" if name.startswith(("H100", "H200")) else "ampere"
        entry.update(shared)
        entry["mfu"] = round(p[f"{fam}_mfu"], 4)
    table["host"]["frontend_per_request_ms"] = round(p["frontend_per_request_ms"], 3)
    table["host"]["frontend_chat_per_request_ms"] = round(p["frontend_chat_per_request_ms"], 3)
    table["host"]["frontend_chat_per_token_us"] = round(p["frontend_chat_per_token_us"], 2)
    table["host"]["frontend_per_token_us"] = round(p["frontend_per_token_us"], 2)
    table["host"]["frontend_latency_ms"] = round(p["frontend_latency_ms"], 3)
    table["pod_network"]["allreduce_latency_us"] = round(p["pod_allreduce_latency_us"], 2)
    table["pod_network"]["link_gb_s"] = round(p["pod_link_gb_s"], 3)
    EFFICIENCY_JSON.write_text(json.dumps(table, indent=2, ensure_ascii=False) + "\n")


def async_default(version: str) -> bool:
    """vLLM's async scheduling is on by default in the releases after vLLM PR #27614
    (opened 2025-10-27, after 0.11.0's release): 0.12 and later here. No case of this data
    set is on a release in between (0.11.1, 0.11.2)."""
    v = version.strip().lower().lstrip("v")
    parts = [int(x) for x in v.split(".")[:2] if x.isdigit()]
    return len(parts) == 2 and parts[0] == 0 and parts[1] >= 12


def efficiency_for(
    gpu: str, p: dict[str, float], pod: bool, async_scheduling: bool = False
) -> Efficiency:
    base = efficiency(find_gpu(gpu))
    fam = family(gpu)
    upd: dict[str, Any] = {
        "mbu": p["mbu"],
        "step_overhead_ms": p["step_overhead_ms"],
        "per_seq_overhead_us": p["per_seq_overhead_us"],
        "frontend_per_request_ms": p["frontend_per_request_ms"],
        "frontend_chat_per_request_ms": p["frontend_chat_per_request_ms"],
        "frontend_chat_per_token_us": p.get("frontend_chat_per_token_us", 0.0),
        "frontend_per_token_us": p.get("frontend_per_token_us", 0.0),
        "frontend_latency_ms": p["frontend_latency_ms"],
    }
    if fam is not None:
        upd["mfu"] = p[f"{fam}_mfu"]
    upd["async_scheduling"] = async_scheduling
    if pod:
        upd["allreduce_latency_us"] = p["pod_allreduce_latency_us"]
    return base.model_copy(update=upd)


# --- simulating ------------------------------------------------------------------------------
def output_lens(n: int, out: int, measured_total: float | None) -> list[int]:
    """Per-request output lengths whose sum is the run's generated-token total: the tokens
    missing below n × out come from requests spread over the run, each stopping at half."""
    lens = [out] * n
    if not measured_total or n == 0:
        return lens
    deficit = n * out - round(measured_total)
    if deficit <= 0 or out < 4:
        return lens
    half = out // 2
    k = min(n, -(-deficit // half))
    for j in range(k):
        i = (j * n) // k
        cut = min(half, deficit)
        lens[i] = out - cut
        deficit -= cut
    return lens


def measured_output_total(case: dict[str, Any] | None) -> float | None:
    if case is None:
        return None
    m = case.get("measured") or {}
    if m.get("total_output_tokens"):
        return float(m["total_output_tokens"])
    if m.get("output_tok_s") and m.get("duration_s"):
        return float(m["output_tok_s"]) * float(m["duration_s"])
    return None


def _plan(lens: list[tuple[int, int]], rate: float = math.inf) -> Plan:
    """The requests, all sent at t=0 or, at a finite rate, on Poisson arrivals (vLLM's own
    draws cannot be replayed: its generator is not ours; the same process is)."""
    offs = arrival_offsets("poisson", rate, len(lens), seed=42)
    return Plan(
        requests=[RequestSpec(prompt="", input_len=i, output_len=o) for i, o in lens],
        offsets_ns=[int(t * 1e9) for t in offs],
    )


def metrics_of(sim: OfflineRun) -> dict[str, float]:
    recs = [x for x in sim.records if x.status == "ok"]
    dur = max(x.end_ns for x in recs) / 1e9
    ttft = sorted(x.ttft_ms or 0.0 for x in recs)
    tpot = [t for x in recs if (t := x.tpot_ms) is not None]
    p99 = ttft[min(len(ttft) - 1, math.ceil(0.99 * len(ttft)) - 1)]
    return {
        "output_tok_s": sum(x.output_tokens or 0 for x in recs) / dur,
        "mean_ttft_ms": statistics.fmean(ttft),
        "p99_ttft_ms": p99,
        "mean_tpot_ms": statistics.fmean(tpot) if tpot else float("nan"),
        "median_tpot_ms": statistics.median(tpot) if tpot else float("nan"),
        "preemptions": float(sim.eng.counters.preemptions),
    }


def new_engine(case: dict[str, Any], p: dict[str, float]) -> tuple[Engine, list[str]]:
    ec, notes = engine_config(case)
    pod = pod_network(case)
    if pod:
        if p.get("pod_fitted", 1.0) <= 0:  # no pod runs to fit on: NCCL's socket transport
            p = {**p, **SOCKET_PRIOR}
        ec["interconnect_gb_s"] = p["pod_link_gb_s"]
        how = "fitted" if p.get("pod_fitted", 1.0) > 0 else "NCCL socket-transport prior"
        notes.append(
            f"pod-to-pod all-reduce {p['pod_allreduce_latency_us']:.0f} us + "
            f"{p['pod_link_gb_s']:.1f} GB/s ({how})"
        )
    r = EngineConfig(**ec).resolve()
    mem = plan_memory(r, vllm_version_of(case))
    eff = efficiency_for(r.gpu.name, p, pod, async_default(vllm_version_of(case)))
    eng = Engine(r, mem, StepModel(r, eff))
    return eng, notes


def run_on(
    eng: Engine,
    inp: int,
    outs: list[int],
    test_request: bool = True,
    ids: bool = True,
    rate: float = math.inf,
    chat: bool = False,
) -> tuple[OfflineRun, int]:
    """One ``vllm bench serve`` run on ``eng``: the test request (prompt 0) alone, then all
    prompts at once. Returns the run and how many of its prompts were cached at its start.
    ``ids``: prompt i is the same text in every run of the engine (seeded random dataset)."""
    r, mem = eng.cfg, eng.mem
    cfg = BenchConfig(
        random_input_len=inp,
        random_output_len=outs[0],
        num_prompts=len(outs),
        endpoint="chat" if chat else "completions",
    )
    if test_request:
        OfflineRun(_plan([(inp, outs[0])]), cfg, r, mem, engine=eng, prompt_ids=True).run()
    warm = sum(1 for i in range(len(outs)) if eng.pool.match((("p", i, 0),)))
    sim = OfflineRun(
        _plan([(inp, o) for o in outs], rate),
        cfg,
        r,
        mem,
        engine=eng,
        prompt_ids=ids,
        warm_prompts=1 if test_request else 0,
        token_times=False,
    )
    sim.run()
    return sim, warm


@dataclass
class CaseResult:
    sim: dict[str, float]
    warm: int
    session: str
    notes: list[str]
    took: float


def simulate_cases(
    cases: list[dict[str, Any]],
    p: dict[str, float],
    warm_mode: str = "logs",
    only: Iterable[str] | None = None,
    checks: bool = False,
) -> dict[str, CaseResult]:
    """Simulate the workload cases (in scope or not, no TRT sweeps); ``only``: these ids.
    ``checks``: the README's other runs too (keyed ``check:<name>``; replay mode only)."""
    by_id = {c["id"]: c for c in cases}
    wanted = set(only) if only is not None else None
    out: dict[str, CaseResult] = {}
    covered: set[str] = set()
    sessions: list[Session] = []
    if warm_mode == "logs":
        for s in SESSIONS:
            ids = [r.case for r in s.runs if r.case in by_id]
            covered.update(x for x in ids if x is not None)
            if wanted is None or wanted & set(ids):
                sessions.append(s)
    for c in cases:
        w = c.get("workload") or {}
        if not w or "sweep" in w or w.get("dataset") == "sharegpt" or c["id"] in covered:
            continue
        if wanted is None or c["id"] in wanted:
            rate = w.get("request_rate", "inf")
            run = Run(
                w["input_len"],
                w["output_len"],
                w["num_prompts"],
                c["id"],
                rate=math.inf if rate in (None, "inf") else float(rate),
                chat="chat" in str(w.get("endpoint", "")),
            )
            sessions.append(Session(c["id"], "a single run on a fresh server", (run,)))
    for s in sessions:
        first = next(by_id[r.case] for r in s.runs if r.case in by_id)
        try:
            eng, notes = new_engine(first, p)
        except SimError as exc:
            for r in s.runs:
                if r.case:
                    out[r.case] = CaseResult({}, 0, s.name, [f"refused: {exc.message}"], 0.0)
            continue
        last = max(i for i, r in enumerate(s.runs) if r.case in by_id or (checks and r.check))
        for r in s.runs[: last + 1]:
            case = by_id.get(r.case) if r.case else None
            total = measured_output_total(case)
            if r.check:
                m = CHECKS[r.check]
                total = m["output_tok_s"] * m["duration_s"]
            t = time.perf_counter()
            outs = output_lens(r.n, r.output_len, total)
            sim, warm = run_on(
                eng,
                r.input_len,
                outs,
                test_request=warm_mode != "cold",
                rate=r.rate,
                chat=r.chat,
            )
            if r.case and case is not None:
                out[r.case] = CaseResult(
                    metrics_of(sim), warm, s.name, list(notes), time.perf_counter() - t
                )
            elif r.check and checks:
                out["check:" + r.check] = CaseResult(
                    metrics_of(sim), warm, s.name, list(notes), time.perf_counter() - t
                )
            if warm_mode != "logs":
                eng, notes = new_engine(first, p)
    return out


def err(sim: float, meas: float) -> float:
    return (sim - meas) / meas * 100.0


def in_scope_workload(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        c for c in cases if c.get("workload") and "sweep" not in c["workload"] and scope(c) is None
    ]


def case_errors(
    cases: list[dict[str, Any]], results: dict[str, CaseResult]
) -> dict[str, dict[str, float]]:
    """case id -> metric -> signed % error."""
    out: dict[str, dict[str, float]] = {}
    for c in cases:
        res = results.get(c["id"])
        if res is None or not res.sim:
            continue
        m = c["measured"]
        out[c["id"]] = {k: err(res.sim[k], m[k]) for k, _ in METRICS if m.get(k) and k in res.sim}
    return out


def medians(errs: dict[str, dict[str, float]]) -> dict[str, tuple[float | None, int]]:
    out: dict[str, tuple[float | None, int]] = {}
    for k, _ in METRICS:
        v = [abs(e[k]) for e in errs.values() if k in e]
        out[k] = (statistics.median(v) if v else None, len(v))
    return out


# --- fitting -------------------------------------------------------------------------------------
def session_groups(ids: list[str]) -> list[tuple[str, ...]]:
    """The case ids grouped by the server session that runs them (:data:`SESSIONS`; a case
    outside them runs alone)."""
    wanted = set(ids)
    groups: list[tuple[str, ...]] = []
    seen: set[str] = set()
    for sess in SESSIONS:
        g = tuple(r.case for r in sess.runs if r.case in wanted)
        if g:
            groups.append(g)
            seen.update(g)
    groups += [(i,) for i in ids if i not in seen]
    return groups


def relevant_params(group: list[dict[str, Any]]) -> tuple[str, ...]:
    """The constants a session's results depend on."""
    names = [
        "mbu",
        "step_overhead_ms",
        "per_seq_overhead_us",
        "frontend_per_request_ms",
        "frontend_per_token_us",
        "frontend_latency_ms",
    ]
    fams = {family(gpu_of(c)) for c in group} - {None}
    names += [f"{f}_mfu" for f in sorted(f for f in fams if f)]
    if any("chat" in str((c.get("workload") or {}).get("endpoint", "")) for c in group):
        names += ["frontend_chat_per_request_ms", "frontend_chat_per_token_us"]
    if any(pod_network(c) for c in group):
        names += ["pod_allreduce_latency_us", "pod_link_gb_s", "pod_fitted"]
    return tuple(names)


# Simulated sessions, kept across fits and folds: (case ids, the constants they depend on) ->
# results. Every fit of every fold starts from the same neutral constants, so the folds share
# most of their first evaluations.
_CACHE: dict[tuple[tuple[str, ...], tuple[float, ...]], dict[str, CaseResult]] = {}
_POOL_CASES: list[dict[str, Any]] = []


def _simulate_group(args: tuple[dict[str, float], tuple[str, ...]]) -> dict[str, CaseResult]:
    p, ids = args
    return simulate_cases(_POOL_CASES, p, only=ids)


class Evaluator:
    """Simulates what a fit asks for, session by session, from the cache when it can and in
    ``jobs`` worker processes when several sessions are new (a Jacobian's columns at once)."""

    def __init__(self, cases: list[dict[str, Any]], jobs: int = 1) -> None:
        self.cases = cases
        self.jobs = jobs
        self._pool: Any = None
        self.simulated = 0

    def __enter__(self) -> Evaluator:
        if self.jobs > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            _POOL_CASES[:] = self.cases
            self._pool = ProcessPoolExecutor(
                self.jobs, mp_context=multiprocessing.get_context("fork")
            )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)

    def results(
        self, requests: list[tuple[dict[str, float], tuple[str, ...], tuple[str, ...]]]
    ) -> list[dict[str, CaseResult]]:
        """For each (constants, session ids, the constants it depends on): its results."""
        keys = [(g, tuple(p.get(n, 0.0) for n in names)) for p, g, names in requests]
        todo: dict[Any, tuple[dict[str, float], tuple[str, ...]]] = {}
        for (p, g, _), key in zip(requests, keys, strict=True):
            if key not in _CACHE and key not in todo:
                todo[key] = (p, g)
        if todo:
            self.simulated += len(todo)
            if self._pool is not None and len(todo) > 1:
                done = list(self._pool.map(_simulate_group, todo.values()))
            else:
                done = [simulate_cases(self.cases, p, only=g) for p, g in todo.values()]
            _CACHE.update(zip(todo.keys(), done, strict=True))
        return [_CACHE[k] for k in keys]


FIT_TOL = 1e-3
"""A fit stops when a step changes the cost, or every constant, by less than 0.1%: the
result is the optimum, not where an iteration count ran out."""
FIT_LOG: list[str] = []
"""How each fit ended (evaluations used, converged or stopped at the limit)."""


def measured_priors() -> dict[str, tuple[float, float]]:
    """Constants with a measurement independent of the published runs (``efficiency.json``,
    ``priors``): name -> (measured value, σ of its log). The fit adds one residual per such
    constant, (ln value − ln measured)/σ: where the runs pin the constant they outweigh it,
    where they cannot (a fold whose runs are all CPU-, front-end- or compute-bound leaves the
    bandwidth efficiency flat) the measurement decides instead of the iteration count."""
    table = json.loads(EFFICIENCY_JSON.read_text())
    return {
        n: (float(v["value"]), float(v["sigma_log"])) for n, v in table.get("priors", {}).items()
    }


def untold() -> dict[str, Any]:
    """What a fold uses for a constant its training runs cannot tell (``efficiency.json``,
    ``untold``): measurements of the mechanism made apart from the published runs. The
    compute-efficiency shares of peak that a GEMM reaches per generation (``mamf_efficiency``:
    a generation the training runs cannot tell takes the other's fitted value times the ratio
    of these shares) and the chat endpoint's extra API-server cost per request and per
    streamed token (``benchmarks/chat_intake_cost.py``), taken when no training run sent chat
    requests."""
    table = json.loads(EFFICIENCY_JSON.read_text())
    u = table.get("untold", {})
    mamf = u.get("mamf_efficiency", {})
    return {
        "mamf": {f: float(mamf[f]) for f in ("ampere", "hopper") if f in mamf},
        "frontend_chat_per_request_ms": float(
            u.get("frontend_chat_per_request_ms", {}).get("value", 0.0)
        ),
        "frontend_chat_per_token_us": float(
            u.get("frontend_chat_per_token_us", {}).get("value", 0.0)
        ),
        "chat_share_by_release": {
            str(r): float(v)
            for r, v in u.get("frontend_chat_per_request_ms", {})
            .get("share_of_completions", {})
            .items()
        },
    }


def chat_per_request_untold(
    p: dict[str, float], held: list[dict[str, Any]], measured: dict[str, Any]
) -> float:
    """The chat path's extra cost a request for a fold whose training runs sent no chat
    request: the left-out runs' release's chat extra as a share of its completions path, both
    measured on the same vLLM here (:func:`untold`, ``share_of_completions``), times the
    completions cost a request the fold fitted (the fitted host's speed; the measured ratio of
    the two paths on that release). A release not measured takes ``value``. The release is a
    stated property of the left-out set-up, not a figure of its runs."""
    shares = measured["chat_share_by_release"]
    releases = {
        vllm_version_of(c)
        for c in held
        if "chat" in str((c.get("workload") or {}).get("endpoint", ""))
    }
    if len(releases) == 1 and (r := releases.pop()) in shares:
        return p["frontend_per_request_ms"] * shares[r]
    return float(measured["frontend_chat_per_request_ms"])


def transferred_mfu(p: dict[str, float], fam: str, other: str) -> float:
    """The compute efficiency of generation ``fam`` that its runs cannot tell, from
    ``other``'s fitted one: times the ratio of the shares of peak a BF16 GEMM reaches on each
    (:func:`untold`, ``mamf``; 1 where either is not measured)."""
    mamf = untold()["mamf"]
    ratio = mamf[fam] / mamf[other] if fam in mamf and other in mamf else 1.0
    return p[f"{other}_mfu"] * ratio


def fit(
    cases: list[dict[str, Any]],
    start: dict[str, float],
    free: tuple[str, ...] = PARAM_NAMES,
    max_nfev: int = 200,
    quiet: bool = False,
    jobs: int = 1,
) -> dict[str, float]:
    """Least squares (soft-L1) on the log errors (output tok/s, mean TPOT, mean TTFT) of
    ``cases``, within the bounds of :data:`PARAMS`. The Jacobian is one forward difference per
    constant, its columns simulated together (only the sessions each constant touches)."""
    import numpy as np
    from scipy.optimize import least_squares

    bounds = {n: (lo, hi) for n, lo, hi in PARAMS}
    priors = measured_priors()
    ids = [c["id"] for c in cases]
    calls = [0]
    groups = [(g, relevant_params([c for c in cases if c["id"] in g])) for g in session_groups(ids)]
    lo = np.array([bounds[n][0] for n in free])
    hi = np.array([bounds[n][1] for n in free])
    # a constant at (or near) 0 still gets a step and a scale it can move by: 5% of its range
    floor = np.maximum(0.05 * (hi - lo), 1e-6)

    def params(x: Any) -> dict[str, float]:
        p = dict(start)
        p.update({n: float(v) for n, v in zip(free, x, strict=True)})
        return p

    def vector(res: dict[str, CaseResult]) -> Any:
        out = []
        for c in cases:
            r = res.get(c["id"])
            for k in FIT_KEYS:
                meas = c["measured"].get(k)
                if not meas:
                    continue
                sim = r.sim.get(k) if r is not None and r.sim else None
                out.append(math.log(sim / meas) if sim and sim > 0 else 3.0)
        return np.array(out)

    def evaluate_many(ev: Evaluator, xs: list[Any]) -> list[Any]:
        reqs = []
        for x in xs:
            p = params(x)
            reqs += [(p, g, names) for g, names in groups]
        got = ev.results(reqs)
        out = []
        for i, x in enumerate(xs):
            res: dict[str, CaseResult] = {}
            for r in got[i * len(groups) : (i + 1) * len(groups)]:
                res.update(r)
            out.append(np.concatenate([vector(res), prior_terms(x)]))
        return out

    def prior_terms(x: Any) -> Any:
        """A measured constant's prior: (ln value − ln measured) / σ, one residual each."""
        return np.array(
            [
                math.log(float(v) / priors[n][0]) / priors[n][1]
                for n, v in zip(free, x, strict=True)
                if n in priors
            ]
        )

    with Evaluator(cases, jobs) as ev:

        def residuals(x: Any) -> Any:
            calls[0] += 1
            (f,) = evaluate_many(ev, [x])
            if not quiet:
                print(
                    f"  fit: evaluation {calls[0]}, cost {0.5 * float(f @ f):.3f}, "
                    f"{ev.simulated} sessions simulated",
                    file=sys.stderr,
                )
            return f

        def jac(x: Any) -> Any:
            steps = []
            for i in range(len(x)):
                h = 0.03 * max(abs(x[i]), floor[i])
                if x[i] + h > hi[i]:
                    h = -h
                steps.append(h)
            xs = [x]
            for i, h in enumerate(steps):
                xi = x.copy()
                xi[i] += h
                xs.append(xi)
            fs = evaluate_many(ev, xs)
            return np.column_stack([(fs[i + 1] - fs[0]) / steps[i] for i in range(len(x))])

        x0 = np.array([min(max(start[n], bounds[n][0]), bounds[n][1]) for n in free])
        sol = least_squares(
            residuals,
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


def tells(
    cases: list[dict[str, Any]], p: dict[str, float], name: str, jobs: int = 1, rel: float = 0.2
) -> bool:
    """Can these runs tell constant ``name``? Only when their results move both ways, by ≥ 1%
    on some fitted metric, as the constant moves ±``rel`` around ``p``: a constant the runs
    bound from one side only (e.g. the compute efficiency of a GPU whose runs are CPU- or
    bandwidth-bound: any value above the one that would make them compute-bound fits them
    equally) is not fitted from them — a fit would leave it wherever its iterations stop."""
    ids = [c["id"] for c in cases]
    if not ids:
        return False
    groups = [(g, relevant_params([c for c in cases if c["id"] in g])) for g in session_groups(ids)]
    variants = [p, {**p, name: p[name] * (1 + rel)}, {**p, name: p[name] * (1 - rel)}]
    with Evaluator(cases, jobs) as ev:
        got = ev.results([(q, g, names) for q in variants for g, names in groups])
    res: list[dict[str, CaseResult]] = [{}, {}, {}]
    for i, r in enumerate(got):
        res[i // len(groups)].update(r)

    def moved(a: dict[str, CaseResult], b: dict[str, CaseResult]) -> float:
        out = 0.0
        for cid in ids:
            for k in FIT_KEYS:
                x, y = a[cid].sim.get(k), b[cid].sim.get(k)
                if x and y and x > 0 and y > 0:
                    out = max(out, abs(math.log(x / y)))
        return out

    return moved(res[0], res[1]) >= 0.01 and moved(res[0], res[2]) >= 0.01


def loso(
    cases: list[dict[str, Any]],
    p: dict[str, float],
    quiet: bool = False,
    max_nfev: int = 30,
    jobs: int = 1,
    only: Iterable[str] | None = None,
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Leave one source out: for every source, fit the constants on the other sources' cases
    only, then predict the left-out source's cases. What the left-out runs alone could tell
    is not used: a GPU generation with no case among the other sources, or whose cases there
    cannot tell its compute efficiency (:func:`tells`), takes the compute efficiency of the
    generation whose cases can, scaled by the GEMM's measured reach on each chip
    (:func:`untold`, ``mamf``), the chat endpoint's extras are the ones measured on vLLM
    (:func:`untold`, ``benchmarks/chat_intake_cost.py``; a request's extra as that release's
    measured share of the completions path, :func:`chat_per_request_untold`) when no other
    source sent chat requests, and TP over a Kubernetes pod network (the dennislee22
    runs) takes NCCL's socket-transport cost (:data:`SOCKET_PRIOR`) when no other source has such
    runs. Starts each
    fit from neutral constants, not from the full fit. ``only``: these sources' folds.
    Returns (errors of every case when its source was left out, constants per fold)."""
    mine = in_scope_workload(cases)
    by_source: dict[str, list[dict[str, Any]]] = {}
    for c in mine:
        by_source.setdefault(source_of(c), []).append(c)
    errs: dict[str, dict[str, float]] = {}
    fold_params: dict[str, dict[str, float]] = {}
    wanted = set(only) if only is not None else None
    for name, held in by_source.items():
        if wanted is not None and name not in wanted:
            continue
        train = [c for c in mine if source_of(c) != name]
        if not train:
            continue
        start = dict(NEUTRAL)
        start["pod_fitted"] = 1.0 if any(pod_network(c) for c in train) else 0.0
        measured = untold()
        fams = {
            f
            for f in {family(gpu_of(c)) for c in train}
            if f is not None
            and tells([c for c in train if family(gpu_of(c)) == f], start, f"{f}_mfu", jobs)
        }
        free = [
            n
            for n in PARAM_NAMES
            if not n.endswith("_mfu")
            and not n.startswith("pod")
            and not n.startswith("frontend_chat")
        ]
        chat_names = ("frontend_chat_per_request_ms", "frontend_chat_per_token_us")
        if any("chat" in str((c.get("workload") or {}).get("endpoint", "")) for c in train):
            free += list(chat_names)
        else:  # no training run sent chat: the chat path's cost as measured on vLLM itself
            start.update({n: measured[n] for n in chat_names})
        for fam in ("ampere", "hopper"):
            if fam in fams:
                free.append(f"{fam}_mfu")
        pod = any(pod_network(c) for c in train)
        if pod:
            free += ["pod_allreduce_latency_us", "pod_link_gb_s"]
        if not quiet:
            told = ", ".join(sorted(fams)) or "none"
            print(
                f"  left out {name}: compute efficiency told by the rest for {told}",
                file=sys.stderr,
            )
        t = time.perf_counter()
        q = fit(train, start, free=tuple(free), max_nfev=max_nfev, quiet=True, jobs=jobs)
        for fam, other in (("ampere", "hopper"), ("hopper", "ampere")):
            if fam not in fams and other in fams:  # transfer: the other generation's
                q[f"{fam}_mfu"] = transferred_mfu(q, fam, other)
        if not any("chat" in str((c.get("workload") or {}).get("endpoint", "")) for c in train):
            q["frontend_chat_per_request_ms"] = chat_per_request_untold(q, held, measured)
        if not pod:  # what new_engine uses for the left-out pod runs: shown as such
            q.update(SOCKET_PRIOR)
        fold_params[name] = q
        with Evaluator(cases, jobs) as ev:
            held_groups = [
                (q, g, relevant_params([c for c in held if c["id"] in g]))
                for g in session_groups([c["id"] for c in held])
            ]
            res: dict[str, CaseResult] = {}
            for r in ev.results(held_groups):
                res.update(r)
        errs.update(case_errors(held, res))
        if not quiet:
            src_meds = medians(case_errors(held, res))
            print(
                f"  left out {name} ({len(held)} cases): fitted on {len(train)} cases of "
                f"{', '.join(sorted({source_of(c) for c in train}))} in "
                f"{time.perf_counter() - t:.0f} s ({FIT_LOG[-1]}); "
                + ", ".join(
                    f"{lab} {v:.1f}%" for k, lab in METRICS if (v := src_meds[k][0]) is not None
                ),
                file=sys.stderr,
            )
    return errs, fold_params


NEUTRAL: dict[str, float] = {
    "ampere_mfu": 0.5,
    "hopper_mfu": 0.5,
    "mbu": 0.75,
    "step_overhead_ms": 2.0,
    "per_seq_overhead_us": 30.0,
    "frontend_per_request_ms": 5.0,
    "frontend_chat_per_request_ms": 0.0,
    "frontend_chat_per_token_us": 0.0,
    "frontend_latency_ms": 5.0,
    "pod_allreduce_latency_us": 50.0,
    "pod_link_gb_s": 8.0,
    **FIXED,
}
"""Where every fit starts: round figures, none taken from a fit."""


# --- printing --------------------------------------------------------------------------------
def memory_rows(case: dict[str, Any]) -> list[tuple[str, float | None, float, str]]:
    """(metric, simulated, measured, note) for a memory-planner case."""
    ec, _ = engine_config(case)
    m = case["measured"]
    rows: list[tuple[str, float | None, float, str]] = []
    try:
        mem = plan_memory(EngineConfig(**ec), vllm_version_of(case))
    except SimError as exc:
        refused = "refuses: " + exc.message.split(".")[0][:70]
        if "max_kv_tokens" in m:
            rows.append(("start-up", None, float(m["max_kv_tokens"]), refused))
        return rows
    if "Startup fails" in case.get("notes", ""):
        rows.append(("start-up", None, 0.0, "simulator starts, vLLM refused (MISMATCH)"))
    if m.get("gpu_kv_cache_tokens"):
        rows.append(("KV tokens", mem.kv_cache_tokens, float(m["gpu_kv_cache_tokens"]), ""))
    elif m.get("gpu_kv_blocks"):
        rows.append(("KV blocks", mem.num_gpu_blocks, float(m["gpu_kv_blocks"]), ""))
    for length, conc in (m.get("max_concurrency_at_len") or {}).items():
        rows.append((f"max conc @{length}", mem.kv_cache_tokens / int(length), float(conc), ""))
    if m.get("available_kv_cache_gib_per_gpu") and case.get("knobs", {}).get(
        "gpu_memory_utilization"
    ):
        rows.append(("KV GiB", mem.kv_cache_gib, float(m["available_kv_cache_gib_per_gpu"]), ""))
    return rows


def print_memory(cases: list[dict[str, Any]]) -> list[float]:
    errs: list[float] = []
    for case in cases:
        if case.get("workload"):
            continue
        why = scope(case)
        for metric, sim, meas, note in memory_rows(case):
            e = err(sim, meas) if sim is not None and meas else None
            if e is not None and why is None:
                errs.append(abs(e))
            shown = "-" if sim is None else f"{sim:,.2f}"
            es = "" if e is None else f"{e:+6.1f}%"
            print(
                f"  {case['id']:<44} {metric:<16} sim {shown:>12}  meas {meas:>12,.2f}  "
                f"{es:>8} {note}" + ("" if why is None else f"  [excluded: {why}]")
            )
    return errs


def reference_rows(cases: list[dict[str, Any]], p: dict[str, float]) -> list[str]:
    """TensorRT-LLM's offline max-throughput sweeps, simulated as vLLM would run them."""
    lines: list[str] = []
    for case in cases:
        w = case.get("workload") or {}
        if "sweep" not in w:
            continue
        for point in w["sweep"]:
            n = min(point["num_requests"], 3000)
            try:
                eng, _ = new_engine(case, p)
            except SimError as exc:
                lines.append(f"{case['id']}: refused ({exc.message[:60]})")
                break
            sim, _ = run_on(eng, point["input_len"], [point["output_len"]] * n, False, False)
            got = metrics_of(sim)["output_tok_s"]
            lines.append(
                f"{case['id']:<36} {point['input_len']:>5}/{point['output_len']:<5} "
                f"sim {got:>8,.0f} tok/s  TRT-LLM {point['output_tok_s']:>8,} "
                f" {err(got, point['output_tok_s']):+6.1f}%"
            )
    return lines


def print_cases(
    cases: list[dict[str, Any]],
    results: dict[str, CaseResult],
    held: dict[str, dict[str, float]] | None,
) -> None:
    for case in cases:
        res = results.get(case["id"])
        if res is None:
            continue
        why = scope(case)
        extra = [f"series {series_of(case)}", f"{res.warm} of its prompts cached at start"]
        print(
            f"  {case['id']}  [{case['trust']} trust; {res.took:.2f}s; {'; '.join(extra)}]"
            + ("" if why is None else f"  [excluded: {why}]")
            + (f"  ({'; '.join(res.notes)})" if res.notes else "")
        )
        if not res.sim:
            continue
        m = case["measured"]
        for key, label in METRICS:
            if not m.get(key) or key not in res.sim:
                continue
            e = err(res.sim[key], m[key])
            ho = ""
            if held is not None and case["id"] in held and key in held[case["id"]]:
                ho = f"   unseen {held[case['id']][key]:+7.1f}%"
            print(
                f"      {label:<10} sim {res.sim[key]:>12,.1f}   meas {m[key]:>12,.1f}   "
                f"{e:+7.1f}%{ho}"
            )


def print_unseen(
    cases: list[dict[str, Any]],
    held: dict[str, dict[str, float]],
    folds: dict[str, dict[str, float]],
) -> None:
    """Each case's error when its source was left out, then the medians per source and in all."""
    mine = [c for c in in_scope_workload(cases) if c["id"] in held]
    for c in mine:
        e = held[c["id"]]
        print(
            f"  {source_of(c):<12} {c['id']:<52} "
            + "  ".join(f"{lab} {e[k]:+7.1f}%" for k, lab in METRICS[:3] if k in e)
        )
    for src, q in folds.items():
        print(
            f"  constants fitted without {src}: "
            + ", ".join(f"{k} {v:.4g}" for k, v in q.items() if k in PARAM_NAMES)
        )
    meds = medians(held)
    print(
        "  unseen median |error|: "
        + ", ".join(f"{lab} {meds[k][0]:.1f}%" for k, lab in METRICS if meds[k][0] is not None)
    )
    worst_id, worst = max(
        ((cid, abs(e["output_tok_s"])) for cid, e in held.items() if "output_tok_s" in e),
        key=lambda x: x[1],
    )
    print(f"  worst unseen throughput error {worst:.1f}% ({worst_id})")


def main() -> int:
    if "--moe" in sys.argv[1:]:  # the MoE runs: benchmarks/sim_fidelity_moe.py
        from sim_fidelity_moe import main as moe_main

        return moe_main([a for a in sys.argv[1:] if a != "--moe"])
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--cases", default=str(DEFAULT_CASES))
    ap.add_argument("--json", help="write the per-case rows and medians to this file")
    ap.add_argument("--calibrate", action="store_true", help="refit the constants and print them")
    ap.add_argument("--write", action="store_true", help="with --calibrate: into efficiency.json")
    ap.add_argument(
        "--no-held-out", action="store_true", help="skip the leave-one-source-out refits"
    )
    ap.add_argument(
        "--fit-evals",
        type=int,
        default=None,
        help="least-squares iterations per fit (--calibrate, each leave-one-source-out fold; "
        "each iteration simulates one Jacobian column per free constant); default 12, "
        "--quick 6",
    )
    ap.add_argument("--jobs", type=int, default=2, help="worker processes for a fit's simulations")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="the unseen (leave-one-source-out) figures only, 6 iterations per fold: the "
        "loop to use while changing the model",
    )
    ap.add_argument(
        "--folds", help="comma-separated sources: leave out only these (default: every one)"
    )
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument(
        "--warm",
        choices=("logs", "test", "cold"),
        default="logs",
        help="prefix cache at the start of each case: replay the server's history from the "
        "runs' logs (default), only the benchmark's test prompt, or nothing",
    )
    args = ap.parse_args()
    cases = json.loads(Path(args.cases).read_text())
    p = load_params()
    folds_wanted = args.folds.split(",") if args.folds else None
    if args.quick:
        t = time.perf_counter()
        held_q, folds_q = loso(
            cases, p, max_nfev=args.fit_evals or 6, jobs=args.jobs, only=folds_wanted
        )
        print_unseen(cases, held_q, folds_q)
        print(f"\n({time.perf_counter() - t:.0f} s)")
        return 0
    if args.calibrate:
        t = time.perf_counter()
        q = fit(in_scope_workload(cases), p, max_nfev=args.fit_evals or 12, jobs=args.jobs)
        print(f"fitted in {time.perf_counter() - t:.0f} s ({FIT_LOG[-1]})", file=sys.stderr)
        print(json.dumps(q, indent=2))
        if args.write:
            write_params(q)
            print(f"written to {EFFICIENCY_JSON}", file=sys.stderr)
        return 0
    t0 = time.perf_counter()
    print(f"servetune sim fidelity: {len(cases)} cases from {args.cases}\n")
    print("constants (src/servetune/sim/data/efficiency.json):")
    print("  " + ", ".join(f"{k} {v:.4g}" for k, v in p.items()))
    results = simulate_cases(cases, p, args.warm, checks=args.warm == "logs")
    mine = in_scope_workload(cases)
    errs = case_errors(mine, results)
    check_errs = {
        name: {k: err(results["check:" + name].sim[k], m[k]) for k, _ in METRICS if k in m}
        for name, m in CHECKS.items()
        if "check:" + name in results
    }
    held: dict[str, dict[str, float]] | None = None
    folds: dict[str, dict[str, float]] = {}
    if not args.no_held_out and args.warm == "logs":
        print("\n(leave-one-source-out refits: one fit per source, from neutral constants)")
        held, folds = loso(
            cases,
            p,
            quiet=args.quiet,
            max_nfev=args.fit_evals or 12,
            jobs=args.jobs,
            only=folds_wanted,
        )
    print()
    if not args.quiet:
        print_cases(cases, results, held)
    mem_errs = print_memory(cases)
    print("\nreference only (another engine; vLLM is expected to be lower):")
    for line in reference_rows(cases, p):
        print("  " + line)
    print("\nexcluded from the medians:")
    for c in cases:
        why = scope(c)
        if why is not None and c.get("workload") and "sweep" not in c["workload"]:
            print(f"  {c['id']}: {why}")
    if check_errs:
        print(
            "\nout-of-sample check: the README's other runs on the same servers (never fitted; "
            "replayed in their sessions)"
        )
        for name, e in check_errs.items():
            res = results["check:" + name]
            print(
                f"  {name:<32} {res.warm:>3} cached  "
                + "  ".join(f"{lab} {e[k]:+6.1f}%" for k, lab in METRICS if k in e)
            )
    print("\nreplayed server sessions (cache state from the runs' logs):")
    for s in SESSIONS:
        print(
            f"  {s.name}: "
            + ", ".join(
                f"{r.input_len}/{r.output_len} n{r.n}" + ("*" if r.case else "") for r in s.runs
            )
        )
    print("  (* = a published case)")
    ins = medians(errs)
    hos = medians(held) if held is not None else None
    print(f"\nmedian |error| over in-scope vLLM cases (warm: {args.warm}):")
    print(f"  {'metric':<10} {'in sample':>10} {'unseen':>9}   target (on unseen runs)")
    for key, label in METRICS:
        med, cnt = ins[key]
        tgt = TARGETS.get(key)
        unseen = None if hos is None else hos[key][0]
        ho = "" if unseen is None else f"{unseen:8.1f}%"
        flag = ""
        if tgt is not None and unseen is not None:
            flag = "  OK" if unseen <= tgt else "  MISSED"
        shown = "n/a" if med is None else f"{med:9.1f}%"
        print(
            f"  {label:<10} {shown:>10} {ho:>9}   "
            + (f"≤ {tgt:.0f}%" if tgt is not None else "")
            + f"{flag}   ({cnt} cases)"
        )
    if held:
        worst_id, worst = max(
            ((cid, abs(e["output_tok_s"])) for cid, e in held.items() if "output_tok_s" in e),
            key=lambda x: x[1],
        )
        print(
            f"  worst unseen throughput error {worst:.1f}% ({worst_id}); target ≤ 25%"
            + ("  OK" if worst <= 25 else "  MISSED")
        )
        print("\nleave-one-source-out, per source (median |error| of its cases when left out):")
        by_src: dict[str, dict[str, dict[str, float]]] = {}
        for c in mine:
            if c["id"] in held:
                by_src.setdefault(source_of(c), {})[c["id"]] = held[c["id"]]
        for src, src_errs in by_src.items():
            src_meds = medians(src_errs)
            print(
                f"  {src:<12} {len(src_errs):>3} cases: "
                + ", ".join(
                    f"{lab} {v:.1f}%" for k, lab in METRICS if (v := src_meds[k][0]) is not None
                )
            )
        for src, q in folds.items():
            print(
                f"  constants fitted without {src}: "
                + ", ".join(f"{k} {v:.4g}" for k, v in q.items() if k in PARAM_NAMES)
            )
    if check_errs:
        chk = medians(check_errs)
        print(
            f"  out-of-sample README runs ({len(check_errs)}): "
            + ", ".join(f"{lab} {chk[k][0]:.1f}%" for k, lab in METRICS if chk[k][0] is not None)
        )
    if mem_errs:
        mm, mx = statistics.median(mem_errs), max(mem_errs)
        print(
            f"  KV blocks / tokens / max concurrency: median {mm:.1f}%, max {mx:.1f}% (≤ 5%)"
            + ("  OK" if mx <= 5 else "  MISSED")
        )
    print(f"\n({time.perf_counter() - t0:.1f} s)")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "params": p,
                    "in_sample": {k: v[0] for k, v in ins.items()},
                    "unseen": None if hos is None else {k: v[0] for k, v in hos.items()},
                    "folds": folds,
                    "errors": errs,
                    "held_out_errors": held,
                    "check_errors": check_errs,
                    "sim": {k: v.sim for k, v in results.items()},
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
