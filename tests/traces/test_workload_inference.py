"""Synthesizing the lengths of steps without sample records, many steps at a time, gives exactly
what the one-step definition (`lognormal_lengths`) gives, step by step."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaresize.traces.workload_inference import infer_workload, lognormal_lengths


def _reference(steps: pd.DataFrame, samples: pd.DataFrame) -> tuple[list, list]:
    """The definition, one step at a time: recorded lengths where there are samples, else the
    lognormal quantiles and the prompt share of the remaining tokens."""
    prompts, responses = [], []
    for row in steps.itertuples(index=False):
        mine = samples[samples["step"] == row.step].sort_values("sample_index")
        if len(mine):
            prompts.append(mine["prompt_tokens"].to_numpy(np.int64))
            responses.append(mine["response_tokens"].to_numpy(np.int64))
            continue
        n = int(row.num_samples)
        resp = lognormal_lengths(
            num_samples=n, mean=float(row.response_len_mean), longest=float(row.response_len_max)
        )
        each = max(0, round((int(row.tokens) - int(resp.sum())) / n)) if n else 0
        prompts.append(np.full(n, each, np.int64))
        responses.append(resp)
    return prompts, responses


@st.composite
def tables(draw):
    num_steps = draw(st.integers(1, 12))
    counts = draw(
        st.lists(st.sampled_from([0, 1, 2, 7, 32]), min_size=num_steps, max_size=num_steps)
    )
    means = draw(
        st.lists(
            st.sampled_from([0.0, 1.0, 17.5, 600.25, 4000.0]),
            min_size=num_steps,
            max_size=num_steps,
        )
    )
    spread = draw(
        st.lists(st.sampled_from([0.5, 1.0, 2.0, 30.0]), min_size=num_steps, max_size=num_steps)
    )
    tokens = draw(st.lists(st.integers(0, 10**6), min_size=num_steps, max_size=num_steps))
    steps = pd.DataFrame(
        {
            "step": np.arange(num_steps) + 5,
            "num_samples": counts,
            "response_len_mean": means,
            "response_len_max": np.array(means) * np.array(spread),
            "tokens": tokens,
        }
    )
    recorded = draw(st.lists(st.booleans(), min_size=num_steps, max_size=num_steps))
    rows = []
    for k, (step, n, keep) in enumerate(zip(steps["step"], counts, recorded, strict=True)):
        for i in range(n if keep else 0):
            rows.append(
                {
                    "step": step,
                    "sample_index": n - 1 - i,
                    "prompt_tokens": 3 + k,
                    "response_tokens": 10 * i + k,
                }
            )
    samples = pd.DataFrame(
        rows, columns=["step", "sample_index", "prompt_tokens", "response_tokens"]
    )
    return steps, samples


@settings(max_examples=60, deadline=None)
@given(table=tables())
def test_many_steps_at_once_equal_the_step_by_step_definition(table):
    steps, samples = table
    workload = infer_workload(steps, samples, name="t").workload
    prompts, responses = _reference(steps, samples)
    assert workload.num_steps == len(steps)
    for k in range(len(steps)):
        got_prompts, got_responses = workload.step(k)
        np.testing.assert_array_equal(got_prompts, prompts[k])
        np.testing.assert_array_equal(got_responses, responses[k])
