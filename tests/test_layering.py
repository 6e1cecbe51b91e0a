"""Who may import whom, read from the table in docs/architecture.md and checked on the source.

The rule lives in one place (the doc's table); this test parses it and walks every module of the
project with `ast` (`project_imports.py`), so a new import that breaks the layering fails here
with the file and line. A library under "never imports" is refused at module level (a function
may load it lazily where a feature needs it); a project package under "never imports" is
refused anywhere, since a function that imports it loads it all the same.
A second test imports the whole twin, traces and policies in a fresh interpreter and checks that
none of the live executor's heavy dependencies came along.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys

import pytest
from project_imports import (
    FOLDERS,
    REPO,
    imports_of,
    is_within,
    owner,
    project_modules,
    read_rules,
)

HEAVY = ("torch", "ray", "vllm")


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
            never = [n for n in rule.never_imports if n.startswith("dynaresize")]
            if any(is_within(imp.target, n) for n in never):
                problems.append(f"{where}: {rule.package} never imports {imp.target}")
            target_owner = owner(imp.target, rules)
            if target_owner in (None, rule.package) or rule.may_import is None:
                continue
            if target_owner not in rule.may_import:
                problems.append(f"{where}: {rule.package} may not import {imp.target}")
    assert not problems, "\n".join(problems)


def test_every_never_of_the_table_names_a_library_or_a_project_module():
    """A misspelt project name under "never imports" would forbid nothing."""
    known = set(project_modules())
    for rule in read_rules().values():
        for name in rule.never_imports:
            if name.startswith("dynaresize"):
                assert any(is_within(m, name) for m in known), (rule.package, name)


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


MAX_MODULE_LINES = 400
OVER_THE_LIMIT: dict[str, int] = {}
"""Modules still longer than the limit, each held to its present size until it is split by job."""


def test_no_module_is_over_the_size_limit():
    """Small modules with one job: a module past the limit is split by job, not by line count."""
    sizes = {name: len(path.read_text().splitlines()) for name, path in project_modules().items()}
    long = {name: n for name, n in sizes.items() if n > OVER_THE_LIMIT.get(name, MAX_MODULE_LINES)}
    assert not long, f"over {MAX_MODULE_LINES} lines (or their listed size): {long}"
    split = sorted(name for name in OVER_THE_LIMIT if sizes.get(name, 0) <= MAX_MODULE_LINES)
    assert not split, f"within {MAX_MODULE_LINES} lines now: drop them from OVER_THE_LIMIT: {split}"
