"""GRPO: advantages and the clipped loss against hand arithmetic; micro-batch invariance."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from dynaresize.executor.rl.grpo import (  # noqa: E402
    TrainBatch,
    clipped_policy_loss_terms,
    compute_loss,
    group_advantages,
    kl_k3,
    token_logprobs,
)
from dynaresize.executor.rl.model import build_model  # noqa: E402
from dynaresize.executor.rl.model_spec import ModelSpec  # noqa: E402
from dynaresize.executor.rl.settings import ObjectiveSettings  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_group_advantages_by_hand():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5], [0.0, 0.0, 0.0, 3.0]])
    adv = group_advantages(rewards, eps=1e-12)
    # group 1: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = sqrt(1/3)
    half_root3 = 0.5 * math.sqrt(3)
    assert adv[0].tolist() == pytest.approx([half_root3, -half_root3, -half_root3, half_root3])
    assert adv[1].tolist() == [0.0] * 4  # no signal in a group of equal rewards
    # group 3: mean 0.75, std sqrt((3 * 0.75**2 + 2.25**2) / 3) = 1.5
    assert adv[2].tolist() == pytest.approx([-0.5, -0.5, -0.5, 1.5])
    centred = group_advantages(rewards, normalize_std=False)
    assert centred[2].tolist() == pytest.approx([-0.75, -0.75, -0.75, 2.25])
    with pytest.raises(ValueError, match="num_prompts"):
        group_advantages(rewards.reshape(-1))


def test_clipped_loss_by_hand():
    ratios = torch.tensor([[1.5, 1.5, 0.5, 0.5, 1.1]])
    logprobs = torch.log(ratios)
    old = torch.zeros_like(logprobs)
    advantage = torch.tensor([1.0])
    loss, clipped = clipped_policy_loss_terms(
        logprobs, old, advantage, clip_eps_low=0.2, clip_eps_high=0.2
    )
    # A > 0: -min(r A, clip(r) A): r = 1.5 -> -1.2 (clipped); r = 0.5 -> -0.5; r = 1.1 -> -1.1
    assert loss[0, [0, 2, 4]].tolist() == pytest.approx([-1.2, -0.5, -1.1])
    assert clipped[0, [0, 2, 4]].tolist() == [1.0, 0.0, 0.0]
    loss, clipped = clipped_policy_loss_terms(
        logprobs, old, -advantage, clip_eps_low=0.2, clip_eps_high=0.3
    )
    # A < 0: r = 1.5 -> -min(-1.5, -1.3) = 1.5; r = 0.5 -> -min(-0.5, -0.8) = 0.8 (clipped)
    assert loss[0, [0, 2]].tolist() == pytest.approx([1.5, 0.8])
    assert clipped[0, [0, 2]].tolist() == [0.0, 1.0]


def test_kl_k3_by_hand():
    logprobs = torch.tensor([-1.0, -2.0])
    ref = torch.tensor([-1.0, -1.0])
    # exp(d) - d - 1 with d = ref - logp: 0 and e - 2
    assert kl_k3(logprobs, ref).tolist() == pytest.approx([0.0, math.e - 2.0])


@pytest.fixture(scope="module")
def model():
    return build_model(ModelSpec(init_seed=5))


def make_batch(model) -> TrainBatch:
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, 23, (6, 12), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 9:] = 0
    attention_mask[4, 7:] = 0
    response_mask = torch.zeros(6, 12)
    response_mask[:, 5:] = 1.0
    response_mask *= attention_mask
    batch = TrainBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        response_mask=response_mask,
        advantages=torch.tensor([1.0, -0.5, 0.3, -1.2, 0.7, -0.1]),
    )
    with torch.no_grad():
        batch.old_logprobs = (token_logprobs(model, batch) - 0.05) * response_mask
        batch.ref_logprobs = (token_logprobs(model, batch) + 0.02) * response_mask
    return batch


def grads(model) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def test_loss_matches_hand_formula(model):
    batch = make_batch(model)
    objective = ObjectiveSettings(clip_eps_low=0.02, clip_eps_high=0.02)
    out = compute_loss(model, batch, objective, kl_coef=0.1)
    with torch.no_grad():
        logp = token_logprobs(model, batch)
        ratio = torch.exp(logp - batch.old_logprobs)
        adv = batch.advantages[:, None]
        policy = -torch.minimum(ratio * adv, ratio.clamp(0.98, 1.02) * adv)
        d = batch.ref_logprobs - logp
        kl = torch.exp(d) - d - 1
        mask = batch.response_mask
        expected = ((policy + 0.1 * kl) * mask).sum() / mask.sum()
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert 0 < out.clip_fraction < 1  # ratios near exp(0.05) straddle the 2% clip
    assert out.num_tokens == int(batch.response_mask.sum())


def test_micro_batches_sum_to_the_full_batch_gradient(model):
    batch = make_batch(model)
    objective = ObjectiveSettings()
    model.zero_grad()
    compute_loss(model, batch, objective).loss.backward()
    full = grads(model).clone()
    model.zero_grad()
    total = batch.num_response_tokens
    for rows in (slice(0, 2), slice(2, 3), slice(3, 6)):
        compute_loss(model, batch.select(rows), objective, num_tokens_total=total).loss.backward()
    assert torch.allclose(grads(model), full, atol=1e-6, rtol=1e-4)
    model.zero_grad()


def test_missing_inputs_are_named(model):
    batch = make_batch(model)
    batch.old_logprobs = None
    with pytest.raises(ValueError, match="old_logprobs"):
        compute_loss(model, batch, ObjectiveSettings())
    batch = make_batch(model)
    batch.ref_logprobs = None
    with pytest.raises(ValueError, match="ref_logprobs"):
        compute_loss(model, batch, ObjectiveSettings(), kl_coef=0.1)
