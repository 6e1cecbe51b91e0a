"""Every run folder of `run --mode sim` carries the workload's samples, so any of them can be
replayed or calibrated from with the exact per-sample lengths the twin simulated."""

from __future__ import annotations

import numpy as np
import pytest
from twin_scenarios import scenario

from dynaresize.policies import parse_policy_config
from dynaresize.twin.comparison import run_comparison, write_comparison
from dynaresize.twin.trace_source import open_trace


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    config = scenario()
    policies = [parse_policy_config({"kind": kind}) for kind in ("hysteresis", "greedy")]
    comparison = run_comparison(config, policies)
    out = tmp_path_factory.mktemp("run") / "out"
    write_comparison(
        comparison, out, resolved_config=config.model_dump(mode="json"), timeline_png=False
    )
    return out, comparison


def test_every_run_folder_holds_the_simulated_samples(folder):
    out, comparison = folder
    workload = comparison.context.workload
    assert len(comparison.runs) > 1
    folders = [out] + [out / "policies" / name for name in comparison.runs]
    for run_folder in folders:
        trace = open_trace(run_folder)
        assert len(trace.samples) == len(workload.response_tokens), run_folder
        assert trace.workload_notes() == []  # nothing inferred: lengths as simulated
        replayed = trace.to_workload()
        assert np.array_equal(replayed.response_tokens, workload.response_tokens)
        assert np.array_equal(replayed.prompt_tokens, workload.prompt_tokens)
        assert np.array_equal(replayed.step_offsets, workload.step_offsets)


def test_the_samples_table_is_on_disk_once_however_many_folders_hold_it(folder):
    out, comparison = folder
    folders = [out] + [out / "policies" / name for name in comparison.runs]
    files = [f / "samples.parquet" for f in folders]
    assert len({f.stat().st_ino for f in files}) == 1
    assert files[0].stat().st_nlink == len(files)
    # the first policy's tables and trace are the top folder's, linked too
    first = out / "policies" / next(iter(comparison.runs))
    for name in ("steps.parquet", "trace.json"):
        assert (first / name).stat().st_ino == (out / name).stat().st_ino
    # summary.json differs (the top one holds every policy's): never a link
    assert (first / "summary.json").read_text() != (out / "summary.json").read_text()


def test_where_links_fail_the_folders_get_copies(tmp_path, monkeypatch):
    import os

    def refuse(*_args):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", refuse)
    config = scenario()
    policies = [parse_policy_config({"kind": kind}) for kind in ("hysteresis", "greedy")]
    comparison = run_comparison(config, policies)
    out = tmp_path / "out"
    write_comparison(comparison, out, resolved_config=config.model_dump(mode="json"))
    files = [out / "samples.parquet"] + [
        out / "policies" / name / "samples.parquet" for name in comparison.runs
    ]
    assert len({f.stat().st_ino for f in files}) == len(files)
    assert len({f.read_bytes() for f in files}) == 1


def test_a_link_never_replaces_a_file(tmp_path):
    from dynaresize.traces.parquet_io import link_or_copy

    source, target = tmp_path / "a", tmp_path / "b"
    source.write_text("new")
    target.write_text("kept")
    with pytest.raises(FileExistsError):
        link_or_copy(source, target)
    assert target.read_text() == "kept"


def test_every_folder_lists_its_linked_samples_as_its_own(folder):
    import json

    from dynaresize.traces.staged_dir import OUTPUT_MARKER

    out, comparison = folder
    for run_folder in [out] + [out / "policies" / name for name in comparison.runs]:
        marker = json.loads((run_folder / OUTPUT_MARKER).read_text())
        assert "samples.parquet" in marker["entries"], run_folder
    assert sorted(p.name for p in out.parent.iterdir()) == ["out"]  # no private folder left


def _blocks_of(workload, steps_per_block):
    return [
        (first, workload.slice_steps(first, min(first + steps_per_block, workload.num_steps)))
        for first in range(0, workload.num_steps, steps_per_block)
    ]


def test_a_table_fed_block_by_block_is_the_one_drawn_again(tmp_path):
    """The blocks the context draws, handed to the writer as they come, make the same file as
    the workload drawn again from its seed."""
    from dynaresize.twin.shared_samples import SharedSamples
    from dynaresize.twin.simulation import build_context

    config = scenario()
    context = build_context(config)
    folders = {}
    for way in ("fed", "drawn"):
        out = tmp_path / way / "run"
        folders[way] = out
        out.mkdir(parents=True)
        with SharedSamples(beside=out) as samples:
            if way == "fed":
                sink = samples.block_sink()
                for first, block in _blocks_of(context.workload, 7):
                    sink(first, block)
            samples.start(context)
            samples.attach(out)
    fed, drawn = (folders[w] / "samples.parquet" for w in ("fed", "drawn"))
    assert fed.read_bytes() == drawn.read_bytes()


def test_a_run_that_fails_while_feeding_leaves_no_folder_behind(tmp_path):
    from dynaresize.twin.shared_samples import SharedSamples
    from dynaresize.twin.simulation import build_context

    context = build_context(scenario())
    out = tmp_path / "new" / "deeper" / "run"
    failed = pytest.raises(RuntimeError, match="the simulation failed")
    with failed, SharedSamples(beside=out) as samples:
        sink = samples.block_sink()
        first, block = _blocks_of(context.workload, 5)[0]
        sink(first, block)
        raise RuntimeError("the simulation failed")
    assert list(tmp_path.iterdir()) == []  # the private folder and the folders made for it
