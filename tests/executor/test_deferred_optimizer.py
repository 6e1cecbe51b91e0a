"""Deferred optimizer reload: the first update waits for the migrated state and uses exactly it."""

from __future__ import annotations

import threading

import pytest
import torch

from dynaresize.executor.worker.deferred_optimizer import DeferredLoadError, DeferredOptimizerState

LR, BETAS, EPS = 1e-2, (0.9, 0.999), 1e-8


def _param_and_grad(seed: int) -> tuple[torch.nn.Parameter, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    param = torch.nn.Parameter(torch.randn(257, generator=gen))
    grad = torch.randn(257, generator=gen)
    return param, grad


def _migrated_state(seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "exp_avg": torch.randn(257, generator=gen),
        "exp_avg_sq": torch.rand(257, generator=gen) + 0.5,
        "step": torch.tensor(5.0),
    }


def _closed_form_adamw(param, grad, state) -> torch.Tensor:
    """AdamW (no weight decay) from the given moments, written out."""
    step = float(state["step"]) + 1
    exp_avg = BETAS[0] * state["exp_avg"] + (1 - BETAS[0]) * grad
    exp_avg_sq = BETAS[1] * state["exp_avg_sq"] + (1 - BETAS[1]) * grad * grad
    bias1, bias2 = 1 - BETAS[0] ** step, 1 - BETAS[1] ** step
    denom = (exp_avg_sq / bias2).sqrt() + EPS
    return param.detach() - LR * (exp_avg / bias1) / denom


def test_first_update_blocks_until_the_migrated_state_arrives_and_uses_it() -> None:
    param, grad = _param_and_grad(0)
    migrated = _migrated_state(1)
    expected = _closed_form_adamw(param, grad, migrated)
    optimizer = torch.optim.AdamW([param], lr=LR, betas=BETAS, eps=EPS, weight_decay=0.0)
    gate = threading.Event()
    order: list[str] = []

    def load():
        gate.wait(30)  # the transfer is still in flight until the test lets it finish
        order.append("loaded")
        return {param: {k: v.clone() for k, v in migrated.items()}}

    deferred = DeferredOptimizerState(optimizer, load, name="moments of shard 0")

    def release_when_the_step_waits() -> None:
        assert deferred.waiting.wait(30)
        order.append("step waiting")
        gate.set()

    releaser = threading.Thread(target=release_when_the_step_waits)
    releaser.start()
    assert not deferred.done
    param.grad = grad.clone()
    optimizer.step()
    order.append("updated")
    releaser.join()
    assert order == ["step waiting", "loaded", "updated"]
    assert deferred.installed and deferred.waited_s > 0
    torch.testing.assert_close(param.detach(), expected, rtol=1e-6, atol=1e-7)
    # The same update from fresh (zero) moments lands elsewhere: the check can tell them apart.
    fresh = _closed_form_adamw(
        param, grad, {"exp_avg": torch.zeros(257), "exp_avg_sq": torch.zeros(257), "step": 0.0}
    )
    assert not torch.allclose(param.detach(), fresh)
    assert float(optimizer.state[param]["step"]) == 6.0


def test_later_steps_do_not_wait_again() -> None:
    param, grad = _param_and_grad(2)
    optimizer = torch.optim.AdamW([param], lr=LR, betas=BETAS, eps=EPS, weight_decay=0.0)
    deferred = DeferredOptimizerState(optimizer, lambda: {param: _migrated_state(3)})
    for _ in range(3):
        param.grad = grad.clone()
        optimizer.step()
    assert float(optimizer.state[param]["step"]) == 8.0
    assert deferred.wait_and_install() == 0.0


def test_a_failed_load_stops_the_update() -> None:
    param, grad = _param_and_grad(4)
    before = param.detach().clone()
    optimizer = torch.optim.AdamW([param], lr=LR)

    def load():
        raise OSError("peer worker 3 vanished")

    DeferredOptimizerState(optimizer, load, name="moments of shard 1")
    param.grad = grad
    with pytest.raises(DeferredLoadError, match=r"moments of shard 1.*peer worker 3 vanished"):
        optimizer.step()
    assert torch.equal(param.detach(), before)


def test_state_for_a_foreign_parameter_is_refused() -> None:
    param, grad = _param_and_grad(5)
    stranger = torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.AdamW([param], lr=LR)
    DeferredOptimizerState(optimizer, lambda: {stranger: {"step": torch.tensor(1.0)}})
    param.grad = grad
    with pytest.raises(DeferredLoadError, match="not optimized"):
        optimizer.step()
