"""Nothing lost: every command refuses an output that would destroy an input or a user's files,
and a failure to write is one error line with nothing left behind."""

from __future__ import annotations

import errno
import os
import shutil
import time

import pytest
import yaml
from cli_helpers import assert_one_error, invoke, leftovers, snapshot

from dynaresize.config import BUILTIN_CONFIG_DIR, resolve_config_path
from dynaresize.traces.staged_dir import OUTPUT_MARKER

LIVE_RUN = BUILTIN_CONFIG_DIR.parent / "data" / "live_cpu_short_tail"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A quick config (12 steps, no timeline picture) and a twin run's trace of it (T); a copy
    of a shipped live CPU run (live/trace, live/scenario.yaml) and calibrate's costs of it."""
    folder = tmp_path_factory.mktemp("outputs")
    data = yaml.safe_load(resolve_config_path("example").read_text())
    data["simulation"]["num_steps"] = 12
    data["policies"] = [{"kind": "static"}]
    data["output"] = {"timeline_png": False}
    (folder / "quick.yaml").write_text(yaml.safe_dump(data))
    result = invoke("run", "--config", folder / "quick.yaml", "--out", folder / "T")
    assert result.exit_code == 0, result.output
    shutil.copytree(LIVE_RUN / "trace", folder / "live" / "trace")
    shutil.copy(LIVE_RUN / "scenario.yaml", folder / "live" / "scenario.yaml")
    result = invoke(*_live(folder, "calibrate"), "--out", folder / "costs.yaml")
    assert result.exit_code == 0, result.output
    return folder


def _live(workdir, command):
    """calibrate or validate on the live run, with its scenario (validate with the costs)."""
    args = [command, "--trace", workdir / "live" / "trace"]
    args += ["--config", workdir / "live" / "scenario.yaml"]
    return [*args, "--costs", workdir / "costs.yaml"] if command == "validate" else args


def _sim(workdir, *args):
    return invoke("run", "--mode", "sim", "--config", workdir / "quick.yaml", *args)


