"""Run a script or module of this repository without installing it.

The repository keeps `twin/`, `policies/`, `traces/` and `executor/` at the top level while they
import as `dynaresize.twin` etc. (see pyproject's package-dir). Where the project cannot be
pip-installed (a machine with no package index), this builds a small tree of symbolic links that
gives the same import names, puts it first on PYTHONPATH (so Ray workers started afterwards
inherit it) and runs the target. Run it from a folder other than the repository root: there the
root's own `dynaresize/` folder, which lacks the mapped subpackages, would shadow the link tree.

    python3 tools/devpath.py path/to/script.py [args...]
    python3 tools/devpath.py -m dynaresize.cli run --mode sim --config example
    python3 tools/devpath.py --print-path        # prints the folder to put on PYTHONPATH
"""

from __future__ import annotations

import os
import runpy
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUBPACKAGES = ("twin", "policies", "traces", "executor")


def build_link_tree() -> Path:
    root = Path(tempfile.gettempdir()) / "dynaresize-devpath"
    pkg = root / "dynaresize"
    pkg.mkdir(parents=True, exist_ok=True)
    links = {name: REPO / "dynaresize" / name for name in os.listdir(REPO / "dynaresize")}
    links.update({name: REPO / name for name in SUBPACKAGES})
    for name, target in links.items():
        link = pkg / name
        if link.is_symlink() or link.exists():
            if link.is_symlink() and Path(os.readlink(link)) == target:
                continue
            link.unlink()
        link.symlink_to(target)
    return root


def main() -> None:
    root = build_link_tree()
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(root), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    )
    os.environ["DYNARESIZE_DEVPATH"] = "1"
    sys.path.insert(0, str(root))
    args = sys.argv[1:]
    if not args or args[0] == "--print-path":
        print(root)
        return
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main()
