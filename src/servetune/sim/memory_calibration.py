"""The memory planner against published vLLM start-up lines (``data/memory_calibration.json``).

Each case is a configuration someone started (or failed to start) with a released vLLM and
published the start-up line with its source. :func:`evaluate` plans every case with the rules
of its vLLM version and compares: the KV pool (GiB, else tokens, else blocks) within
:data:`TOLERANCE`, and start versus refusal. :func:`table` prints the result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from servetune.arch.deployment import GIB
from servetune.arch.memory import MemoryPlan, budget, rules_for
from servetune.errors import SimError
from servetune.sim.config import EngineConfig
from servetune.sim.memory import plan_memory

TOLERANCE = 0.03
"""Largest relative error of the KV pool accepted on a calibration case."""


@lru_cache(maxsize=1)
def calibration_data() -> dict[str, Any]:
    text = resources.files("servetune.sim.data").joinpath("memory_calibration.json")
    data: dict[str, Any] = json.loads(text.read_text("utf-8"))
    return data


@dataclass
class CaseResult:
    id: str
    source: str
    vllm_version: str
    rules: str
    what: str
    """The figure compared: "KV GiB", "KV tokens", "KV blocks" or "start"."""
    published: float | None
    planned: float | None
    started: bool
    """Did vLLM start (published)?"""
    planner_started: bool
    refusal: str | None
    excluded: str | None

    @property
    def error(self) -> float | None:
        if self.published is None or self.planned is None or self.published == 0:
            return None
        return (self.planned - self.published) / abs(self.published)

    @property
    def ok(self) -> bool:
        if self.excluded:
            return True
        if self.started != self.planner_started:
            return False
        if not self.started:
            return True  # a refusal: the pool is shown, the verdict is what is checked
        err = self.error
        return err is None or abs(err) <= TOLERANCE


def engine_config(case: dict[str, Any]) -> EngineConfig:
    return EngineConfig(**case["config"])


def evaluate_case(case: dict[str, Any]) -> CaseResult:
    pub = case["published"]
    rules = rules_for(case["vllm_version"], case.get("sampler"), case.get("hopper_mxfp4"))
    plan: MemoryPlan | None = None
    refusal: str | None = None
    try:
        plan = plan_memory(engine_config(case), rules)
    except SimError as exc:
        refusal = exc.message.split(".")[0][:90]
    pool = None
    try:
        r = engine_config(case).resolve()
        b = budget(r, rules)
        pool = (b.kv / GIB, b.kv // (b.kv_per_token * r.block_size))
    except SimError:
        pass
    what, published, planned = "start", None, None
    if pub.get("kv_cache_gib") is not None:
        what, published = "KV GiB", float(pub["kv_cache_gib"])
        planned = pool[0] if pool else None
    elif pub.get("kv_cache_tokens"):
        what, published = "KV tokens", float(pub["kv_cache_tokens"])
        planned = float(plan.kv_cache_tokens) if plan else None
    elif pub.get("num_gpu_blocks"):
        what, published = "KV blocks", float(pub["num_gpu_blocks"])
        planned = pool[1] if pool else None
    return CaseResult(
        id=case["id"],
        source=case["source"],
        vllm_version=case["vllm_version"],
        rules=rules.name,
        what=what,
        published=published,
        planned=planned,
        started=bool(pub.get("started", True)),
        planner_started=plan is not None,
        refusal=refusal,
        excluded=case.get("excluded"),
    )


def evaluate() -> list[CaseResult]:
    return [evaluate_case(c) for c in calibration_data()["cases"]]


def table(results: list[CaseResult] | None = None) -> str:
    """The calibration table, one line a case, then the summary."""
    results = results if results is not None else evaluate()
    lines = [
        f"{'case':<40} {'vLLM':<9} {'rules':<14} {'figure':<9} {'published':>10} "
        f"{'planned':>10} {'error':>7}  start (vLLM/planner)"
    ]
    for r in results:
        pub = "-" if r.published is None else f"{r.published:,.2f}"
        plan = "-" if r.planned is None else f"{r.planned:,.2f}"
        err = "" if r.error is None else f"{r.error * 100:+6.1f}%"
        start = f"{'yes' if r.started else 'no'}/{'yes' if r.planner_started else 'no'}"
        note = ""
        if r.excluded:
            note = f"  [excluded: {r.excluded.split(':')[0].split('(')[0].strip()}]"
        elif not r.ok:
            note = "  MISMATCH"
        if r.refusal and not r.planner_started:
            note += f"  ({r.refusal})"
        lines.append(
            f"{r.id:<40} {r.vllm_version:<9} {r.rules:<14} {r.what:<9} {pub:>10} {plan:>10} "
            f"{err:>7}  {start}{note}"
        )
    inside = [r for r in results if not r.excluded]
    errs = [abs(e) for r in inside if r.started and (e := r.error) is not None]
    starts = sum(1 for r in inside if r.started == r.planner_started)
    refused = sum(1 for r in inside if not r.started)
    worst = max(errs) * 100 if errs else 0.0
    lines.append(
        f"{len(inside)} cases ({len(errs)} KV pools of servers that started, {refused} "
        f"refusals), "
        f"{len(results) - len(inside)} excluded; worst |error| {worst:.1f}% "
        f"(tolerance {TOLERANCE * 100:.0f}%); start/refuse agrees on {starts}/{len(inside)}"
    )
    return "\n".join(lines)
