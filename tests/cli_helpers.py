"""Checks shared by the command-line tests: what a refused input must look like."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from dynaresize.cli import app

runner = CliRunner()


def invoke(*args: str):
    """Run `dynaresize ARGS` in this process (no interpreter start: the tests stay fast)."""
    return runner.invoke(app, [str(a) for a in args])


def assert_one_error(result, *words: str) -> str:
    """Exit code 2, no traceback, and exactly one non-empty line of output: `error: ...`
    holding each of `words`. Returns the line."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: "), result.output
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (hidden ones too) and its bytes: what must stay untouched."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def leftovers(folder: Path) -> list[str]:
    """Temporary files or folders a command left in `folder` (staging, .tmp, .old)."""
    return sorted(
        p.name for p in folder.iterdir() if p.name.endswith((".tmp", ".old")) and p.name[0] == "."
    )
