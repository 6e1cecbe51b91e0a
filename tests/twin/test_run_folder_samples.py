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
