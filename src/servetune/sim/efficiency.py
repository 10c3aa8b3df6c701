"""The step model's calibration constants per GPU (``data/efficiency.json``, each with its
source). The GPUs and models themselves are :mod:`servetune.arch`'s."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from servetune.arch.gpus import GpuSpec

if TYPE_CHECKING:
    from servetune.sim.resolved import ResolvedConfig


class Efficiency(BaseModel):
    """Calibration constants of the step-time roofline for one GPU."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    mfu: float
    """Achieved share of peak tensor FLOP/s on compute-bound work (prefill)."""
    mbu: float
    """Achieved share of peak memory bandwidth on memory-bound work (decode)."""
    step_overhead_ms: float
    """Fixed time per engine step (scheduling, launch, sampling set-up)."""
    per_seq_overhead_us: float
    """Extra time per request in the step (input preparation, sampling, output processing)."""
    allreduce_latency_us: float = 10.0
    """Fixed time of one tensor-parallel all-reduce (2 per layer per step when TP > 1)."""
    alltoall_latency_us: float = 30.0
    """Fixed time of one expert-parallel dispatch or combine (2 per MoE layer per step with
    data-parallel attention). Not calibrated: DeepEP's published intranode low-latency
    dispatch/combine take tens of µs at small batches."""
    grouped_gemm_efficiency: float = 0.8
    """Share of ``mfu`` the routed experts' grouped GEMMs reach on compute-bound work (each
    expert multiplies only the tokens routed to it). Not calibrated."""
    graph_layer_us: float = 0.0
    """GPU time per model layer that a CUDA-graph-captured step cannot go below (the floor of
    its small kernels: norms, router, top-k, expert alignment, quantisation, the projections at
    a handful of tokens — each kernel takes a few microseconds however little it does), added
    to the roofline of every step (:mod:`servetune.sim.perf`). Per engine (``engines`` in
    ``efficiency.json``); 0 where not calibrated (the dense fit's step overhead holds it)."""
    eager_layer_us: float = 0.0
    """CPU time per model layer to launch the kernels of a step that runs eagerly (not a
    captured graph: SGLang's prefill and mixed steps, vLLM's steps above the largest captured
    size); the GPU cannot finish such a step before its last kernel is launched, so the step
    takes at least this × layers. Per engine; 0 where not calibrated."""
    frontend_per_request_ms: float = 0.0
    """Time of the API server's event loop per request (parsing, tokenising, handing it to the
    engine core), serial; tokens wait while it is busy (:mod:`servetune.sim.frontend`)."""
    frontend_chat_per_request_ms: float = 0.0
    """Extra loop time per request of the chat endpoint (the messages, the chat template),
    shared by a burst before any of its requests goes on
    (:class:`servetune.sim.frontend.SharedIntake`)."""
    frontend_per_token_us: float = 0.0
    """Time of the API server's event loop per output token (detokenising, building and
    writing the stream chunk), serial with the intake (:mod:`servetune.sim.frontend`)."""
    frontend_chat_per_token_us: float = 0.0
    """Extra loop time per output token of the chat endpoint (a chat stream chunk is a
    larger object to build and serialise: choices, delta, role)."""
    frontend_latency_ms: float = 0.0
    """Time from a token's sampling to its write to the client (the hop from the engine core
    to the API server, detokenising, HTTP): part of TTFT and E2E, not of the gaps."""
    async_scheduling: bool = False
    """The engine overlaps a step's CPU work with the GPU's (vLLM ``--async-scheduling``,
    default after 0.11.0): a step takes the longer of the two instead of their sum
    (:mod:`servetune.sim.perf`)."""
    source: str = ""


def _data(name: str) -> Any:
    return json.loads(resources.files("servetune.sim.data").joinpath(name).read_text("utf-8"))


@lru_cache(maxsize=1)
def efficiency_table() -> dict[str, Any]:
    data: dict[str, Any] = _data("efficiency.json")
    return data


def efficiency(gpu: GpuSpec, semantics: str | None = None) -> Efficiency:
    """The GPU's calibrated constants, or the default set (with its provenance); the host
    constants (the API server's latency) are shared by every GPU; ``semantics`` (the engine
    simulated, :mod:`servetune.sim.semantics`): its own per-layer step constants
    (``engines``) over the GPU's."""
    table = efficiency_table()
    entry = table["gpus"].get(gpu.name) or table["default"]
    host = table.get("host") or {}
    engine = (table.get("engines") or {}).get(semantics or "") or {}
    return Efficiency.model_validate(
        {
            **{k: v for k, v in host.items() if k != "source"},
            **entry,
            **{k: v for k, v in engine.items() if k != "source"},
        }
    )


def calibrated(r: ResolvedConfig) -> Efficiency:
    """The constants a configuration runs with: its calibration's (``sim calibrate``) over the
    GPU's catalog entry, else the catalog's."""
    base = efficiency(r.gpu, r.semantics)
    if r.calibration is None or not r.calibration.constants:
        return base
    return base.model_copy(update=dict(r.calibration.constants))
