"""SGLang's memory planner against published SGLang start-up lines
(``data/sglang_memory_calibration.json``): each case resolved as SGLang would (its defaults for
that GPU and release), planned (:mod:`servetune.arch.memory_sglang`) and compared on the
figure the log printed — the token pool, or the free memory after loading where the log stops
there — within :data:`TOLERANCE`. :func:`table` prints the result."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from servetune.arch.memory_sglang import SglangMemoryPlan, plan_for
from servetune.errors import SimError
from servetune.sim.config import EngineConfig

TOLERANCE = 0.03


@lru_cache(maxsize=1)
def calibration_data() -> dict[str, Any]:
    text = resources.files("servetune.sim.data").joinpath("sglang_memory_calibration.json")
    data: dict[str, Any] = json.loads(text.read_text("utf-8"))
    return data


@dataclass
class SglangCase:
    id: str
    source: str
    version: str
    what: str
    published: float
    planned: float | None
    plan: SglangMemoryPlan | None
    refusal: str | None
    excluded: str | None
    partial: str | None
    config: dict[str, Any]

    @property
    def error(self) -> float | None:
        if self.planned is None:
            return None
        return (self.planned - self.published) / self.published

    @property
    def ok(self) -> bool:
        if self.excluded or self.partial:
            return True
        return self.error is not None and abs(self.error) <= TOLERANCE


def evaluate() -> list[SglangCase]:
    out: list[SglangCase] = []
    for case in calibration_data()["cases"]:
        cfg = EngineConfig(engine="sglang", sglang_version=case["sglang_version"], **case["config"])
        what = case["what"]
        published = float(case["published"]["tokens" if what == "tokens" else what])
        plan: SglangMemoryPlan | None = None
        refusal = None
        try:
            plan = plan_for(cfg.resolve(), case["sglang_version"])
        except SimError as exc:
            refusal = exc.message
        planned = None
        if plan is not None:
            planned = float(plan.kv_cache_tokens if what == "tokens" else plan.avail_after_load_gib)
        out.append(
            SglangCase(
                id=case["id"],
                source=case["source"],
                version=case["sglang_version"],
                what=what,
                published=published,
                planned=planned,
                plan=plan,
                refusal=refusal,
                excluded=case.get("excluded"),
                partial=case.get("partial"),
                config=case["config"],
            )
        )
    return out


def table(results: list[SglangCase] | None = None) -> str:
    rows = results if results is not None else evaluate()
    lines = [
        "| case (source) | SGLang | figure | published | planned | error |",
        "|---|---|---|---|---|---|",
    ]
    for c in rows:
        planned = "refused" if c.planned is None else f"{c.planned:,.2f}".rstrip("0").rstrip(".")
        err = "" if c.error is None else f"{c.error:+.1%}"
        if c.excluded:
            err += " (excluded)"
        elif c.partial:
            err += " (weights only)"
        lines.append(
            f"| {c.id} ({c.source}) | {c.version} | {c.what} | {c.published:,.2f} | "
            f"{planned} | {err} |".replace(".00 |", " |")
        )
    return "\n".join(lines)
