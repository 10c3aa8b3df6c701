"""servetune: load-test, understand and tune LLM inference servers.

The Python API (docs/python.md): ``servetune.bench``, ``sweep``, ``simulate``, ``diagnose``,
``compare``, ``tune``, ``plan``, ``cost``, ``quality`` and the models they take and return
(``BenchConfig``, ``RunResult``, ``EngineConfig``, …). Each name is loaded when first used, so
``import servetune`` stays cheap and imports nothing else of servetune.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__version__ = "0.1.0"

_HOMES: dict[str, str] = {
    "bench": "api",
    "compare": "api",
    "cost": "api",
    "diagnose": "api",
    "plan": "api",
    "quality": "api",
    "simulate": "api",
    "sweep": "api",
    "tune": "api",
    "BenchConfig": "results.schema",
    "RunResult": "results.schema",
    "Slo": "results.schema",
    "SweepConfig": "results.sweep_schema",
    "SweepResult": "results.sweep_schema",
    "TuneSpec": "results.tune_file",
    "TuneResult": "results.tune_file",
    "PlanResult": "results.plan_file",
    "CostReport": "results.cost_file",
    "QualityReport": "results.quality_file",
    "EngineConfig": "sim.config",
    "PlanRequest": "plan.request",
    "Diagnosis": "diagnose.model",
    "CompareReport": "compare.model",
    "EngineProfile": "profiles",
    "ServetuneError": "errors",
    "ConfigError": "errors",
}
"""Each public name → the module (under ``servetune.``) it lives in (``__init__.pyi`` gives
their types to a type checker; tests/test_api.py checks the two agree)."""

__all__ = ["__version__", *sorted(_HOMES)]


_ENTRY_POINTS = frozenset(n for n, home in _HOMES.items() if home == "api")


class _Facade(types.ModuleType):
    """The package's module: an entry point keeps its name when the subpackage of the same
    name (``servetune.diagnose``) is imported — the import system binds each subpackage on
    its parent; the subpackage stays importable by its dotted name
    (``from servetune.diagnose import diagnose_path``)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _ENTRY_POINTS and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Facade


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'servetune' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
