"""Training waits for a batch in flight, and may lend its GPUs meanwhile: the arithmetic.

When training is free and its batch is not yet generated, it waits. With a lend (the policy's
`LendAction`) the trainers' replicas are activated (`activate` phase), join the batch's
replicas (the requests not yet started move to them; with a rebalance also those in flight),
serve until `until_ready_fraction` of the batch is out, and are deactivated (`deactivate`
phase: their requests in flight resume on the Rollout GPUs' replicas, tokens kept with partial
rollout) before training may start. Rollout on the Rollout GPUs goes on throughout.

Nothing else touches a batch while training waits for it, so the whole lend is worked out at
once, applying its replans at their future instants; the pipeline then sleeps through the
phases. `lend_outcome(..., apply=False)` works on a copy: what a clairvoyant gate compares.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from .batch_in_flight import BatchInFlight
from .costs.lend import LendPlan


@dataclass(frozen=True)
class WaitOutcome:
    """How one wait of training went."""

    free_s: float
    """When training was free and began to wait."""
    ready_s: float
    """When training could start: the batch out, and the lent GPUs back."""
    wait_s: float
    """Seconds training waited on the Rollout GPUs alone (after any lend)."""
    waited_fraction: float
    """Share of the batch not yet out when that wait began."""
    lent: bool = False
    activate_end_s: float = 0.0
    serve_end_s: float = 0.0
    """When the lent replicas stopped serving (deactivation began)."""


def plain_wait(batch: BatchInFlight, free_s: float) -> WaitOutcome:
    """Training waits without lending."""
    ready_s = max(free_s, batch.end_s)
    waited = 1.0 - batch.ready_fraction(free_s) if ready_s > free_s else 0.0
    return WaitOutcome(free_s, ready_s, ready_s - free_s, waited)


def lend_outcome(
    batch: BatchInFlight,
    free_s: float,
    *,
    lent_replicas: list[int],
    until: float,
    plan: LendPlan,
    rebalance: bool,
    apply: bool = True,
) -> WaitOutcome:
    """Training lends its replicas from `free_s` until `until` of the batch is out."""
    target = batch if apply else copy.deepcopy(batch)
    home = target.replicas
    activate_end = free_s + plan.activate_s
    serve_end = activate_end
    if target.end_s > activate_end and target.ready_fraction(activate_end) < until:
        target.replan(activate_end, replicas=home + lent_replicas, abort=home if rebalance else ())
        serve_end = max(activate_end, target.ready_time(until))
        if target.end_s > serve_end:
            target.replan(serve_end, replicas=home)
    back = serve_end + plan.deactivate_s
    ready_s = max(back, target.end_s)
    waited = 1.0 - target.ready_fraction(back) if ready_s > back else 0.0
    return WaitOutcome(free_s, ready_s, ready_s - back, waited, True, activate_end, serve_end)


CLAIRVOYANT_THRESHOLDS = tuple(round(0.3 + 0.05 * i, 2) for i in range(15))
"""Deactivation thresholds a clairvoyant gate chooses among."""


def clairvoyant_lend(
    batch: BatchInFlight,
    free_s: float,
    *,
    lent_replicas: list[int],
    plan: LendPlan,
    rebalance: bool,
) -> float | None:
    """The deactivation threshold at which lending lets training start earliest, or None when
    not lending is as early: what a gate that knows every sample's length does, wait by wait."""
    if not lent_replicas or batch.end_s <= free_s:
        return None
    best_s, best = plain_wait(batch, free_s).ready_s, None
    for until in CLAIRVOYANT_THRESHOLDS:
        ready_s = lend_outcome(
            batch,
            free_s,
            lent_replicas=lent_replicas,
            until=until,
            plan=plan,
            rebalance=rebalance,
            apply=False,
        ).ready_s
        if ready_s < best_s:
            best_s, best = ready_s, until
    return best
