"""The project's import graph, read with `ast`: no cycle anywhere, and the worker side never
reaches the driver side.

An import inside a function is an edge like any other (it runs whenever the function does), so
a cycle cannot hide behind one; an import under `if TYPE_CHECKING:` never runs and is no edge.
The worker side is `dynaresize.executor.worker`; the driver side is what its row of the table in
docs/architecture.md says it never imports. The layering test checks the worker's own imports;
this one follows every chain of imports from a worker module, so a module the worker may import
cannot bring the driver side in either. The last two tests show both checks fail where they
should, on a small package written for them.
"""

from __future__ import annotations

from pathlib import Path

from project_imports import REPO, imports_of, is_within, project_modules, read_rules

WORKER_SIDE = "dynaresize.executor.worker"

Graph = dict[str, dict[str, int]]
"""module -> {module it imports: line of the first such import}."""


def import_graph(modules: dict[str, Path]) -> Graph:
    known = set(modules)
    graph: Graph = {}
    for module, path in modules.items():
        edges: dict[str, int] = {}
        for imp in imports_of(module, path, known):
            if imp.target in known and imp.target != module:
                edges.setdefault(imp.target, imp.line)
        graph[module] = edges
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """Every strongly connected set of two or more modules (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return found


def describe_cycle(members: list[str], graph: Graph, modules: dict[str, Path]) -> str:
    """The cycle's modules and, for each, where it imports another member (file:line)."""
    inside = set(members)
    lines = [f"cycle of {len(members)} modules:"]
    for module in members:
        path = modules[module]
        shown = path.relative_to(REPO) if REPO in path.parents else path.name
        for target, line in sorted(graph[module].items()):
            if target in inside:
                lines.append(f"  {module} -> {target} ({shown}:{line})")
    return "\n".join(lines)


def reached_from(start: str, graph: Graph) -> dict[str, str]:
    """Every module `start` loads, directly or through others: module -> the module that
    imports it on one shortest chain from `start`."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for target in sorted(graph[module]):
                if target != start and target not in came_from:
                    came_from[target] = module
                    following.append(target)
        frontier = following
    return came_from


def chain(start: str, end: str, came_from: dict[str, str]) -> str:
    links = [end]
    while links[-1] != start:
        links.append(came_from[links[-1]])
    return " -> ".join(reversed(links))


def driver_side_reached(graph: Graph, *, worker_side: str, driver_side: list[str]) -> list[str]:
    """Each chain of imports from a worker module to a driver-side module."""
    problems = []
    for module in sorted(m for m in graph if is_within(m, worker_side)):
        came_from = reached_from(module, graph)
        for reached in sorted(came_from):
            if any(is_within(reached, side) for side in driver_side):
                problems.append(chain(module, reached, came_from))
    return problems


def worker_never_imports() -> list[str]:
    never = read_rules()[WORKER_SIDE].never_imports
    return sorted(n for n in never if n.startswith("dynaresize"))


def test_the_project_has_no_import_cycle():
    modules = project_modules()
    graph = import_graph(modules)
    found = cycles(graph)
    assert not found, "\n".join(describe_cycle(c, graph, modules) for c in found)


def test_the_worker_side_never_reaches_the_driver_side():
    driver_side = worker_never_imports()
    assert {
        "dynaresize.executor.cluster",
        "dynaresize.executor.strategies",
        "dynaresize.executor.session",
        "dynaresize.executor.driver",
    } <= set(driver_side)
    graph = import_graph(project_modules())
    assert any(is_within(m, WORKER_SIDE) for m in graph)
    problems = driver_side_reached(graph, worker_side=WORKER_SIDE, driver_side=driver_side)
    assert not problems, "the worker side loads the driver side:\n" + "\n".join(problems)


def _write(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return project_modules({"pkg": root})


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path):
    modules = _write(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from .b import B\n",
            "b.py": "def later():\n    from .c import C\n",
            "c.py": "from . import a\n",
            "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n",
            "e.py": "from .d import x\n",
        },
    )
    graph = import_graph(modules)
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert "pkg.b -> pkg.c (" in describe_cycle(["pkg.a", "pkg.b", "pkg.c"], graph, modules)
    del graph["pkg.c"]["pkg.a"]
    assert cycles(graph) == []


def test_a_worker_module_that_reaches_the_driver_through_a_shared_one_is_found(tmp_path):
    modules = _write(
        tmp_path,
        {
            "__init__.py": "",
            "shared.py": "def helper():\n    from .cluster.calls import call\n",
            "worker/__init__.py": "",
            "worker/actor.py": "from ..shared import helper\n",
            "cluster/__init__.py": "",
            "cluster/calls.py": "from ..worker.actor import Actor\n",
        },
    )
    graph = import_graph(modules)
    problems = driver_side_reached(graph, worker_side="pkg.worker", driver_side=["pkg.cluster"])
    assert problems == ["pkg.worker.actor -> pkg.shared -> pkg.cluster.calls"]
    assert cycles(graph) == [["pkg.cluster.calls", "pkg.shared", "pkg.worker.actor"]]


def test_the_graph_reads_the_real_folders():
    modules = project_modules()
    assert all(REPO in path.resolve().parents for path in modules.values())
    assert "dynaresize.executor.worker.actor" in modules
