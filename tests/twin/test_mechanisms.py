"""Mechanisms side by side (twin/mechanisms.py, `run --mode sim|replay --mechanisms`): every
mechanism on one workload, each beside its offline optimum, and a summary that names the winner
with the switch costs that decided it."""

from __future__ import annotations

import json

import pytest
import yaml
from cli_helpers import invoke
from twin_scenarios import raw, scenario

from dynaresize.twin.mechanisms import MECHANISM_COLUMNS, compare_mechanisms
from dynaresize.twin.simulation import build_context

TINY = {"simulation": {"num_steps": 14, "seed": 3}, "pipeline": {"mode": "one_step_off"}}


@pytest.fixture(scope="module")
def comparison():
    config = scenario(**TINY)
    context = build_context(config)
    return config, context, compare_mechanisms(config, context)


def test_every_mechanism_runs_beside_its_offline_optimum(comparison):
    config, context, result = comparison
    table = result.table
    assert list(table.columns) == MECHANISM_COLUMNS
    ran = table[table["kind"] == "run"]
    optima = table[table["kind"] == "offline optimum"]
    assert len(ran) == 4 and len(optima) == 3
    assert ran.iloc[0]["total_s"] == pytest.approx(context.baselines.best_total_s)
    start = config.cluster.initial_allocation.label
    assert {r.split(" from ")[0] for r in ran["mechanism"][1:]} == {
        "step-boundary resizes",
        "lending",
        "lending + step-boundary resizes",
    }
    assert all(name.endswith(f"from {start}") for name in ran["mechanism"][1:])
    # the free-start resize optimum is below every static split; lending never resizes
    assert optima.iloc[0]["total_s"] <= context.baselines.best_total_s + 1e-6
    lending = ran[ran["mechanism"].str.startswith("lending from")].iloc[0]
    assert lending["num_resizes"] == 0 and lending["policy"] == "verl_drc"
    # resizes plus lending is at least as good a bound as either alone
    assert optima.iloc[2]["total_s"] <= min(optima.iloc[0]["total_s"], optima.iloc[1]["total_s"])
    assert table["change_vs_best_static"].iloc[0] == 0.0


def test_the_summary_names_the_winner_and_the_switch_costs(comparison):
    _, context, result = comparison
    ran = result.table[result.table["kind"] == "run"]
    winner = ran.loc[ran["total_s"].idxmin(), "mechanism"]
    assert result.summary[0].startswith(f"{winner} wins")
    costs = next(line for line in result.summary if line.startswith("switch costs"))
    assert f"{context.plan.critical_s:.1f} s" in costs
    assert f"{context.lend_plan.switch_s:.1f} s" in costs


def test_sim_with_mechanisms_writes_the_table_plot_and_summary(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw(**TINY)))
    out = tmp_path / "out"
    result = invoke("run", "--mode", "sim", "--config", path, "--mechanisms", "--out", out)
    assert result.exit_code == 0, result.output
    assert "mechanisms side by side" in result.output and "switch costs" in result.output
    for name in ("mechanisms.csv", "mechanisms.json", "mechanisms.png"):
        assert (out / name).stat().st_size > 0
    document = json.loads((out / "mechanisms.json").read_text())
    assert len(document["table"]) == 7 and document["summary"][0]


def test_replay_with_mechanisms_compares_them_on_the_recorded_workload(tmp_path):
    from dynaresize.twin.analysis import run_replay

    sim = tmp_path / "sim"
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw(**TINY)))
    assert invoke("run", "--config", path, "--out", sim).exit_code == 0
    result = run_replay(trace=sim, config=path, mechanisms=True, out_dir=tmp_path / "replay")
    assert result.mechanisms is not None and len(result.mechanisms.table) == 7
    assert (tmp_path / "replay" / "mechanisms.csv").exists()


def test_mechanisms_is_refused_where_it_does_nothing(tmp_path):
    result = invoke("run", "--mode", "live", "--config", "live_cpu", "--mechanisms")
    assert result.exit_code == 2 and "--mechanisms does nothing with --mode live" in result.output
