"""Any input, every command: exit 0 with valid outputs, or exit 2 with one `error:` line and
nothing written.

Hypothesis mutates the fields of a small config (sim, sweep) and the records of a small recorded
run (replay, calibrate, breakeven, validate) with hostile values: zero, negative, huge and tiny
numbers, NaN and infinity, integers beyond any float, wrong types, text, bytes that are not
UTF-8, lines cut, dropped or repeated. Each command runs in this process (typer's CliRunner),
and the examples are drawn the same way on every run (derandomized) so that CI stays fast and
reproducible; DYNARESIZE_FUZZ_EXAMPLES=N runs N random examples per command instead.
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import traceback
import warnings
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dynaresize.cli import app
from dynaresize.commands.cost_file import written_by_calibrate
from dynaresize.config import BUILTIN_CONFIG_DIR
from dynaresize.traces.io import read_trace, write_trace

LIVE_RUN = BUILTIN_CONFIG_DIR.parent / "data" / "live_cpu_short_tail"
_DEEP = int(os.environ.get("DYNARESIZE_FUZZ_EXAMPLES", "0"))


def fuzz_settings(examples: int):
    return settings(
        max_examples=_DEEP or examples,
        deadline=None,
        derandomize=not _DEEP,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.function_scoped_fixture,
            HealthCheck.data_too_large,
        ],
    )


# --- what a command may answer ----------------------------------------------------------------


def _strict_json(path: Path) -> object:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{path} holds {constant}, which is not JSON")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def _hidden_leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and p.is_dir())


def check_outcome(result, *, out: Path | None, work: Path, valid) -> None:
    """The promise: exit 0 and `valid()` holds, or exit 2, one error line and no `out`; never a
    traceback, never a RuntimeWarning, never a staging folder left behind."""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        trace = "".join(traceback.format_exception(*result.exc_info))
        pytest.fail(f"uncaught {type(result.exception).__name__}:\n{trace}\n{result.output}")
    if result.exit_code == 0:
        valid()
    else:
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), result.output
        if out is not None:
            assert not out.exists(), f"{out} written although the command failed"
    assert _hidden_leftovers(work) == []


def invoke(*args) -> object:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CliRunner().invoke(app, [str(a) for a in args])
    runtime = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert not runtime, f"RuntimeWarning: {runtime[0].message} ({runtime[0].filename})"
    return result


# --- hostile values ---------------------------------------------------------------------------

NUMBERS = st.sampled_from(
    [0, -1, 1, 2, 3, 0.5, -0.0, 1e-300, 5e-324, 1e308, 10**13, 10**400, 2**63, 1.5]
)
NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
ODD = st.sampled_from(["", "x", "6:2", "0:8", "8:0", "Ω\u202e", "1e3", None, True, [], {}, [1]])
VALUES = st.one_of(NUMBERS, NUMBERS, NON_FINITE, ODD)


def _quick_config() -> dict:
    data = yaml.safe_load((BUILTIN_CONFIG_DIR / "example.yaml").read_text())
    data["simulation"].update(num_steps=6)
    data["workload"]["samples_per_step"] = 16
    data["workload"]["regime_switches"] = [{"at_step": 3, "length_scale": 5.0}]
    data["output"] = {"timeline_svg": True}
    return data


PLAUSIBLE = {
    ("cluster", "gpus_per_node"): [4, 16],
    ("cluster", "num_nodes"): [2],
    ("cluster", "intra_node_bandwidth_gbps"): [1e-6, 1e12, 0.001],
    ("cluster", "gpu_memory_gb"): [1e12, 40],
    ("cluster", "candidate_allocations"): [["6:2"], ["6:2", "2:6"], ["7:1", "6:2", "1:7"]],
    ("cluster", "initial_allocation"): ["4:4", "3:5"],
    ("cluster", "rollout_tensor_parallel_size"): [2],
    ("model", "num_params_b"): [1e-9, 0.5, 70],
    ("workload", "samples_per_step"): [1, 3],
    ("workload", "max_response_tokens"): [1, 10_000_000],
    ("workload", "prompt_median_tokens"): [1, 9_999_999],
    ("workload", "regime_switches"): [[], [{"at_step": 0, "length_scale": 1e-9}]],
    ("costs", "train", "s_per_token_one_gpu"): [0, 1e12, 1e-15],
    ("costs", "sync", "link_efficiency"): [1e-6, 1],
    ("costs", "rollout", "decode_s_per_active_seq"): [0, 1e12],
    ("costs", "rollout", "kv_capacity_tokens_per_replica"): [1, 100, None],
    ("pipeline", "mode"): ["sync", "async", "one_step_off", "colocated"],
    ("pipeline", "max_staleness_steps"): [0, 5],
    ("simulation", "num_steps"): [1, 2],
    ("simulation", "seed"): [0, 2**31],
    ("simulation", "baseline_allocation"): ["4:4", None],
    ("policies",): [[], [{"kind": k} for k in ("static", "greedy", "payback", "hpa")]],
    ("policies", 0, "kind"): ["static", "greedy", "payback", "hpa", "scheduled", "verl_drc"],
    ("policies", 0, "cooldown_steps"): [0, 100],
    ("name",): ["a b/c", "ü"],
    ("unknown_field",): [1],
}
"""Per field: values a user may well write (valid or nearly), beside the hostile ones."""

CONFIG_PATHS = list(PLAUSIBLE)


@st.composite
def config_change(draw):
    path = draw(st.sampled_from(CONFIG_PATHS))
    value = draw(st.one_of(st.sampled_from(PLAUSIBLE[path]), VALUES))
    return path, value


def _set(data, path, value) -> None:
    """Set `path` to `value`, unless an earlier change made the path impossible to follow."""
    node = data
    try:
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    except (KeyError, IndexError, TypeError):
        pass


mutations = st.lists(config_change(), min_size=1, max_size=2)


def _write_config(folder: Path, changes) -> Path:
    data = _quick_config()
    for path, value in changes:
        _set(data, path, copy.deepcopy(value))
    path = folder / "config.yaml"
    # NaN and infinity as YAML writes them; integers of any size as text.
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path


@pytest.fixture
def work(tmp_path_factory):
    """A fresh folder per example (hypothesis reuses one pytest tmp_path across examples)."""

    def fresh() -> Path:
        return tmp_path_factory.mktemp("fuzz")

    return fresh


RAW_FILES = st.sampled_from(
    [
        b"",
        b"[]",
        b"\xff\xfe c\x00l\x00",
        "cluster: {gpus_per_node: 8}".encode("utf-16"),
        b"a: &x {b: 1}\nc: *x\n",
        b"k: 1\nk: 2\n",
        b"[" * 5000,
        b"x: " + b"{y: " * 200 + b"1" + b"}" * 200,
        b"\x00\x01\x02",
        b"train: {s_per_token_one_gpu: .nan}\n",
        b"resize: {overlapped: {phases: {}}}\n",
    ]
)
COST_CHANGES = st.tuples(
    st.sampled_from(
        [
            ("train", "s_per_token_one_gpu"),
            ("sync", "link_efficiency"),
            ("sync", "latency_s"),
            ("rollout", "decode_base_s_per_iter"),
            ("rollout", "kv_capacity_tokens_per_replica"),
            ("resize", "reference_host_bandwidth_gbps"),
            ("cost_source",),
            ("nonsense",),
        ]
    ),
    st.one_of(st.sampled_from([0, 1e-15, 1e12, "model", "calibrated"]), VALUES),
)


def _write_costs(folder: Path, change) -> Path:
    data: dict = {}
    path, value = change
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    costs = folder / "costs.yaml"
    costs.write_text(yaml.safe_dump(data, allow_unicode=True))
    return costs


@fuzz_settings(examples=60)
@given(
    changes=mutations,
    raw=st.one_of(st.none(), st.none(), st.none(), RAW_FILES),
    costs=st.one_of(st.none(), COST_CHANGES, RAW_FILES),
)
def test_sim_on_any_config(work, changes, raw, costs):
    folder = work()
    config = _write_config(folder, changes)
    if raw is not None:
        config.write_bytes(raw)
    extra = []
    if isinstance(costs, bytes):
        (folder / "costs.yaml").write_bytes(costs)
        extra = ["--costs", folder / "costs.yaml"]
    elif costs is not None:
        extra = ["--costs", _write_costs(folder, costs)]
    out = folder / "out"
    result = invoke("run", "--mode", "sim", "--config", config, *extra, "--out", out)

    def valid():
        summary = _strict_json(out / "summary.json")
        assert summary["policies"]
        steps = pd.read_parquet(out / "steps.parquet")
        assert len(steps) and steps["step_s"].notna().all()
        assert (out / "timeline.svg").read_text().startswith("<svg")

    check_outcome(result, out=out, work=folder, valid=valid)


SWEEP_PARAMS = st.sampled_from(
    [
        "policy.cooldown_steps=0,2",
        "policy.cooldown_steps=-1",
        "simulation.num_steps=0",
        "simulation.num_steps=1000000000000",
        "cluster.gpu_memory_gb=1e308",
        "cluster.intra_node_bandwidth_gbps=5e-324",
        "simulation.seed=a,b",
        "nope.field=1",
        "policy.up_threshold=nan",
        "=",
        "simulation.seed=0..3",
    ]
)


@fuzz_settings(examples=15)
@given(changes=st.lists(config_change(), max_size=1), param=SWEEP_PARAMS)
def test_sweep_on_any_config_and_parameter(work, changes, param):
    folder = work()
    config = _write_config(folder, changes)
    out = folder / "sweep"
    result = invoke(
        "sweep", "--config", config, "--param", param, "--out", out, "--jobs", "1", "--no-progress"
    )

    def valid():
        table = pd.read_parquet(out / "results.parquet")
        assert len(table) and table["total_time_s"].gt(0).all()
        _strict_json(out / "sweep.json")

    check_outcome(result, out=out, work=folder, valid=valid)


# --- traces -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The shipped live CPU run as JSONL lines, its scenario, and calibrate's costs of it."""
    folder = tmp_path_factory.mktemp("recorded")
    write_trace(folder / "run.jsonl", read_trace(LIVE_RUN / "trace"))
    scenario = folder / "scenario.yaml"
    shutil.copy(LIVE_RUN / "scenario.yaml", scenario)
    costs = folder / "costs.yaml"
    result = invoke(
        "calibrate", "--trace", folder / "run.jsonl", "--config", scenario, "--out", costs
    )
    assert result.exit_code == 0, result.output
    return Recorded(((folder / "run.jsonl").read_bytes().splitlines(), scenario, costs))


