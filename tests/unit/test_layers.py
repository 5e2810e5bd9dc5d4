"""Imports point down: bot -> agents -> storage; local_slack imports nothing of Flotilla.

Inside `agents/`, the stages point down too, in the order of `STAGES` (bottom first): a stage
imports only the stages before it, and every module of `agents/` lives in a stage.

Every import counts – at module level, inside a function (lazy), under `if TYPE_CHECKING:`,
and `importlib.import_module("…")` with a literal name – because each one is a dependency a
reader (and a refactoring) must respect. No two modules may depend on each other, by any path.
A failure lists every violation at once.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bot", "agents", "storage", "local_slack")
NAMESPACE = "flotilla"  # every module is imported as flotilla.<package>…


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module: a module of the tree when it is one
    at: str  # file:line
    how: str  # "", "inside a function", "under TYPE_CHECKING"

    def __str__(self) -> str:
        return f"{self.at}, {self.how}" if self.how else self.at


# the stages of agents/, bottom first: each imports only the ones before it
STAGES = ("core", "planning", "tools", "reconciling", "scheduling", "running", "delivering")


def _stage_rules() -> tuple[tuple[str, tuple[str, ...], str], ...]:
    rules = []
    for at, stage in enumerate(STAGES):
        above = tuple(f"agents.{later}" for later in STAGES[at + 1 :])
        if above:
            rules.append((f"agents.{stage}", above, f"agents.{stage} imports no later stage"))
    return tuple(rules)


# (who, may not import, why): `who` matches a module and its submodules; a forbidden name
# matches a package and its submodules
RULES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("storage", ("agents", "bot"), "storage/ imports neither agents/ nor bot/"),
    ("agents", ("bot",), "agents/ never imports bot/"),
    ("agents.core", ("storage",), "agents.core imports no storage/ module"),
    ("agents.planning", ("storage",), "agents.planning is pure: no storage/ module"),
    ("local_slack", ("bot", "agents", "storage"), "local_slack/ imports nothing of Flotilla"),
    ("bot.listeners", ("storage",), "bot/listeners/ import no storage/ module"),
    *_stage_rules(),
)


def modules(root: Path) -> dict[str, Path]:
    """Every module of the four packages by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(root: Path) -> list[Import]:
    """Every import of one Flotilla module by another (or of a Flotilla package name)."""
    known = modules(root)
    found: list[Import] = []
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        base = name if path.name == "__init__.py" else name.rpartition(".")[0]
        at = path.relative_to(root).as_posix()
        for target, line, how in _imported(tree, base, ""):
            target = _resolve(target.removeprefix(f"{NAMESPACE}."), known)
            edge = Import(name, target, f"{at}:{line}", how)
            if target.split(".")[0] in PACKAGES and target != name and edge not in found:
                found.append(edge)
    return found


def _imported(node: ast.AST, base: str, how: str) -> Iterator[tuple[str, int, str]]:
    """(dotted name, line, how) of each import under `node`."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        how = how or "inside a function"
    if isinstance(node, ast.Import):
        yield from ((alias.name, node.lineno, how) for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        module = _absolute(node, base)
        # `from pkg import x` runs pkg/__init__.py first: an edge to the package itself
        yield module, node.lineno, how
        for alias in node.names:
            name = module if alias.name == "*" else f"{module}.{alias.name}"
            yield name, node.lineno, how
    elif isinstance(node, ast.Call) and _is_import_module(node):
        arg = node.args[0]
        assert isinstance(arg, ast.Constant)
        yield str(arg.value), node.lineno, how
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        for guarded in node.body:
            yield from _imported(guarded, base, "under TYPE_CHECKING")
        for other in node.orelse:
            yield from _imported(other, base, how)
        return
    for child in ast.iter_child_nodes(node):
        yield from _imported(child, base, how)


def _absolute(node: ast.ImportFrom, base: str) -> str:
    if not node.level:
        return node.module or ""
    parts = base.split(".")
    package = ".".join(parts[: len(parts) - (node.level - 1)])
    return f"{package}.{node.module}" if node.module else package


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _is_import_module(call: ast.Call) -> bool:
    func = call.func
    named = (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id == "import_module"
    )
    first = call.args[0] if call.args else None
    return named and isinstance(first, ast.Constant) and isinstance(first.value, str)


def _resolve(name: str, known: dict[str, Path]) -> str:
    """The longest prefix of `name` that is a module (`from a import f` -> `a`)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return name


