"""The trainer step as it ran before the step moved onto the device, kept as the reference the
device trainer is compared with: one rank, every micro-batch padded to its longest row in the
samples' order, an extra no-grad forward for the old log-probabilities, the GRPO loss of the RL
core (`rl.grpo.compute_loss`), the fp32 gradient gathered on the host, torch's default AdamW on
a host master vector, and the weights copied back."""

from __future__ import annotations

import torch

from dynaresize.executor.batch import RolloutSample
from dynaresize.executor.rl.model import load_flat_parameters
from dynaresize.executor.rl.settings import ObjectiveSettings, OptimizerSettings
from dynaresize.executor.worker.objective import microbatch_loss_and_gap


class HostReferenceTrainer:
    """Whole-model AdamW on the host, one rank, the pre-device trainer's arithmetic."""

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        settings: OptimizerSettings,
        objective: ObjectiveSettings,
        micro_batch_samples: int,
    ) -> None:
        self.model, self.settings, self.objective = model, settings, objective
        self.micro_batch_samples = micro_batch_samples
        flat = torch.cat([p.detach().reshape(-1).float().cpu() for p in model.parameters()])
        self.master = torch.nn.Parameter(flat)
        s = settings
        self.optimizer = torch.optim.AdamW(
            [self.master], lr=s.lr, betas=s.betas, eps=s.eps, weight_decay=s.weight_decay
        )

    def train(self, samples: list[RolloutSample], *, num_batch_tokens: int) -> float:
        """One step; returns the gradient norm."""
        self.model.train()
        self.model.zero_grad(set_to_none=True)
        device = next(self.model.parameters()).device
        for first in range(0, len(samples), self.micro_batch_samples):
            micro = samples[first : first + self.micro_batch_samples]
            loss, _ = microbatch_loss_and_gap(
                self.model,
                micro,
                device=device,
                num_batch_tokens=num_batch_tokens,
                settings=self.objective,
            )
            loss.backward()
        grad = torch.cat(
            [
                (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).float().cpu()
                for p in self.model.parameters()
            ]
        )
        self.model.zero_grad(set_to_none=True)
        grad_norm = float(grad.norm())
        if self.settings.grad_clip_norm is not None:
            grad.mul_(min(1.0, self.settings.grad_clip_norm / (grad_norm + 1e-6)))
        self.master.grad = grad
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        load_flat_parameters(self.model, self.master.detach().to(device))
        self.model.eval()
        return grad_norm

    def state(self) -> dict[str, torch.Tensor]:
        """Master weights and both moments as whole host vectors."""
        moments = self.optimizer.state[self.master]
        return {
            "master": self.master.detach().clone(),
            "exp_avg": moments["exp_avg"].detach().clone(),
            "exp_avg_sq": moments["exp_avg_sq"].detach().clone(),
        }
