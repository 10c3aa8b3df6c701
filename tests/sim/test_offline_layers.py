"""The offline path's modules import one way: construct < scrape, offline_plan <
offline_result, offline_run (the loop) < offline (the entry). A module may import only those
below it."""

from __future__ import annotations

import ast
from pathlib import Path

SIM = Path(__file__).resolve().parents[2] / "src" / "servetune" / "sim"
ORDER = {
    "construct": 0,
    "scrape": 1,
    "offline_plan": 1,
    "offline_result": 2,
    "offline_run": 2,
    "offline": 3,
}


def _sim_imports(module: str) -> set[str]:
    tree = ast.parse((SIM / f"{module}.py").read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[:2] == ["servetune", "sim"] and len(parts) > 2:
                out.add(parts[2])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[:2] == ["servetune", "sim"] and len(parts) > 2:
                    out.add(parts[2])
    return out


def test_offline_modules_import_one_way() -> None:
    for module, level in ORDER.items():
        above = {m for m in _sim_imports(module) if ORDER.get(m, -1) >= level}
        assert not above, f"sim/{module}.py imports {sorted(above)}: not below it in {ORDER}"
    # nothing below the entry imports it (it writes run.json; the loop is offline_run's)
    assert "offline" not in set().union(*(_sim_imports(m) for m in ORDER if m != "offline"))