def cycles(found: list[Import]) -> list[str]:
    """One readable path per shortest cycle through each module that is in a cycle.

    Every import counts, lazy and type-only ones too: a type-only import is still two modules
    that know each other (the shared type belongs in a module below both, e.g. a protocol)."""
    edges: dict[str, dict[str, Import]] = {}
    for each in found:
        edges.setdefault(each.source, {}).setdefault(each.target, each)
    paths: set[tuple[str, ...]] = set()
    for start in sorted(edges):
        path = _shortest_cycle(start, edges)
        if path:
            turn = path.index(min(path))  # the same cycle from another module: once
            paths.add(path[turn:] + path[:turn])
    lines = []
    for path in sorted(paths):
        hops = [f"{a} ({edges[a][b]})" for a, b in zip(path, path[1:] + path[:1], strict=True)]
        lines.append("import cycle: " + " -> ".join([*hops, path[0]]))
    return lines


def _shortest_cycle(start: str, edges: dict[str, dict[str, Import]]) -> tuple[str, ...]:
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        for target in sorted(edges.get(module, {})):
            if target == start:
                path = [module]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return tuple(reversed(path))
            if target not in came_from:
                came_from[target] = module
                queue.append(target)
    return ()


def layer_violations(found: list[Import]) -> list[str]:
    lines = []
    for each in found:
        for who, forbidden, why in RULES:
            inside = each.source == who or each.source.startswith(who + ".")
            if inside and any(_within(each.target, name) for name in forbidden):
                lines.append(f"{each.at} imports {each.target}{_how(each)}: {why}")
    return sorted(lines)


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _how(each: Import) -> str:
    return f" ({each.how})" if each.how else ""


def violations(root: Path) -> list[str]:
    found = imports(root)
    return cycles(found) + layer_violations(found)


def test_imports_point_down_and_never_in_a_circle() -> None:
    problems = violations(ROOT)
    if problems:
        pytest.fail(f"{len(problems)} import problems:\n" + "\n".join(problems), pytrace=False)


def test_every_import_goes_through_the_flotilla_namespace() -> None:
    """`import agents…` would load a second copy of a module beside `flotilla.agents…`
    (a checkout has both on the path; an installed wheel only the second)."""
    bare = []
    for name, path in modules(ROOT).items():
        base = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for target, line, _ in _imported(tree, base, ""):
            if target.split(".")[0] in PACKAGES and not _relative_at(tree, line):
                bare.append(f"{path.relative_to(ROOT).as_posix()}:{line} imports {target}")
    assert bare == []


def _relative_at(tree: ast.AST, line: int) -> bool:
    return any(
        isinstance(node, ast.ImportFrom) and node.level and node.lineno == line
        for node in ast.walk(tree)
    )


