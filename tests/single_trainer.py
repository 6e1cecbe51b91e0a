"""One trainer rank on the CPU holding a live config's model at its initial weights, as
`initial_shard` loads them: the trainer tests' starting point."""

from __future__ import annotations

import torch

from dynaresize.executor.config import LiveConfig
from dynaresize.executor.rl.model import build_model, count_parameters
from dynaresize.executor.worker.shards import ShardLayout
from dynaresize.executor.worker.trainer import TrainerRole


def single_rank_trainer(live: LiveConfig, *, optimizer_step: int = 0) -> TrainerRole:
    """A rank-0 trainer of a one-rank group; its moments are not loaded yet."""
    model = build_model(live.model).requires_grad_(True)
    trainer = TrainerRole(
        worker_id=0,
        model=model,
        device=torch.device("cpu"),
        settings=live.optimizer,
        objective=live.objective,
        micro_batch_samples=live.micro_batch_samples,
    )
    trainer.bind(group=None, rank=0, layout=ShardLayout(numel=count_parameters(model), num_ranks=1))
    flat = torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])
    trainer.load_weights(flat, optimizer_step=optimizer_step)
    return trainer
