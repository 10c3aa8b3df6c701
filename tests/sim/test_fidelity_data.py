"""The published runs the simulator is measured on: in the repository, each with its source,
from several sources (the fidelity figure is leave-one-source-out), and the request costs
that dominate tiny requests modelled."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

from servetune.results.schema import BenchConfig, Endpoint
from servetune.sim.config import EngineConfig
from servetune.sim.efficiency import efficiency
from servetune.sim.engine import Engine
from servetune.sim.memory import plan_memory
from servetune.sim.offline_run import OfflineRun
from servetune.sim.perf import StepModel
from servetune.workload.plan import Plan
from servetune.workload.spec import RequestSpec

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "benchmarks" / "data" / "published_cases.json"


def _fidelity() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "sim_fidelity", ROOT / "benchmarks" / "sim_fidelity.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sim_fidelity"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_published_cases_live_in_the_repository_with_their_sources() -> None:
    fid = _fidelity()
    assert Path(fid.DEFAULT_CASES).resolve() == CASES
    cases = json.loads(CASES.read_text())
    assert len({c["id"] for c in cases}) == len(cases)
    for c in cases:
        assert c["source"].strip(), c["id"]
        assert c.get("trust") in ("high", "medium", "low"), c["id"]
    # (nothing points outside the repository: tests/test_standalone.py)


def test_leave_one_source_out_has_sources_to_leave_out() -> None:
    fid = _fidelity()
    cases = json.loads(CASES.read_text())
    mine = fid.in_scope_workload(cases)
    by_source: dict[str, int] = {}
    for c in mine:
        by_source[fid.source_of(c)] = by_source.get(fid.source_of(c), 0) + 1
    print("in-scope cases per source:", by_source)
    assert "unknown" not in by_source
    assert len(by_source) >= 3
    # the tiny requests (128 in / 4 out) are measured, not excluded
    tiny = [c for c in mine if c["workload"]["output_len"] == 4]
    assert len(tiny) >= 3
    assert callable(fid.loso)


def _duration(endpoint: Endpoint, chat_ms: float, chat_token_us: float = 0.0) -> float:
    r = EngineConfig(model="Qwen/Qwen3-0.6B", max_model_len=2048).resolve()
    mem = plan_memory(r)
    eff = efficiency(r.gpu).model_copy(
        update={
            "frontend_per_request_ms": 1.0,
            "frontend_per_token_us": 0.0,
            "frontend_chat_per_request_ms": chat_ms,
            "frontend_chat_per_token_us": chat_token_us,
        }
    )
    eng = Engine(r, mem, StepModel(r, eff))
    spec = RequestSpec(prompt="", input_len=128, output_len=4)
    plan = Plan(requests=[spec] * 400, offsets_ns=[0] * 400)
    sim = OfflineRun(plan, BenchConfig(endpoint=endpoint), r, mem, engine=eng)
    sim.run()
    return max(x.end_ns for x in sim.records) / 1e9


def test_tiny_requests_are_bound_by_the_api_servers_intake() -> None:
    # 400 requests of 128/4 tokens: the GPU work is small; the intake is 400 × the per-request
    # time, more on the chat endpoint (messages, chat template)
    plain = _duration("completions", 5.0)
    chat = _duration("chat", 5.0)
    assert 0.4 <= plain < 0.6
    assert 2.4 <= chat < 2.7
    assert _duration("chat", 0.0) == plain
    # a chat stream's chunks cost the loop more per token: 1,600 tokens × 500 µs after the
    # intake (the last step's tokens wait for the ones before)
    slow = _duration("chat", 5.0, chat_token_us=500.0)
    assert chat + 0.6 <= slow < chat + 0.9
    assert _duration("completions", 5.0, chat_token_us=500.0) == plain


def test_each_case_runs_the_release_and_set_up_it_states() -> None:
    fid = _fidelity()
    cases = {c["id"]: c for c in json.loads(CASES.read_text())}
    # async scheduling: vLLM's default after 0.11 (PR #27614), off before
    assert [fid.async_default(v) for v in ("0.10.1.1", "0.11.0", "v0", "0.12.0", "0.19.0")] == [
        False,
        False,
        False,
        True,
        True,
    ]
    kvc = cases["kvc-qwen3-06b-h100-rand512-128-n500-inf"]
    assert fid.vllm_version_of(kvc) == "0.19.0"
    eng, _ = fid.new_engine(kvc, fid.NEUTRAL)
    assert eng.model.eff.async_scheduling
    gs = cases["gs-qwen3-14b-a100-rand128-4-n1000"]
    assert fid.vllm_version_of(gs) == "0.11.0"
    eng, _ = fid.new_engine(gs, fid.NEUTRAL)
    assert not eng.model.eff.async_scheduling
    # TP over two pods: the fitted pod network, or NCCL's socket transport when no fit has it
    pod = cases["dl-qwen2-7b-a100x2tp2-util025-rand1024-1024-n50"]
    assert fid.pod_network(pod)
    fitted = {**fid.NEUTRAL, "pod_fitted": 1.0}
    eng, notes = fid.new_engine(pod, fitted)
    assert eng.model.eff.allreduce_latency_us == fitted["pod_allreduce_latency_us"]
    assert eng.cfg.interconnect_gb_s == fitted["pod_link_gb_s"]
    eng, notes = fid.new_engine(pod, {**fid.NEUTRAL, "pod_fitted": 0.0})
    prior = fid.SOCKET_PRIOR
    assert eng.model.eff.allreduce_latency_us == prior["pod_allreduce_latency_us"]
    assert eng.cfg.interconnect_gb_s == prior["pod_link_gb_s"]
    assert any("socket" in n for n in notes)
    # the workload as published: lengths, prompts, rate, endpoint
    for c in (kvc, gs, pod):
        w = c["workload"]
        assert w["max_concurrency"] is None
        assert isinstance(w["input_len"], int) and isinstance(w["output_len"], int)
    assert fid.gpu_of(gs) == "A100-80GB" and fid.gpu_of(kvc) == "H100-SXM"


def test_a_fold_fits_a_compute_efficiency_only_from_runs_that_can_tell_it() -> None:
    fid = _fidelity()
    cases = {c["id"]: c for c in json.loads(CASES.read_text())}
    # the kvcached H100 runs are CPU-bound: ±20% of the H100's compute efficiency moves
    # nothing, so a fold trained on them takes the other generation's instead of drifting
    kvc = [c for cid, c in cases.items() if cid.startswith("kvc-")]
    assert not fid.tells(kvc, fid.NEUTRAL, "hopper_mfu")
    # a burst of 1,000 prompts on an A100 is compute-bound: it tells
    gs = [cases["gs-qwen3-14b-a100-rand128-4-n1000"]]
    assert fid.tells(gs, fid.NEUTRAL, "ampere_mfu")
    # the bandwidth efficiency's prior is a measurement with its source, not a fitted value
    priors = fid.measured_priors()
    assert set(priors) == {"mbu"} and 0.8 < priors["mbu"][0] < 0.92


def test_what_a_fold_cannot_tell_comes_from_measurements_of_the_mechanism() -> None:
    fid = _fidelity()
    u = fid.untold()
    # the GEMM's measured reach (MAMF share of the BF16 peak): A100 SXM 86.9%, H100 SXM 80.3%
    assert u["mamf"] == {"ampere": 0.869, "hopper": 0.803}
    p = {**fid.NEUTRAL, "ampere_mfu": 0.56}
    assert abs(fid.transferred_mfu(p, "hopper", "ampere") - 0.56 * 0.803 / 0.869) < 1e-9
    assert (
        abs(fid.transferred_mfu({**p, "hopper_mfu": 0.3}, "ampere", "hopper") - 0.3 / 0.924) < 1e-3
    )
    # the chat path's extra API-server cost, measured on vLLM (benchmarks/chat_intake_cost.py):
    # per request it cannot be told from 0 here; per streamed chat token tens of microseconds
    assert u["frontend_chat_per_request_ms"] == 0.0
    assert 20.0 < u["frontend_chat_per_token_us"] < 100.0
    # ... and on gpustack's release, 0.11.0, a share of the completions path's cost: a fold
    # takes the share of the release its left-out chat runs state, times its fitted host cost
    assert u["chat_share_by_release"] == {"0.11.0": 0.6, "0.32.0": 0.0}
    cases = json.loads(CASES.read_text())
    gs = [c for c in cases if c["id"].startswith("gs-")]
    q = {**fid.NEUTRAL, "frontend_per_request_ms": 6.0}
    assert abs(fid.chat_per_request_untold(q, gs, u) - 3.6) < 1e-9
    # a release never measured, or runs on completions only, take the measured value as is
    other = [{**c, "engine_version": "v0.13.0"} for c in gs]
    assert fid.chat_per_request_untold(q, other, u) == 0.0
    dl = [c for c in cases if c["id"].startswith("dl-")]
    assert fid.chat_per_request_untold(q, dl, u) == 0.0
    # every measurement names its source
    table = json.loads(fid.EFFICIENCY_JSON.read_text())["untold"]
    for entry in ("mamf_efficiency", "frontend_chat_per_request_ms", "frontend_chat_per_token_us"):
        assert len(table[entry]["source"]) > 80
