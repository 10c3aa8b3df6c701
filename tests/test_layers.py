"""Imports run one way: every module of ``src/servetune`` imports only its own layer or lower.

``LAYERS`` below is the one place the order is written (docs/architecture.md and CONTRIBUTING.md
point here). Bottom first; packages on one line share a layer and may import each other, as
long as no two packages import each other (checked separately). A package that does not exist
yet may be listed; a package or top-level module that is not listed fails the test, so new
code has to be placed deliberately.

Every import counts: module level, inside functions, under ``if TYPE_CHECKING:`` and
``importlib.import_module("servetune....")`` with a literal name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "aio", "checks"),
    ("profiles",),
    ("results",),
    ("metrics", "workload"),
    ("knobs", "http"),
    ("client",),
    ("loadgen",),
    ("engines",),
    ("routing", "arch"),
    ("sim", "testserver"),
    ("sweep",),
    ("diagnose",),
    ("report",),
    ("calibrate",),
    ("compare", "tune", "cost", "plan", "quality", "watch", "gateway"),
    ("api",),
    ("commands",),
    ("cli",),
)

SRC = Path(__file__).resolve().parents[1] / "src" / "servetune"
ROOT = "servetune"


def layer_of() -> dict[str, int]:
    return {name: i for i, names in enumerate(LAYERS) for name in names}


def module_name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _is_module(dotted: str, src: Path) -> bool:
    parts = dotted.split(".")[1:]
    if not parts or dotted.split(".")[0] != ROOT:
        return False
    where = src.joinpath(*parts)
    return where.is_dir() or where.with_suffix(".py").is_file()


def imports_of(path: Path, src: Path = SRC) -> list[tuple[int, str]]:
    """(line, imported first-party module) for every import in the file."""
    module = module_name(path, src)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            name = _resolve(node, module, path.name == "__init__.py")
            for a in node.names:  # from x import y: y is a module of x, or a name in x
                sub = f"{name}.{a.name}"
                found.append((node.lineno, sub if _is_module(sub, src) else name))
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (
                    isinstance(node.func, ast.Name)
                    and node.func.id in ("import_module", "__import__")
                )
            )
        ):
            found.append((node.lineno, node.args[0].value))
    return [(line, name) for line, name in found if name == ROOT or name.startswith(ROOT + ".")]


def unit_of(module: str) -> str | None:
    """The layered unit of a first-party module: its top-level package or module.

    ``servetune`` itself (``__version__``) is the bottom: it must import nothing first-party.
    """
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_every_package_has_a_layer() -> None:
    layers = layer_of()
    units = {unit_of(module_name(p)) for p in sources()} - {None}
    unplaced = sorted(u for u in units if u not in layers)
    assert not unplaced, (
        f"not in the layer order: {unplaced}; add each to LAYERS in {Path(__file__).name}"
    )


def test_the_package_root_imports_nothing_first_party() -> None:
    found = imports_of(SRC / "__init__.py")
    assert not found, f"servetune/__init__.py must stay at the bottom; it imports {found}"


def test_no_import_runs_upward() -> None:
    layers = layer_of()
    upward: list[str] = []
    for path in sources():
        module = module_name(path)
        unit = unit_of(module)
        if unit is None or unit not in layers:
            continue  # reported by the tests above
        for line, target in imports_of(path):
            dep = unit_of(target)
            if dep is None or dep == unit:
                continue
            if dep not in layers:
                upward.append(f"{path.relative_to(SRC.parent)}:{line} imports unknown {target}")
            elif layers[dep] > layers[unit]:
                upward.append(
                    f"{path.relative_to(SRC.parent)}:{line} ({unit}, layer {layers[unit]}) "
                    f"imports {target} ({dep}, layer {layers[dep]})"
                )
    assert not upward, "imports run upward:\n" + "\n".join(upward)


def test_no_two_packages_import_each_other() -> None:
    edges: dict[tuple[str, str], str] = {}
    for path in sources():
        unit = unit_of(module_name(path))
        for line, target in imports_of(path):
            dep = unit_of(target)
            if unit and dep and dep != unit:
                edges.setdefault((unit, dep), f"{path.relative_to(SRC.parent)}:{line}")
    cycles = []
    for (a, b), where in sorted(edges.items()):
        if a < b and (b, a) in edges:
            cycles.append(f"{a} <-> {b} ({where}; {edges[(b, a)]})")
    assert not cycles, "packages import each other:\n" + "\n".join(cycles)


def test_no_import_cycle_between_modules() -> None:
    """Modules import each other in one direction too (imports inside functions included):
    a cycle works only in some import orders, and it hides which module is the lower one."""
    modules = {module_name(p): p for p in sources()}

    def owner(target: str) -> str | None:
        parts = target.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        return ".".join(parts) or None

    graph = {
        m: {d for _, t in imports_of(p) if (d := owner(t)) is not None and d != m}
        for m, p in modules.items()
    }
    for start in sorted(graph):
        # breadth-first from the module's imports; reaching the module again is a cycle
        parent: dict[str, str] = {}
        frontier = [start]
        while frontier and start not in parent:
            nxt = []
            for node in frontier:
                for dep in sorted(graph[node]):
                    if dep not in parent:
                        parent[dep] = node
                        nxt.append(dep)
            frontier = nxt
        if start in parent:
            cycle = [start]
            while (node := parent[cycle[-1]]) != start:
                cycle.append(node)
            cycle.append(start)
            raise AssertionError("modules import each other: " + " <- ".join(cycle))


# Nevers: pairs the layer order allows that must still not happen. The readers of result
# directories take a run as the files hold it (servetune.results, servetune.metrics.run_finish
# for a run cut short), never through the load generator that wrote it.

NEVER: tuple[tuple[str, str, str], ...] = (
    ("diagnose", "loadgen", "diagnose reads result directories (results/, metrics/run_finish)"),
    ("report", "loadgen", "report reads result directories (results/, metrics/run_finish)"),
)


def never_imports(paths: list[Path], src: Path = SRC) -> list[str]:
    """Each import that one of :data:`NEVER`'s pairs forbids, with the file and line."""
    bad = []
    for path in paths:
        unit = unit_of(module_name(path, src))
        for line, target in imports_of(path, src):
            for a, b, why in NEVER:
                if unit == a and unit_of(target) == b:
                    bad.append(f"{path.relative_to(src.parent)}:{line} imports {target}: {why}")
    return bad


