"""The project's modules, the imports each makes (read with `ast`: nothing is imported), and the
rules of the table in docs/architecture.md (who may import whom).

Shared by the layering test (the table, import by import) and the import graph test (no
cycle; the worker side never reaches the driver side). An import inside a
function counts like one at the top of the module (it runs whenever that function does); one
under `if TYPE_CHECKING:` never runs and is left out.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = {
    "dynaresize.policies": REPO / "policies",
    "dynaresize.traces": REPO / "traces",
    "dynaresize.twin": REPO / "twin",
    "dynaresize.executor": REPO / "executor",
}
LINKED = {name.split(".")[1] for name in FOLDERS}
"""`dynaresize/<name>` links to the top-level folder of the same name."""
DOC = REPO / "docs" / "architecture.md"
HEADER = "| package | folder | may import | never imports | holds |"


def project_modules(roots: dict[str, Path] | None = None) -> dict[str, Path]:
    """Every module of the project by dotted name, read from the real folders (not the links);
    `roots` (package name -> folder) replaces the project's own, for tests of these helpers."""
    if roots is None:
        roots = {**FOLDERS, "dynaresize": REPO / "dynaresize"}
    modules: dict[str, Path] = {}
    for package, root in roots.items():
        for path in root.rglob("*.py"):
            relative = path.relative_to(root)
            if package == "dynaresize" and relative.parts[0] in LINKED:
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
    """The imports `module` (at `path`) makes: a name taken from a package is the submodule of
    that name where `known` has one, else the package."""
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


def is_within(module: str, package: str) -> bool:
    """`module` is `package` or one of its submodules."""
    return module == package or module.startswith(package + ".")


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
