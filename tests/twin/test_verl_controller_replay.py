"""A replay of a log of veRL's separate-async trainer sets what its controller did (measured
switches, its decisions) beside the project's policies and veRL's own rule in the twin."""

from __future__ import annotations

import pandas as pd
from verl_log_factory import separate_async_lines, write_log

from dynaresize.twin.analysis import run_replay
from dynaresize.twin.run_facts import RunFacts


def test_replay_compares_the_recorded_controller_with_the_policies(tmp_path):
    lines = [
        {"step": line["step"] + 6 * repeat, "data": line["data"]}
        for repeat in range(3)
        for line in separate_async_lines()
    ]
    write_log(tmp_path / "sep.jsonl", lines)
    result = run_replay(
        trace=tmp_path / "sep.jsonl",
        facts=RunFacts(train_gpus=4, rollout_gpus=4, model_params_b=1.5),
        out_dir=tmp_path / "out",
    )
    recorded = result.table.iloc[0]
    assert recorded["name"] == "recorded (measured)"
    assert recorded["num_resizes"] == 3 * 6  # every lend and every reclaim measured
    assert set(result.policies) == {"hysteresis", "verl_switch"}
    decisions = pd.read_csv(tmp_path / "out" / "decisions.csv")
    controller = decisions[decisions["run"] == "recorded (measured)"]
    assert len(controller) == len(lines) and set(controller["policy"]) == {"verl_separate_async"}
    assert (controller["decision"] == "resize").sum() == 3 * 3
    assert any("switched GPUs 18 times" in n for n in result.notes)
