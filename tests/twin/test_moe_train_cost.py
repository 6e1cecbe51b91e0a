"""A mixture of experts computes with its active parameters and stores all of them; a dense
model's costs are what they were."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from dynaresize.twin.costs.memory import ModelConfig, train_gb_per_gpu
from dynaresize.twin.costs.train import TrainCostParams, optimizer_step_s, train_stage_s

TOKENS = np.array([1.0e6, 3.0e6])
PARAMS = TrainCostParams(fixed_overhead_s=2.0, allreduce_s_per_gb=0.01)


def _compute_s(model: ModelConfig, gpus: int) -> np.ndarray:
    """The token-proportional part: the stage minus the same stage with no tokens."""
    return train_stage_s(TOKENS, train_gpus=gpus, model=model, params=PARAMS) - train_stage_s(
        0.0, train_gpus=gpus, model=model, params=PARAMS
    )


def test_a_dense_model_stated_as_all_active_costs_exactly_what_it_did():
    dense = ModelConfig(num_params_b=8.2)
    stated = ModelConfig(num_params_b=8.2, num_active_params_b=8.2)
    for gpus in (1, 4, 6):
        a = train_stage_s(TOKENS, train_gpus=gpus, model=dense, params=PARAMS)
        b = train_stage_s(TOKENS, train_gpus=gpus, model=stated, params=PARAMS)
        assert np.array_equal(a, b)


@pytest.mark.parametrize("gpus", [8, 16])
def test_moe_compute_is_the_active_share_and_the_rest_follows_all_parameters(gpus):
    dense = ModelConfig(num_params_b=35)
    moe = ModelConfig(num_params_b=35, num_active_params_b=3)
    np.testing.assert_allclose(_compute_s(moe, gpus), _compute_s(dense, gpus) * 3 / 35)
    # optimizer step, gradients and memory: the 35B the model stores
    assert optimizer_step_s(train_gpus=gpus, model=moe, params=PARAMS) == optimizer_step_s(
        train_gpus=gpus, model=dense, params=PARAMS
    )
    assert moe.optimizer_state_gb == dense.optimizer_state_gb == pytest.approx(35 * 12)
    assert train_gb_per_gpu(moe, train_gpus=gpus) == train_gb_per_gpu(dense, train_gpus=gpus)
    no_tokens = train_stage_s(0.0, train_gpus=gpus, model=moe, params=PARAMS)
    assert no_tokens == train_stage_s(0.0, train_gpus=gpus, model=dense, params=PARAMS)


def test_more_active_than_total_parameters_is_refused_naming_both():
    with pytest.raises(ValidationError, match="num_active_params_b 40 exceeds num_params_b 35"):
        ModelConfig(num_params_b=35, num_active_params_b=40)


def test_the_train_fit_reads_a_moe_trace_back_to_the_dense_equivalent_rate():
    """Fitted on an MoE's step times, s_per_token_one_gpu is the dense-equivalent figure the
    model multiplies by the active share, so fit and model agree."""
    from dynaresize.twin.calibration.fit_train import _fit_train_one_allocation

    moe = ModelConfig(num_params_b=35, num_active_params_b=3)
    truth = PARAMS.model_copy(update={"s_per_token_one_gpu": 1.2e-3})
    tokens = np.linspace(1e6, 4e6, 12)
    measured = train_stage_s(tokens, train_gpus=8, model=moe, params=truth)
    fitted = _fit_train_one_allocation(tokens, 8, measured, PARAMS, moe)
    assert fitted.s_per_token_one_gpu == pytest.approx(1.2e-3, rel=1e-6)
