"""The public Python API: what ``import servetune`` exports, that its types agree with it,
that docs/python.md's examples run, and that no module reaches into another's private names."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import servetune

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "servetune"
DOC = ROOT / "docs" / "python.md"

ENTRY_POINTS = {
    "bench", "sweep", "simulate", "diagnose", "compare", "tune", "plan", "cost", "quality"
}  # fmt: skip


def test_the_documented_entry_points_are_exported() -> None:
    assert set(servetune.__all__) >= ENTRY_POINTS
    for name in servetune.__all__:
        assert getattr(servetune, name) is not None, name
    assert set(servetune.__all__) <= set(dir(servetune))
    with pytest.raises(AttributeError):
        _ = servetune.no_such_thing  # type: ignore[attr-defined]


def test_the_entry_points_are_typed() -> None:
    import inspect

    for name in ENTRY_POINTS:
        fn = getattr(servetune, name)
        sig = inspect.signature(fn)
        assert sig.return_annotation is not inspect.Signature.empty, name
        assert all(p.annotation is not inspect.Parameter.empty for p in sig.parameters.values()), (
            name
        )


def test_the_type_stub_declares_every_exported_name() -> None:
    stub = ast.parse((SRC / "__init__.pyi").read_text())
    declared = {a.asname or a.name for n in ast.walk(stub) if isinstance(n, ast.ImportFrom)
                for a in n.names}  # fmt: skip
    assert declared | {"__version__"} == set(servetune.__all__)


def test_import_servetune_loads_nothing_else_of_it() -> None:
    code = (
        "import sys, servetune; print(sorted(m for m in sys.modules if m.startswith('servetune')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['servetune']"


def test_every_package_facade_declares_its_exports() -> None:
    missing = [
        str(p.relative_to(SRC.parent))
        for p in sorted(SRC.rglob("__init__.py"))
        if "__all__" not in p.read_text() and _has_public_imports(p)
    ]
    assert not missing, f"package facades without __all__: {missing}"


def _has_public_imports(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(n, ast.ImportFrom) for n in tree.body)


KNOWN_PRIVATE: set[tuple[str, str]] = set()
"""Pairs (module, name) excused; empty: every name used across modules is public."""


def test_no_module_imports_another_modules_private_name() -> None:
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(
                "servetune"
            ):
                continue
            for a in node.names:
                where = str(path.relative_to(SRC.parent))
                private = a.name.startswith("_") and not a.name.startswith("__")
                if private and (where, a.name) not in KNOWN_PRIVATE:
                    bad.append(f"{where}:{node.lineno} {a.name}")
    assert not bad, "imports of another module's private name:\n" + "\n".join(bad)


def test_the_examples_of_docs_python_md_run(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) >= 4
    script = tmp_path / "examples.py"
    script.write_text("\n".join(blocks))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC.parent), *sys.path])}
    got = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
        timeout=600, env=env,
    )  # fmt: skip
    assert got.returncode == 0, got.stdout + got.stderr
    assert "num_prompts must be ≥ 1 (got 0)" in got.stdout
    assert (tmp_path / "run-a" / "run.json").is_file()
    assert (tmp_path / "sweep-a" / "sweep.json").is_file()
