"""One all-or-nothing folder mechanism: a failure leaves what was there; success replaces or
merges as asked."""

from __future__ import annotations

import pytest

from dynaresize.traces.staged_dir import OUTPUT_MARKER, staged_dir


def _existing(tmp_path, *, with_sub=False):
    """An earlier output folder of the project (it carries the marker)."""
    out = tmp_path / "out"
    with staged_dir(out, replace=True) as staging:
        (staging / "kept.txt").write_text("old")
        (staging / "shared.txt").write_text("old")
        if with_sub:
            (staging / "sub").mkdir()
            (staging / "sub" / "old.txt").write_text("old")
    return out


def _names(folder):
    return sorted(p.name for p in folder.iterdir() if p.name != OUTPUT_MARKER)


@pytest.mark.parametrize("replace", [True, False])
def test_a_failure_leaves_the_folder_as_it_was_and_no_staging(tmp_path, replace):
    out = _existing(tmp_path)
    with pytest.raises(RuntimeError), staged_dir(out, replace=replace) as staging:
        (staging / "shared.txt").write_text("new")
        raise RuntimeError("part-way")
    assert _names(out) == ["kept.txt", "shared.txt"]
    assert (out / "shared.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_replace_swaps_the_whole_folder(tmp_path):
    out = _existing(tmp_path)
    with staged_dir(out, replace=True) as staging:
        (staging / "shared.txt").write_text("new")
    assert _names(out) == ["shared.txt"]
    assert (out / "shared.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_merge_keeps_other_files(tmp_path):
    out = _existing(tmp_path)
    with staged_dir(out, replace=False) as staging:
        (staging / "shared.txt").write_text("new")
    assert (out / "kept.txt").read_text() == "old"
    assert (out / "shared.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_new_folder_appears_whole(tmp_path):
    out = tmp_path / "deep" / "out"
    with staged_dir(out, replace=False) as staging:
        (staging / "a.txt").write_text("a")
    assert _names(out) == ["a.txt"]


def _failing_on(call_number: int, monkeypatch):
    """Make the module's n-th os.replace fail, as a full disk or a clash would."""
    from dynaresize.traces import staged_dir as module

    real = module.os.replace
    calls = {"n": 0}

    def replace(src, dst):
        calls["n"] += 1
        if calls["n"] == call_number:
            raise OSError("simulated failure")
        return real(src, dst)

    monkeypatch.setattr(module.os, "replace", replace)


@pytest.mark.parametrize(
    ("replace", "failing_call"),
    # replace: the old folder aside, then the new one in; merge: each name (the marker first)
    # aside, then in
    [(True, 1), (True, 2), *((False, n) for n in range(1, 7))],
)
def test_a_failed_move_in_puts_back_what_was_there(tmp_path, monkeypatch, replace, failing_call):
    out = _existing(tmp_path, with_sub=True)
    with pytest.raises(OSError), staged_dir(out, replace=replace) as staging:
        (staging / "shared.txt").write_text("new")
        (staging / "sub").mkdir()
        (staging / "sub" / "new.txt").write_text("new")
        _failing_on(failing_call, monkeypatch)
    assert _names(out) == ["kept.txt", "shared.txt", "sub"]
    assert (out / "shared.txt").read_text() == "old"
    assert [p.name for p in (out / "sub").iterdir()] == ["old.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
