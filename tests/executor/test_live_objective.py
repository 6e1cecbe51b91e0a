"""The trainer's GRPO loss: any split of a batch over ranks and micro-batches gives the whole
batch's gradient (up to the order of floating-point additions), and advantages are per group."""

from __future__ import annotations

import itertools

import pytest
import torch

from dynaresize.executor.batch import RolloutSample
from dynaresize.executor.rl.model import build_model
from dynaresize.executor.rl.model_spec import ModelSpec
from dynaresize.executor.rl.settings import ObjectiveSettings
from dynaresize.executor.worker.objective import group_advantages, microbatch_loss

SETTINGS = ObjectiveSettings()


def _samples(seed: int) -> list[RolloutSample]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for prompt in range(3):
        for index in range(4):
            length = int(torch.randint(1, 12, (1,), generator=gen))
            response = tuple(torch.randint(3, 20, (length,), generator=gen).tolist())
            reward = float(torch.rand(1, generator=gen))
            out.append(
                RolloutSample(0, prompt, index, (1, 5, 6), response, reward, False, 0.0, 0, 0)
            )
    return group_advantages(out, settings=SETTINGS)


def _gradient(model, parts, num_tokens) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    for part in parts:
        loss = microbatch_loss(
            model, part, device=torch.device("cpu"), num_batch_tokens=num_tokens, settings=SETTINGS
        )
        loss.backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


@pytest.mark.parametrize("cuts", [(5,), (1, 7), (3, 6, 9), (11,)])
def test_any_split_of_the_batch_adds_up_to_the_whole_batch_gradient(cuts) -> None:
    torch.manual_seed(0)
    model = build_model(ModelSpec()).train()
    samples = _samples(1)
    num_tokens = sum(len(s.response_token_ids) for s in samples)
    whole = _gradient(model, [samples], num_tokens)
    bounds = [0, *cuts, len(samples)]
    parts = [samples[a:b] for a, b in itertools.pairwise(bounds)]
    split = _gradient(model, parts, num_tokens)
    assert whole.abs().max() > 1e-3  # a real gradient
    torch.testing.assert_close(split, whole, rtol=1e-5, atol=1e-7)


def test_advantages_are_centred_and_scaled_within_each_prompt_group() -> None:
    samples = _samples(2)
    for prompt in range(3):
        group = [s for s in samples if s.prompt_id == prompt]
        rewards = torch.tensor([s.reward for s in group], dtype=torch.float64)
        want = (rewards - rewards.mean()) / (rewards.std() + SETTINGS.advantage_eps)
        ordered = sorted(group, key=lambda s: s.sample_index)
        got = torch.tensor([s.advantage for s in ordered], dtype=torch.float64)
        torch.testing.assert_close(got, want)
    assert [s.key for s in samples] == sorted(s.key for s in samples)
