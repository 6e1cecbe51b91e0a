"""`dynaresize sweep` prints what the sweep table's notes say (a policy a parameter does not
apply to is reported on the screen, not only inside results.parquet)."""

from __future__ import annotations

import yaml
from cli_helpers import invoke

from dynaresize.config import resolve_config_path


def test_sweep_prints_the_policy_a_parameter_does_not_apply_to(tmp_path):
    data = yaml.safe_load(resolve_config_path("example").read_text())
    data["simulation"]["num_steps"] = 6
    config = tmp_path / "small.yaml"
    config.write_text(yaml.safe_dump(data))
    out = tmp_path / "sweep"
    result = invoke(
        "sweep", "--config", config, "--param", "policy.cooldown_steps=1,2",
        "--out", out, "--jobs", "1", "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and "greedy" in notes[0] and "cooldown_steps" in notes[0], notes
    assert (out / "results.parquet").is_file()