def test_every_module_of_agents_is_in_a_stage() -> None:
    """`agents/` holds its package docstring and the stage packages, nothing else."""
    agents = ROOT / "agents"
    loose = sorted(p.name for p in agents.glob("*.py") if p.name != "__init__.py")
    folders = sorted(p.name for p in agents.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert loose == []
    assert folders == sorted(STAGES)
    for stage in STAGES:
        docstring = ast.get_docstring(ast.parse((agents / stage / "__init__.py").read_text()))
        assert docstring, f"agents/{stage}/__init__.py says what the stage owns"


# --- the check itself: it sees every kind of import and reports all it finds ------------


def write(root: Path, files: dict[str, str]) -> None:
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
    for package in PACKAGES:
        (root / package).mkdir(exist_ok=True)
        (root / package / "__init__.py").touch()


def test_the_check_reports_every_violation_of_every_kind(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "agents/a.py": "from agents import b\n",
            "agents/b.py": "def later():\n    from agents.a import thing\n",
            "agents/c.py": "from .d import x\n",
            "agents/d.py": "import agents.e\n",
            "agents/e.py": "from agents.c import *\n",
            "storage/s.py": (
                "from typing import TYPE_CHECKING\n"
                "from . import t\n"
                "if TYPE_CHECKING:\n    from agents.a import Thing\n"
            ),
            "storage/t.py": "import json\n",
            "bot/listeners/__init__.py": "",
            "bot/listeners/l.py": "import storage.s\nfrom bot import settings\n",
            "bot/settings.py": "import agents.a\n",
            "local_slack/w.py": "import importlib\nimportlib.import_module('bot.settings')\n",
        },
    )
    assert violations(tmp_path) == [
        "import cycle: agents.a (agents/a.py:1) -> agents.b (agents/b.py:2, inside a function)"
        " -> agents.a",
        "import cycle: agents.c (agents/c.py:1) -> agents.d (agents/d.py:1)"
        " -> agents.e (agents/e.py:1) -> agents.c",
        "bot/listeners/l.py:1 imports storage.s: bot/listeners/ import no storage/ module",
        "local_slack/w.py:2 imports bot.settings: local_slack/ imports nothing of Flotilla",
        "storage/s.py:4 imports agents.a (under TYPE_CHECKING): "
        "storage/ imports neither agents/ nor bot/",
    ]


def test_a_tree_that_points_down_passes(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "bot/app.py": "from agents import a\nimport storage.s\n",
            "agents/a.py": "def f():\n    from storage.s import x\n",
            "storage/s.py": "from storage import t\n",
            "storage/t.py": "",
            "local_slack/w.py": "import json\n",
        },
    )
    assert violations(tmp_path) == []


def test_importing_from_a_package_counts_as_importing_its_init(tmp_path: Path) -> None:
    """`from pkg import mod` runs pkg/__init__.py: a package whose __init__ imports a module
    that imports `from pkg import …` is a cycle."""
    write(
        tmp_path,
        {
            "local_slack/__init__.py": "from local_slack.workspace import LocalWorkspace\n",
            "local_slack/workspace.py": "from local_slack.server import build\n",
            "local_slack/server.py": "from local_slack import chat\n",
            "local_slack/chat.py": "import json\n",
        },
    )
    (problem,) = violations(tmp_path)
    assert problem.startswith("import cycle: local_slack (local_slack/__init__.py:1)")
    assert "local_slack.server (local_slack/server.py:1)" in problem


def test_a_stage_importing_a_later_stage_is_reported(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "agents/planning/__init__.py": "",
            "agents/planning/plan.py": "import json\n",
            "agents/running/__init__.py": "",
            "agents/running/run.py": "from agents.planning.plan import Plan\n",
            "agents/core/__init__.py": "",
            "agents/core/clock.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from agents.running.run import Run\n"
            ),
        },
    )
    assert violations(tmp_path) == [
        "agents/core/clock.py:3 imports agents.running.run (under TYPE_CHECKING): "
        "agents.core imports no later stage",
    ]


def test_agents_asks_no_dialect_and_passes_no_state_in_context_variables() -> None:
    """Dialect differences live in storage/ (agents/ asks `Database.writes_one_at_a_time`);
    an attempt's state goes along its path as arguments (`agents/running/attempt.py`)."""
    found = []
    for path in sorted((ROOT / "agents").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for word in ("is_sqlite", "ContextVar", "contextvars"):
            if word in text:
                found.append(f"{path.relative_to(ROOT).as_posix()}: {word}")
    assert found == []
