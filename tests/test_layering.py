"""The core never imports UI code: importing every core module pulls in neither textual nor rich."""

import pkgutil
import subprocess
import sys
from pathlib import Path

import core

ROOT = Path(__file__).resolve().parents[1]


def _imported(modules: list[str], forbidden: tuple[str, ...]) -> str:
    """The modules in or under the ``forbidden`` packages that importing ``modules`` pulls in, in a fresh
    interpreter; empty when none."""
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"leaked = sorted(m for m in sys.modules if any(m == f or m.startswith(f + '.') for f in {forbidden!r}))\n"
        "print(','.join(leaked))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_core_imports_no_ui_libraries():
    modules = sorted(m.name for m in pkgutil.walk_packages(core.__path__, prefix="core."))
    assert "core.problem.load" in modules and "core.build.service" in modules
    assert _imported(modules, ("textual", "rich")) == ""


def test_the_evaluator_side_never_imports_the_run():
    """Data flows one way: the evaluation machinery (and the cluster backend behind the same seam) knows nothing of
    the fleet, the planner, the agents or the store that use it."""
    packages = ("core.evaluate", "core.build", "core.solution", "core.problem", "core.roofline")
    modules = sorted(m.name for m in pkgutil.walk_packages(core.__path__, prefix="core.")
                     if m.name.startswith(packages))
    assert "core.evaluate.evaluator" in modules and "core.evaluate.local" in modules
    up = ("core.fleet", "core.planner", "core.llm", "core.store", "core.cluster", "core.report", "cli", "tui")
    assert _imported(modules, up) == ""


def test_processes_that_start_workers_do_so_before_importing_torch():
    """`kernelfleet eval` and `run` start their evaluation workers (which import torch themselves) before they
    need torch: importing torch first (seconds) would hold up the workers' own start."""
    starters = ["cli.eval_cmd", "cli.run_cmd", "core.evaluate.local", "core.evaluate.pool", "core.fleet.orchestrator",
                "core.evaluate.timing_policy"]
    assert _imported(starters, ("torch",)) == ""


# ---------------------------------------------------------------- the engine never imports the LLM kind

FORBIDDEN_FROM_ENGINE = "core.llm"
ENGINE_PACKAGES = ("core/fleet", "core/planner")


def _names_module(name: str, forbidden: str) -> bool:
    return name == forbidden or name.startswith(forbidden + ".")


def forbidden_imports(source: str, forbidden: str = FORBIDDEN_FROM_ENGINE, filename: str = "<module>") -> list[str]:
    """Where ``source`` imports ``forbidden`` (or a module under it), anywhere: at the top, inside functions, under
    ``TYPE_CHECKING``, relative imports aside; ``importlib.import_module``/``__import__`` and ``sys.modules[...]``
    with such a name as a string count too. One "line N: what" per finding."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if _names_module(a.name, forbidden)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if _names_module(node.module, forbidden):
                found.append(f"line {node.lineno}: from {node.module} import ...")
            elif forbidden.startswith(node.module + "."):  # from core import llm
                found += [f"line {node.lineno}: from {node.module} import {a.name}" for a in node.names
                          if _names_module(f"{node.module}.{a.name}", forbidden)]
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, str) and _names_module(node.slice.value, forbidden) \
                and ast.unparse(node.value).endswith("sys.modules"):
            found.append(f"line {node.lineno}: sys.modules[{node.slice.value!r}]")
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and _names_module(node.args[0].value, forbidden) \
                and ast.unparse(node.func).split(".")[-1] in ("import_module", "__import__"):
            found.append(f"line {node.lineno}: {ast.unparse(node.func)}({node.args[0].value!r})")
    return found


def test_the_engine_never_imports_the_llm_kind():
    """The fleet's engine and the planner know agent kinds only through ``core.fleet.kinds.AgentKind``: the LLM kind
    (``core.llm``) is registered from outside (``core.agents``), never imported by them, not even lazily."""
    findings = {}
    files = [p for package in ENGINE_PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    assert any(p.name == "orchestrator.py" for p in files) and any(p.name == "plan.py" for p in files)
    for path in files:
        found = forbidden_imports(path.read_text(), filename=str(path))
        if found:
            findings[str(path.relative_to(ROOT))] = found
    assert findings == {}


def test_the_engine_names_no_agent_kind():
    """No ``== "llm"`` (or ``!=``) in the engine: what a kind needs, its ``AgentKind`` declares."""
    import re

    pattern = re.compile(r"""[=!]=\s*["']llm["']|["']llm["']\s*[=!]=""")
    findings = [f"{p.relative_to(ROOT)}:{n}" for package in ENGINE_PACKAGES for p in sorted((ROOT / package).rglob("*.py"))
                for n, line in enumerate(p.read_text().splitlines(), start=1) if pattern.search(line)]
    assert findings == []