class Recorded(tuple):
    """(JSONL lines, scenario path, costs path), shown short in a failing example."""

    def __repr__(self) -> str:
        return f"Recorded({len(self[0])} lines of {LIVE_RUN.name})"


def _token(value) -> bytes:
    """JSON text of a value, including what strict JSON has no word for."""
    if isinstance(value, float) and math.isnan(value):
        return b"NaN"
    if isinstance(value, float) and math.isinf(value):
        return b"Infinity" if value > 0 else b"-Infinity"
    return json.dumps(value).encode()


class Mutation(bytes):
    """A mutated trace file, shown in a failing example by what was done to it."""

    description = ""

    def __repr__(self) -> str:
        return f"Mutation({self.description})"


@st.composite
def mutated_trace(draw, lines: list[bytes]) -> Mutation:
    lines = list(lines)
    kind = draw(st.sampled_from(["field", "field", "field", "bytes", "line"]))
    at = draw(st.integers(0, len(lines) - 1))
    if kind == "field":
        record = json.loads(lines[at])
        key = draw(st.sampled_from(sorted(record)))
        value = draw(VALUES)
        tag = record.pop("record")
        prefix = b'{"record":' + json.dumps(tag).encode()
        record[key] = None  # placeholder, replaced by the raw token below
        body = (
            json.dumps(record)
            .encode()[1:-1]
            .replace(
                json.dumps(key).encode() + b": null",
                json.dumps(key).encode() + b":" + _token(value),
            )
        )
        lines[at] = prefix + b"," + body + b"}" if body else prefix + b"}"
        what = f"line {at + 1} ({tag}): {key} = {_token(value).decode()[:40]}"
    elif kind == "bytes":
        junk = draw(st.sampled_from([b"\xff\xfe", b"\x00", b"\xef\xbb\xbf", b"\\u0000"]))
        cut = draw(st.integers(0, len(lines[at])))
        lines[at] = lines[at][:cut] + junk + lines[at][cut:]
        what = f"line {at + 1}: {junk!r} inserted at byte {cut}"
    else:
        action = draw(st.sampled_from(["drop", "repeat", "cut", "swap", "empty"]))
        what = f"line {at + 1}: {action}"
        if action == "drop":
            del lines[at]
        elif action == "repeat":
            lines.insert(at, lines[at])
        elif action == "cut":
            lines[at] = lines[at][: len(lines[at]) // 2]
        elif action == "swap":
            other = draw(st.integers(0, len(lines) - 1))
            lines[at], lines[other] = lines[other], lines[at]
            what += f" with line {other + 1}"
        else:
            lines = []
    mutation = Mutation(b"\n".join(lines) + (b"\n" if lines else b""))
    mutation.description = what
    return mutation


def _trace_case(recorded, data, folder: Path) -> Path:
    lines, _, _ = recorded
    path = folder / "run.jsonl"
    path.write_bytes(data.draw(mutated_trace(lines)))
    return path


@fuzz_settings(examples=40)
@given(data=st.data())
def test_calibrate_on_any_trace(work, recorded, data):
    folder = work()
    trace = _trace_case(recorded, data, folder)
    out = folder / "costs.yaml"
    result = invoke("calibrate", "--trace", trace, "--config", recorded[1], "--out", out)

    def valid():
        assert written_by_calibrate(out)
        from dynaresize.twin.costs import load_costs

        load_costs(out)

    check_outcome(result, out=out, work=folder, valid=valid)


@fuzz_settings(examples=40)
@given(data=st.data())
def test_breakeven_on_any_trace(work, recorded, data):
    folder = work()
    trace = _trace_case(recorded, data, folder)
    result = invoke("breakeven", "--trace", trace, "--config", recorded[1])
    check_outcome(result, out=None, work=folder, valid=lambda: None)


@fuzz_settings(examples=30)
@given(data=st.data(), steps=st.sampled_from([None, 1, 5, 12, 13]))
def test_sim_on_any_trace(work, recorded, data, steps):
    folder = work()
    trace = _trace_case(recorded, data, folder)
    out = folder / "out"
    extra = [] if steps is None else ["--steps", steps]
    result = invoke(
        "run",
        "--config",
        recorded[1],
        "--trace",
        trace,
        *extra,
        "--policy",
        "greedy",
        "--out",
        out,
    )

    def valid():
        steps_table = pd.read_parquet(out / "steps.parquet")
        assert len(steps_table) == (steps or len(steps_table))
        _strict_json(out / "summary.json")

    check_outcome(result, out=out, work=folder, valid=valid)


@fuzz_settings(examples=12)
@given(data=st.data())
def test_replay_on_any_trace(work, recorded, data):
    folder = work()
    trace = _trace_case(recorded, data, folder)
    out = folder / "replay"
    result = invoke(
        "run", "--mode", "replay", "--trace", trace, "--config", recorded[1], "--out", out
    )

    def valid():
        payload = _strict_json(out / "replay.json")
        assert payload["table"]
        _strict_json(out / "trace.json")

    check_outcome(result, out=out, work=folder, valid=valid)


@fuzz_settings(examples=12)
@given(data=st.data())
def test_validate_on_any_trace(work, recorded, data):
    folder = work()
    trace = _trace_case(recorded, data, folder)
    out = folder / "validation"
    result = invoke(
        "validate", "--trace", trace, "--config", recorded[1], "--costs", recorded[2], "--out", out
    )

    def valid():
        figures = _strict_json(out / "validation.json")
        assert figures["num_steps"] >= 2

    check_outcome(result, out=out, work=folder, valid=valid)
