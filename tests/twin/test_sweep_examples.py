"""The README's example sweep shows the trade-off it is there for, and a configured policy the
sweep cannot apply a parameter to is reported and kept, not dropped."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from dynaresize.twin import load_config, plots
from dynaresize.twin.sweeps import run_sweep, sweep_summary

ROOT = Path(__file__).resolve().parents[2]


def _readme_sweep_params() -> list[str]:
    """The --param values of the README's `dynaresize sweep --config example` command."""
    text = (ROOT / "README.md").read_text()
    match = re.search(r"```\n(dynaresize sweep --config example .*?)```", text, re.S)
    assert match, "README has no example sweep"
    words = shlex.split(match.group(1).replace("\\\n", " "))
    return [words[i + 1] for i, word in enumerate(words) if word == "--param"]


@pytest.fixture(scope="module")
def readme_table():
    config = load_config(ROOT / "dynaresize" / "configs" / "example.yaml")
    return run_sweep(config, params=_readme_sweep_params(), seeds=1, jobs=2, progress=False)


def test_readme_sweep_varies_along_both_axes(readme_table):
    swept = readme_table[readme_table["policy"] == "hysteresis"]
    grid = swept.pivot_table(
        index="policy.up_threshold", columns="policy.cooldown_steps", values="speedup"
    )
    assert grid.shape == (4, 5)
    along_cooldown = grid.max(axis=1) - grid.min(axis=1)
    along_threshold = grid.max(axis=0) - grid.min(axis=0)
    assert along_cooldown.max() > 0.05 and along_threshold.max() > 0.05
    resizes = swept.pivot_table(
        index="policy.up_threshold", columns="policy.cooldown_steps", values="num_resizes"
    )
    assert resizes.to_numpy().max() > resizes.to_numpy().min()


def test_a_policy_without_the_knob_is_a_reported_reference_row(readme_table):
    greedy = readme_table[readme_table["policy"] == "greedy"]
    assert len(greedy) == 1  # once per workload and seed
    assert greedy[["policy.cooldown_steps", "policy.up_threshold"]].isna().all(axis=None)
    (note,) = readme_table.attrs["notes"]
    assert note.startswith("greedy (policies.1) has no cooldown_steps, up_threshold")
    summary = sweep_summary(readme_table)
    assert "greedy" in set(summary["policy"])
    heatmap = plots.plot_sweep_heatmap(
        readme_table, x="policy.cooldown_steps", y="policy.up_threshold"
    )
    assert "mean over 1 runs per cell" in heatmap.axes[0].get_title()