def test_no_never_import() -> None:
    bad = never_imports(sources())
    assert not bad, "imports the layers allow but a NEVER forbids:\n" + "\n".join(bad)


def test_the_never_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    src = tmp_path / "servetune"
    for pkg in ("diagnose", "report", "loadgen", "metrics"):
        (src / pkg).mkdir(parents=True)
        (src / pkg / "__init__.py").write_text("")
    (src / "loadgen" / "bench.py").write_text("")
    (src / "diagnose" / "probe.py").write_text(
        "def f():\n    from servetune.loadgen.bench import bench\n"
    )
    (src / "report" / "probe.py").write_text("from servetune.metrics import run_finish\n")
    bad = never_imports(sorted(src.rglob("*.py")), src)
    assert len(bad) == 1 and "diagnose/probe.py:2" in bad[0]


# Engines are asked, not named: only the profiles (and the knob registry's table, whose rows
# are keyed by profile id) may say which engine is which.

ENGINE_SWITCH_ALLOWED = ("profiles/", "knobs/table.py")


def _engine_ids() -> set[str]:
    from servetune.profiles import PROFILES

    return {name for p in PROFILES for name in (p.id, *p.aliases)}


def engine_switches(path: Path, ids: set[str]) -> list[str]:
    """Where the file decides on an engine's name: a comparison with one (``engine ==
    "sglang"``, ``engine in ("vllm", "sim")``), a table keyed by two or more, a list of two
    or more, or an item looked up by one (``flags["vllm"]``). ``"sim"`` counts only beside a
    name that says ``engine`` (it is also a token source and a folder name)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []

    def consts(node: ast.AST) -> list[str]:
        items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
        return [
            e.value
            for e in items
            if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value in ids
        ]

    def about_engine(node: ast.AST) -> bool:
        return "engine" in ast.unparse(node).lower()

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = [c for side in sides for c in consts(side)]
            named = [c for c in named if c != "sim" or any(about_engine(x) for x in sides)]
            if named:
                found.append(f"{node.lineno}: compares with {named}")
        elif isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in ids]
            if len(keys) >= 2:
                found.append(f"{node.lineno}: a table keyed by {keys}")
        elif isinstance(node, ast.Tuple | ast.List | ast.Set):
            if len(set(consts(node)) - {"sim"}) >= 2:
                found.append(f"{node.lineno}: a list of {consts(node)}")
        elif isinstance(node, ast.Subscript):
            key = consts(node.slice)
            if key and key != ["sim"]:
                found.append(f"{node.lineno}: looks up {key}")
        elif isinstance(node, ast.MatchValue) and consts(node.value):
            found.append(f"{node.lineno}: matches {consts(node.value)}")
    return found


def test_no_module_switches_on_an_engine_id() -> None:
    ids = _engine_ids()
    bad = []
    for path in sources():
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(ENGINE_SWITCH_ALLOWED):
            continue
        bad += [f"{rel}:{where}" for where in engine_switches(path, ids)]
    assert not bad, (
        "modules decide on an engine's name; ask its profile (servetune.profiles) instead:\n"
        + "\n".join(bad)
    )


@pytest.mark.parametrize(
    ("code", "hits"),
    [
        ('if engine == "sglang":\n    pass\n', 1),
        ('ok = spec.engine in ("vllm", "sim")\n', 1),
        ('NAMES = {"vllm": "vLLM", "tgi": "TGI"}\n', 1),
        ('ENGINES = ("vllm", "sglang", "tgi")\n', 1),
        ('x = flags["vllm"]\n', 1),
        ('ok = r.tokens_source in ("usage", "sim")\n', 0),
        ('flag("vllm", "max_num_seqs")\n', 0),
        ("if profile(engine).simulated:\n    pass\n", 0),
    ],
)
def test_the_engine_switch_check_sees_a_switch(tmp_path: Path, code: str, hits: int) -> None:
    path = tmp_path / "probe.py"
    path.write_text(code)
    assert len(engine_switches(path, _engine_ids())) == hits


# The checker itself must see what it claims to see.


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("import servetune.sweep.knee\n", ["servetune.sweep.knee"]),
        ("from servetune.client import http\n", ["servetune.client"]),
        ("from servetune import __version__, sim\n", ["servetune", "servetune.sim"]),
        ("from ..sim import engine\n", ["servetune.sim"]),
        ("def f():\n    from servetune.report import build\n", ["servetune.report"]),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import servetune.cli\n",
            ["servetune.cli"],
        ),
        (
            "import importlib\nm = importlib.import_module('servetune.diagnose')\n",
            ["servetune.diagnose"],
        ),
        ("import os\nfrom pathlib import Path\n", []),
    ],
)
def test_the_walker_sees_every_kind_of_import(
    tmp_path: Path, code: str, expected: list[str]
) -> None:
    src = tmp_path / "servetune"
    (src / "metrics").mkdir(parents=True)
    (src / "sim").mkdir()
    path = src / "metrics" / "probe.py"
    path.write_text(code)
    assert [name for _, name in imports_of(path, src)] == expected
