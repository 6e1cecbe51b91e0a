"""Output folders: written only where nothing of the user's can be lost, marked as the project's,
and every failure to write one line naming the destination with nothing left behind."""

from __future__ import annotations

import errno
import json
import os
import stat

import pytest

from dynaresize.traces import staged_dir as module
from dynaresize.traces.staged_dir import (
    OUTPUT_MARKER,
    OutputError,
    check_output_dir,
    claim_output_dir,
    is_project_output,
    staged_dir,
    write_file_atomically,
)


def _users_folder(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    return folder


def _hidden(tmp_path):
    return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("replace", [True, False])
def test_a_users_folder_is_refused_and_left_alone(tmp_path, replace):
    folder = _users_folder(tmp_path)
    with pytest.raises(OutputError, match=r"notes\.txt"), staged_dir(folder, replace=replace) as s:
        (s / "result.txt").write_text("new")
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
    assert (folder / "notes.txt").read_text() == "keep me"
    assert _hidden(tmp_path) == []


def test_a_new_folder_carries_the_marker_listing_what_was_written(tmp_path):
    out = tmp_path / "run"
    with staged_dir(out, replace=True) as staging:
        (staging / "a.txt").write_text("a")
        (staging / "sub").mkdir()
    marker = json.loads((out / OUTPUT_MARKER).read_text())
    assert marker == {"written_by": "dynaresize", "entries": ["a.txt", "sub"]}
    assert is_project_output(out)
    # The folder is readable as any folder the user makes (mkdtemp's 0700 is not kept).
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~umask


def test_an_empty_folder_may_receive_the_output(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    with staged_dir(out, replace=True) as staging:
        (staging / "a.txt").write_text("a")
    assert (out / "a.txt").read_text() == "a" and is_project_output(out)


def test_a_file_the_user_added_to_a_run_folder_is_never_lost(tmp_path):
    out = tmp_path / "run"
    with staged_dir(out, replace=True) as staging:
        (staging / "a.txt").write_text("a")
    (out / "my_notes.txt").write_text("mine")
    with pytest.raises(OutputError, match=r"my_notes\.txt"), staged_dir(out, replace=True) as s:
        (s / "a.txt").write_text("b")
    assert (out / "a.txt").read_text() == "a"
    # Merging beside it is fine, and the marker then lists both of the project's files.
    with staged_dir(out, replace=False) as staging:
        (staging / "b.txt").write_text("b")
    assert (out / "my_notes.txt").read_text() == "mine"
    assert json.loads((out / OUTPUT_MARKER).read_text())["entries"] == ["a.txt", "b.txt"]
    # ...but a merge never overwrites it.
    with pytest.raises(OutputError, match=r"my_notes\.txt"), staged_dir(out, replace=False) as s:
        (s / "my_notes.txt").write_text("overwritten")
    assert (out / "my_notes.txt").read_text() == "mine"
    assert _hidden(tmp_path) == []


@pytest.mark.parametrize("replace", [True, False])
def test_a_path_under_a_file_or_a_file_is_refused(tmp_path, replace):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(OutputError, match="afile is a file, not a folder"):
        check_output_dir(afile / "sub", replace=replace)
    with pytest.raises(OutputError, match="exists and is not a folder"):
        check_output_dir(afile, replace=replace)
    assert afile.read_text() == "x"


def test_the_current_folder_and_its_parents_are_refused(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for given in (".", str(work), "..", str(tmp_path)):
        with pytest.raises(OutputError, match="current folder"):
            check_output_dir(module.Path(given))


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_a_full_or_read_only_file_system_is_one_error_and_leaves_nothing(
    tmp_path, monkeypatch, code
):
    out = tmp_path / "run"
    with staged_dir(out, replace=True) as staging:
        (staging / "a.txt").write_text("old")

    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    with pytest.raises(OutputError) as caught, staged_dir(out, replace=True) as staging:
        (staging / "a.txt").write_text("new")
        fail()
    assert str(caught.value).startswith(f"--out {out}: cannot write there")
    assert os.strerror(code) in str(caught.value)
    assert (out / "a.txt").read_text() == "old"
    assert _hidden(tmp_path) == []
    # The same when the folder cannot even be created.
    monkeypatch.setattr(module.tempfile, "mkdtemp", fail)
    with (
        pytest.raises(OutputError, match="cannot write there"),
        staged_dir(tmp_path / "new", replace=True),
    ):
        pass
    assert not (tmp_path / "new").exists()


def test_other_errors_inside_are_not_disguised(tmp_path):
    with pytest.raises(FileNotFoundError), staged_dir(tmp_path / "o", replace=True):
        open(tmp_path / "missing-input.txt")  # noqa: SIM115 - raises
    assert not (tmp_path / "o").exists() and _hidden(tmp_path) == []


def test_claim_creates_a_marked_folder_or_refuses_a_users_one(tmp_path):
    assert claim_output_dir(tmp_path / "sweep") is True
    assert is_project_output(tmp_path / "sweep")
    assert claim_output_dir(tmp_path / "sweep") is False
    folder = _users_folder(tmp_path)
    with pytest.raises(OutputError, match="did not write"):
        claim_output_dir(folder)
    assert not is_project_output(folder)


def test_a_single_file_under_a_file_or_on_a_full_disk_is_one_error(tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(OutputError, match="afile is a file, not a folder"):
        write_file_atomically(afile / "costs.yaml", lambda f: f.write("a: 1\n"))
    with pytest.raises(OutputError, match="is a folder, not a file"):
        write_file_atomically(tmp_path, lambda f: f.write("a: 1\n"))

    def full(f):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    target = tmp_path / "costs.yaml"
    target.write_text("old\n")
    with pytest.raises(OutputError, match="No space left"):
        write_file_atomically(target, full)
    assert target.read_text() == "old\n"
    assert _hidden(tmp_path) == []


def test_a_nested_writer_failing_names_the_destination_not_the_staging(tmp_path, monkeypatch):
    out = tmp_path / "replay"

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OutputError) as caught, staged_dir(out, replace=False) as staging:
        monkeypatch.setattr(module.tempfile, "mkdtemp", full)
        with staged_dir(staging, replace=False):
            pass
    assert str(caught.value).startswith(f"--out {out}: cannot write there")
    assert _hidden(tmp_path) == [] and not out.exists()