def _users_folder(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("my own notes")
    return folder


# --- an output over an input ----------------------------------------------------------------


def test_sim_refuses_to_write_over_the_trace_it_reads(workdir):
    before = snapshot(workdir / "T")
    for out in (workdir / "T", workdir / "T" / "sub", workdir):
        result = _sim(workdir, "--trace", workdir / "T", "--out", out)
        assert_one_error(result, f"--out {out}", "the input")
    assert snapshot(workdir / "T") == before
    assert leftovers(workdir) == []


def test_sim_refuses_to_write_over_its_config_or_costs(workdir, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text((workdir / "quick.yaml").read_text())
    result = invoke("run", "--config", config, "--out", config)
    assert_one_error(result, "is the input", str(config))
    result = invoke("run", "--config", config, "--costs", workdir / "costs.yaml", "--out", workdir)
    assert_one_error(result, "contains the input")


def test_replay_validate_calibrate_and_sweep_refuse_their_inputs_as_output(workdir):
    trace, live = workdir / "T", workdir / "live" / "trace"
    before = snapshot(workdir)
    cases = [
        ("run", "--mode", "replay", "--trace", trace, "--out", trace),
        (*_live(workdir, "validate"), "--out", live / "v"),
        (*_live(workdir, "validate"), "--out", workdir / "costs.yaml"),
        (*_live(workdir, "calibrate"), "--out", live / "steps.parquet"),
        (*_live(workdir, "calibrate"), "--out", workdir / "live" / "scenario.yaml"),
        ("sweep", "--config", workdir / "quick.yaml", "--trace", trace, "--out", trace),
    ]
    for args in cases:
        assert_one_error(invoke(*args), "--out")
    assert snapshot(workdir) == before


def test_a_logs_sidecar_is_an_input_too(tmp_path):
    from dynaresize.config import BUILTIN_CONFIG_DIR

    log = BUILTIN_CONFIG_DIR.parent / "data" / "verl_one_step_off_example.jsonl"
    local = tmp_path / log.name
    local.write_bytes(log.read_bytes())
    sidecar = tmp_path / f"{log.name}.import.json"
    sidecar.write_bytes(log.with_name(sidecar.name).read_bytes())
    result = invoke("calibrate", "--trace", local, "--out", sidecar)
    assert_one_error(result, "is the input", "import.json")
    assert sidecar.read_bytes() == log.with_name(sidecar.name).read_bytes()


# --- a folder or file that is not the project's ---------------------------------------------


def test_a_users_folder_is_never_replaced(workdir, tmp_path):
    mine = _users_folder(tmp_path)
    assert_one_error(_sim(workdir, "--out", mine), f"--out {mine}", "notes.txt")
    assert_one_error(
        invoke("run", "--mode", "replay", "--trace", workdir / "T", "--out", mine), "notes.txt"
    )
    assert_one_error(invoke(*_live(workdir, "validate"), "--out", mine), "notes.txt")
    assert_one_error(
        invoke("sweep", "--config", workdir / "quick.yaml", "--out", mine, "--no-progress"),
        "notes.txt",
    )
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    assert leftovers(tmp_path) == []


def test_a_run_folder_is_replaced_only_while_everything_in_it_is_the_projects(workdir, tmp_path):
    out = tmp_path / "run"
    assert _sim(workdir, "--out", out).exit_code == 0
    assert (out / OUTPUT_MARKER).is_file()
    assert _sim(workdir, "--out", out, "--seed", "3").exit_code == 0  # ours: replaced
    (out / "analysis.ipynb").write_text("{}")
    assert_one_error(_sim(workdir, "--out", out), "analysis.ipynb")
    assert (out / "analysis.ipynb").read_text() == "{}"


def test_calibrate_never_overwrites_a_file_it_did_not_write(workdir, tmp_path):
    theirs = tmp_path / "costs.yaml"
    theirs.write_text("train: {fixed_overhead_s: 3.0}\n")
    result = invoke(*_live(workdir, "calibrate"), "--out", theirs)
    assert_one_error(result, "not written by dynaresize calibrate")
    assert theirs.read_text() == "train: {fixed_overhead_s: 3.0}\n"
    ours = tmp_path / "again.yaml"
    for _ in range(2):  # its own output it may replace
        assert invoke(*_live(workdir, "calibrate"), "--out", ours).exit_code == 0


@pytest.mark.parametrize("command", ["sim", "replay", "validate", "calibrate", "sweep"])
def test_out_under_a_file_and_a_file_as_folder_are_one_error(workdir, tmp_path, command):
    afile = tmp_path / "afile"
    afile.write_text("x")
    trace, config = workdir / "T", workdir / "quick.yaml"
    base = {
        "sim": ["run", "--config", config],
        "replay": ["run", "--mode", "replay", "--trace", trace],
        "validate": _live(workdir, "validate"),
        "calibrate": _live(workdir, "calibrate"),
        "sweep": ["sweep", "--config", config, "--no-progress"],
    }[command]
    assert_one_error(invoke(*base, "--out", afile / "sub"), "afile is a file, not a folder")
    if command != "calibrate":  # calibrate's --out is a file
        assert_one_error(invoke(*base, "--out", afile), "exists and is not a folder")
    assert afile.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_runs_dir_under_a_file_is_one_error(workdir, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    data = yaml.safe_load((workdir / "quick.yaml").read_text())
    data["output"]["runs_dir"] = str(afile / "runs")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    assert_one_error(invoke("run", "--config", tmp_path / "c.yaml"), "afile is a file")


def test_out_dot_is_one_error(workdir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for out in (".", str(tmp_path), ".."):
        assert_one_error(_sim(workdir, "--out", out), "current folder")
    assert list(tmp_path.iterdir()) == []


# --- the file system refuses ----------------------------------------------------------------


def _failing(code):
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    return fail


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_a_full_or_read_only_disk_is_one_error_and_the_earlier_run_is_kept(
    workdir, tmp_path, monkeypatch, code
):
    out = tmp_path / "run"
    assert _sim(workdir, "--out", out).exit_code == 0
    before = snapshot(out)
    from dynaresize.twin import comparison

    monkeypatch.setattr(comparison, "write_chrome_trace", _failing(code))
    result = _sim(workdir, "--out", out, "--seed", "5")
    assert_one_error(result, f"--out {out}: cannot write there", os.strerror(code))
    assert snapshot(out) == before and leftovers(tmp_path) == []
    from dynaresize.traces import staged_dir

    monkeypatch.setattr(staged_dir.tempfile, "mkdtemp", _failing(code))
    assert_one_error(_sim(workdir, "--out", tmp_path / "new"), os.strerror(code))
    assert not (tmp_path / "new").exists()


def test_replay_validate_and_calibrate_on_a_full_disk_leave_nothing(workdir, tmp_path, monkeypatch):
    from dynaresize.traces import chrome_trace, staged_dir

    trace = workdir / "T"
    monkeypatch.setattr(chrome_trace, "write_chrome_trace", _failing(errno.ENOSPC))
    result = invoke("run", "--mode", "replay", "--trace", trace, "--out", tmp_path / "r")
    assert_one_error(result, "No space left on device", "--out")
    monkeypatch.setattr(staged_dir.tempfile, "mkdtemp", _failing(errno.ENOSPC))
    monkeypatch.setattr(staged_dir.tempfile, "mkstemp", _failing(errno.ENOSPC))
    result = invoke(*_live(workdir, "validate"), "--out", tmp_path / "v")
    assert_one_error(result, "No space left on device")
    result = invoke(*_live(workdir, "calibrate"), "--out", tmp_path / "c.yaml")
    assert_one_error(result, "--out", "No space left on device")
    assert list(tmp_path.iterdir()) == []


# --- sweeps ---------------------------------------------------------------------------------


def _sweep(workdir, out, *params):
    args = ["sweep", "--config", workdir / "quick.yaml", "--out", out, "--jobs", "1"]
    return invoke(*args, "--no-progress", *(a for p in params for a in ("--param", p)))


def test_a_failing_sweep_leaves_the_earlier_sweep_folder_untouched(workdir, tmp_path, monkeypatch):
    out = tmp_path / "sweep"
    assert _sweep(workdir, out, "simulation.thrash_window_steps=5").exit_code == 0
    before = snapshot(out)
    from dynaresize.twin.sweeps import sweep as sweep_module

    real = sweep_module.pd.DataFrame.to_parquet

    def full_on_results(self, path, *args, **kwargs):
        if str(path).endswith("results.parquet"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(sweep_module.pd.DataFrame, "to_parquet", full_on_results)
    # A wider sweep: it runs new points (and caches them) before the results fail to land.
    result = _sweep(workdir, out, "simulation.thrash_window_steps=5,6,7")
    assert_one_error(result, "No space left on device", f"--out {out}")
    assert snapshot(out) == before
    assert leftovers(tmp_path) == [] and leftovers(out) == []
    # A new folder that fails is not left behind at all.
    assert_one_error(
        _sweep(workdir, tmp_path / "new", "simulation.thrash_window_steps=5"), "No space"
    )
    assert not (tmp_path / "new").exists()


def test_sweep_address_that_does_not_answer_is_one_error_and_creates_nothing(workdir, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "never"
    args = ["sweep", "--config", workdir / "quick.yaml", "--out", out, "--no-progress"]
    started = time.monotonic()
    result = invoke(*args, "--address", "127.0.0.1:1")
    assert_one_error(result, "--address 127.0.0.1:1", "no Ray cluster answers")
    assert time.monotonic() - started < 10
    assert not out.exists()


def test_sweep_address_of_something_that_is_not_ray_times_out(workdir, tmp_path, monkeypatch):
    """Something listens, but it is not Ray: refused once the stated timeout has passed."""
    pytest.importorskip("ray")
    import socket

    from dynaresize.twin.sweeps import ray_probe

    monkeypatch.setattr(ray_probe, "RAY_CONNECT_TIMEOUT_S", 3.0)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        out = tmp_path / "never"
        args = ["sweep", "--config", workdir / "quick.yaml", "--out", out, "--no-progress"]
        started = time.monotonic()
        result = invoke(*args, "--address", address)
    assert_one_error(result, f"--address {address}", "within 3 s")
    assert time.monotonic() - started < 3.0 + 5
    assert not out.exists()
