"""simulate()'s results, held to digests stored before the per-step path was made cheaper.

Every registered policy kind runs on scenarios that reach each pipeline path (KV-limited and
unlimited rollout, sync, one-step-off, async with partial rollouts, lending); the steps,
resizes and decisions frames and the summary must hash to what `digests/simulate.json` holds.
A change that alters any value, column or row order of any of them fails here. Regenerate the
file (`python tests/twin/test_simulate_digests.py`) only for a change meant to alter results.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from twin_scenarios import scenario

from dynaresize.policies.registry import policy_kinds
from dynaresize.twin.simulation import build_context, simulate

DIGESTS_PATH = Path(__file__).with_name("digests") / "simulate.json"

KV_LIMITED = {"costs": {"rollout": {"kv_capacity_tokens_per_replica": 200_000}}}
SCENARIOS: dict[str, dict[str, Any]] = {
    "sync_unlimited": {"pipeline": {"mode": "sync"}},
    "sync_kv_limited": {"pipeline": {"mode": "sync"}, **KV_LIMITED},
    "one_step_off": {"pipeline": {"mode": "one_step_off"}},
    "async_kv_limited": {"pipeline": {"mode": "async", "max_staleness_steps": 1}, **KV_LIMITED},
    "async_partial_rollout": {
        "pipeline": {"mode": "async", "max_staleness_steps": 1, "partial_rollout": True},
        "costs": {"rollout": {"max_num_seqs_per_replica": 4}},
    },
    "sync_lending": {
        "pipeline": {"mode": "sync", "lending": True},
        "costs": {"rollout": {"max_num_seqs_per_replica": 2}},
    },
}
POLICIES: dict[str, dict[str, Any]] = {
    kind: {"kind": kind} for kind in policy_kinds() if kind != "scheduled"
}
POLICIES["scheduled"] = {"kind": "scheduled", "schedule": "4@4:4;9@3:5;20@6:2"}


def _frame_digest(frame: pd.DataFrame | None) -> str:
    """Columns, row order and every value (floats at full precision, via repr)."""
    if frame is None:
        return "none"
    text = json.dumps(
        {
            "columns": list(frame.columns),
            "values": [[repr(v) for v in frame[c].tolist()] for c in frame.columns],
        }
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _summary_digest(summary: Any) -> str:
    data = summary.model_dump(mode="json") if hasattr(summary, "model_dump") else vars(summary)
    text = json.dumps(data, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def _digests(scenario_name: str) -> dict[str, dict[str, str]]:
    config = scenario(**SCENARIOS[scenario_name])
    context = build_context(config)
    out = {}
    for kind, policy in POLICIES.items():
        result = simulate(config, policy, context=context)
        out[kind] = {
            "steps": _frame_digest(result.steps),
            "resizes": _frame_digest(result.resizes),
            "decisions": _frame_digest(result.decisions),
            "samples": _frame_digest(result.samples),
            "summary": _summary_digest(result.summary),
        }
    return out


@pytest.mark.parametrize("scenario_name", list(SCENARIOS))
def test_simulate_results_match_the_stored_digests(scenario_name):
    stored = json.loads(DIGESTS_PATH.read_text())[scenario_name]
    assert _digests(scenario_name) == stored


def test_the_scenarios_resize():
    """The digests cover resizing runs, not only runs that hold."""
    for name in ("sync_kv_limited", "async_partial_rollout"):
        result = simulate(scenario(**SCENARIOS[name]), POLICIES["greedy"])
        assert len(result.resizes) > 0


if __name__ == "__main__":
    DIGESTS_PATH.parent.mkdir(exist_ok=True)
    all_digests = {name: _digests(name) for name in SCENARIOS}
    DIGESTS_PATH.write_text(json.dumps(all_digests, indent=1, sort_keys=True) + "\n")