def test_the_import_checker_reports_each_way_of_importing_the_llm_kind():
    """The checker above would fail on a module that imports core.llm: each way is reported, a clean one is not."""
    offending = '''
from __future__ import annotations
import sys
from typing import TYPE_CHECKING
import core.llm.client
from core.llm import LlmAgent
from core import llm
if TYPE_CHECKING:
    from core.llm.review import Reviewer


def later():
    from core.llm.planner import LlmPlanner
    import importlib
    importlib.import_module("core.llm.kind")
    return sys.modules["core.llm"]
'''
    found = forbidden_imports(offending)
    assert [line.split(":")[0] for line in found] == [
        "line 5", "line 6", "line 7", "line 9", "line 13", "line 15", "line 16"], found
    clean = "import core.llmish\nfrom core.fleet import kinds\nfrom . import llm\nx = {'core.llm': 1}['core.llm']\n"
    assert forbidden_imports(clean) == []


def module_imports(files: dict[str, Path]) -> dict[str, set[str]]:
    """For each module (dotted name -> file), the modules among them it imports when it is imported: its top-level
    imports (``TYPE_CHECKING`` blocks and imports inside functions aside); ``from pkg import sub`` is an import of
    ``pkg.sub`` where ``sub`` is a module, else of ``pkg``."""
    import ast

    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        found: set[str] = set()
        for statement in ast.parse(path.read_text(), str(path)).body:
            if isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.unparse(statement.test):
                continue
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            for node in ast.walk(statement):
                if isinstance(node, ast.Import):
                    found.update(a.name for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    subs = [f"{node.module}.{a.name}" for a in node.names]
                    found.update(s for s in subs if s in files)
                    if not all(s in files for s in subs):
                        found.add(node.module)
        graph[name] = {m for m in found if m in files and m != name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or around a loop (strongly connected, 2 or more)."""
    order: list[str] = []
    seen: set[str] = set()
    for start in graph:  # first pass: finishing order (iterative depth-first search)
        if start in seen:
            continue
        seen.add(start)
        stack = [(start, iter(sorted(graph[start])))]
        while stack:
            node, edges = stack[-1]
            nxt = next((m for m in edges if m not in seen), None)
            if nxt is None:
                order.append(node)
                stack.pop()
            else:
                seen.add(nxt)
                stack.append((nxt, iter(sorted(graph[nxt]))))
    reverse: dict[str, set[str]] = {m: set() for m in graph}
    for m, targets in graph.items():
        for t in targets:
            reverse[t].add(m)
    groups, assigned = [], set()
    for node in reversed(order):  # second pass on the reversed graph
        if node in assigned:
            continue
        group, todo = [], [node]
        assigned.add(node)
        while todo:
            m = todo.pop()
            group.append(m)
            for r in reverse[m] - assigned:
                assigned.add(r)
                todo.append(r)
        if len(group) > 1:
            groups.append(sorted(group))
    return groups


def test_no_import_cycles_between_the_cores_files():
    files = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in sorted((ROOT / "core").rglob("*.py"))}
    graph = module_imports(files)
    assert "core.evaluate.pool" in graph["core.evaluate.local"]  # the graph sees real imports
    assert import_cycles(graph) == []
    assert not any(m.startswith("core.fleet") for name in graph if name.startswith("core.evaluate")
                   for m in graph[name])
    # The finder finds a loop: a module of evaluate importing the fleet back, which imports evaluate.
    graph["core.evaluate.pool"] = graph["core.evaluate.pool"] | {"core.fleet.orchestrator"}
    assert any({"core.evaluate.pool", "core.fleet.orchestrator"} <= set(g) for g in import_cycles(graph))
