"""Synthetic rollout samples for trainer tests: rows of different lengths, group advantages,
engine log-probs on some, drawn from a seed."""

from __future__ import annotations

import random

from dynaresize.executor.batch import RolloutSample


def synthetic_batch(
    seed: int, *, num_samples: int = 12, vocab: int = 23, max_response: int = 24
) -> list[RolloutSample]:
    rng = random.Random(seed)
    samples = []
    for i in range(num_samples):
        prompt = tuple(rng.randrange(3, vocab) for _ in range(rng.randint(3, 8)))
        response = tuple(rng.randrange(3, vocab) for _ in range(rng.randint(1, max_response)))
        reported = tuple(-rng.uniform(0.5, 6.0) for _ in response) if i % 3 == 0 else None
        samples.append(
            RolloutSample(
                batch_id=seed,
                prompt_id=i // 4,
                sample_index=i % 4,
                prompt_token_ids=prompt,
                response_token_ids=response,
                reward=rng.random(),
                hit_length_cap=False,
                finish_s=0.0,
                generated_by_device=0,
                weights_version=0,
                advantage=rng.gauss(0.0, 1.0),
                engine_logprobs=reported,
            )
        )
    return samples
