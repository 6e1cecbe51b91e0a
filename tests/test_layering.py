"""Who may import whom, read from the table in docs/architecture.md and checked on the source.

The rule lives in one place (the doc's table); this test parses it and walks every module of the
project with `ast`, so a new import that breaks the layering fails here with the file and line.
A second test imports the whole twin, traces and policies in a fresh interpreter and checks that
none of the live executor's heavy dependencies came along.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
HEADER = "| package | folder | may import | never imports | holds |"
FOLDERS = {
    "dynaresize.policies": REPO / "policies",
    "dynaresize.traces": REPO / "traces",
    "dynaresize.twin": REPO / "twin",
    "dynaresize.executor": REPO / "executor",
}
HEAVY = ("torch", "ray", "vllm")


@dataclass(frozen=True)
class Rule:
    package: str
    may_import: frozenset[str] | None  # None: everything
    never_imports: frozenset[str]


def _names(cell: str) -> frozenset[str]:
    cell = cell.strip()
    if cell in ("-", ""):
        return frozenset()
    return frozenset(n.strip().strip("`") for n in cell.split(",") if n.strip())


def read_rules() -> dict[str, Rule]:
    lines = DOC.read_text().splitlines()
    start = lines.index(HEADER)
    rules = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        package = cells[0].strip("`")
        may = None if cells[2] == "everything" else _names(cells[2])
        rules[package] = Rule(package, may, _names(cells[3]))
    return rules


def owner(module: str, rules: dict[str, Rule]) -> str | None:
    """The longest package of the table that is `module` or a dotted prefix of it."""
    best = None
    for package in rules:
        if (module == package or module.startswith(package + ".")) and (
            best is None or len(package) > len(best)
        ):
            best = package
    return best


def project_modules() -> dict[str, Path]:
    """Every module of the project by dotted name, read from the real folders (not the links)."""
    modules: dict[str, Path] = {}
    roots = {**FOLDERS, "dynaresize": REPO / "dynaresize"}
    for package, root in roots.items():
        for path in root.rglob("*.py"):
            relative = path.relative_to(root)
            if package == "dynaresize" and relative.parts[0] in ("twin", "policies", "traces"):
                continue
            if package == "dynaresize" and relative.parts[0] == "executor":
                continue
            parts = list(relative.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join([package, *parts])] = path
    return modules


@dataclass(frozen=True)
class Import:
    target: str
    line: int
    at_module_level: bool


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(module: str, path: Path, known: set[str]) -> list[Import]:
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                continue  # never executed
            if isinstance(child, ast.Import):
                found.extend(Import(a.name, child.lineno, top) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base_parts = package.split(".")
                    base_parts = base_parts[: len(base_parts) - child.level + 1]
                    base = ".".join(base_parts + ([child.module] if child.module else []))
                else:
                    base = child.module or ""
                for alias in child.names:
                    sub = f"{base}.{alias.name}"
                    found.append(Import(sub if sub in known else base, child.lineno, top))
            inner_top = top and not isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            visit(child, inner_top)

    visit(tree, True)
    return found


def test_the_table_names_every_package():
    rules = read_rules()
    assert set(FOLDERS) <= set(rules), "docs/architecture.md lacks a row for a package"
    assert "dynaresize.config_io" in rules and "dynaresize" in rules
    for module in project_modules():
        assert owner(module, rules) is not None, module


def test_imports_follow_the_table():
    rules = read_rules()
    modules = project_modules()
    known = set(modules)
    problems = []
    for module, path in sorted(modules.items()):
        rule = rules[owner(module, rules)]  # type: ignore[index]
        for imp in imports_of(module, path, known):
            where = f"{path.relative_to(REPO)}:{imp.line}"
            top_name = imp.target.split(".")[0]
            if imp.at_module_level and top_name in rule.never_imports:
                problems.append(f"{where}: {rule.package} imports {imp.target} at module level")
            if not imp.target.startswith("dynaresize"):
                continue
            target_owner = owner(imp.target, rules)
            if target_owner in (None, rule.package) or rule.may_import is None:
                continue
            if target_owner not in rule.may_import:
                problems.append(f"{where}: {rule.package} may not import {imp.target}")
    assert not problems, "\n".join(problems)


def test_every_package_says_what_it_is_for_and_may_import():
    for module, path in project_modules().items():
        if path.name != "__init__.py":
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert doc, f"{path.relative_to(REPO)} has no docstring"
        assert re.search(r"\bimport", doc), (
            f"{path.relative_to(REPO)}: the docstring does not say what {module} may import"
        )


def test_twin_traces_and_policies_load_without_the_live_stack():
    modules = sorted(
        m
        for m in project_modules()
        if m.split(".")[1:2] in (["twin"], ["traces"], ["policies"]) and not m.endswith("__main__")
    )
    probe = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    loaded = set(json.loads(result.stdout.splitlines()[-1]))
    unwanted = [
        m
        for m in loaded
        if m.split(".")[0] in HEAVY
        or m == "dynaresize.executor"
        or m.startswith(("dynaresize.executor.", "dynaresize.commands"))
        or m in ("dynaresize.config", "dynaresize.cli")
    ]
    assert not unwanted, f"importing the twin, traces and policies loaded {sorted(unwanted)[:10]}"


@pytest.mark.parametrize("package", sorted(FOLDERS))
def test_the_link_in_dynaresize_points_at_the_top_level_folder(package):
    link = REPO / "dynaresize" / package.split(".")[1]
    assert link.is_symlink() and link.resolve() == FOLDERS[package].resolve()


MAX_MODULE_LINES = 500


def test_no_module_is_over_the_size_limit():
    """Small modules with one job: a module past the limit is split by job, not by line count."""
    long = {
        name: n
        for name, path in project_modules().items()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"over {MAX_MODULE_LINES} lines: {long}"
