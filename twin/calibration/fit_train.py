"""The training stage's fit: time against tokens, and against the number of training GPUs when
the traces show several allocations.

With one allocation the scaling curve cannot be seen, so its efficiency is held at the
configured value and that assumption is printed. With several, the form of the per-GPU term and
whether a per-token cost is kept are chosen as `_fit_train_several_allocations` explains.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import least_squares

from ..costs import CostModels
from ..costs.memory import ModelConfig
from ..costs.train import TrainCostParams, ring_traffic, scaling_efficiency, train_stage_s
from .fit_quality import fit_nonnegative_line
from .stage_fit import FitError, FitInputs, StageFit, first_steps, fitted_warmup_s


def fit_train(inputs: FitInputs, costs: CostModels) -> tuple[CostModels, StageFit]:
    steps = inputs.steps
    # The first step after a resize carries the resize's background work, and the first step of
    # a run its warm-up (allocator growth, kernel selection): either would bias the fit.
    fresh = steps["resize_id"].isna().to_numpy() & ~first_steps(steps)
    usable = (steps["train_s"].to_numpy() > 0) & (steps["train_gpus"].to_numpy() > 0) & fresh
    if usable.sum() < 3:
        raise FitError(
            f"train: only {int(usable.sum())} steps have a training time outside a resize; "
            "at least 3 are needed"
        )
    tokens = steps["tokens"].to_numpy(np.float64)[usable]
    gpus = steps["train_gpus"].to_numpy(np.int64)[usable]
    measured = steps["train_s"].to_numpy(np.float64)[usable]
    base = costs.train
    model = inputs.model
    distinct = np.unique(gpus)
    assumptions: list[str] = []
    if len(distinct) == 1:
        fitted = _fit_train_one_allocation(tokens, int(distinct[0]), measured, base, model)
        assumptions.append(
            f"the trace shows one training allocation ({distinct[0]} GPUs): scaling efficiency "
            f"held at {base.scaling_efficiency_per_doubling:g} per doubling of GPUs and the "
            "optimizer-step rate at "
            f"{fitted.optimizer_s_per_gb_shard:g} s per GB of shard; other splits are "
            "extrapolated with that curve"
        )
    else:
        runs = steps["trace_index"].to_numpy()[usable] if "trace_index" in steps else None
        fitted, choices = _fit_train_several_allocations(
            tokens, gpus, measured, base, model, runs=runs
        )
        assumptions += choices
        assumptions.append(
            f"scaling fitted from {len(distinct)} training allocations "
            f"({', '.join(str(g) for g in distinct)} GPUs)"
        )
    aligned = train_predictions(tokens, gpus, model, fitted)
    first = (steps["train_s"].to_numpy() > 0) & (steps["train_gpus"].to_numpy() > 0)
    first &= first_steps(steps)
    warmup_s = fitted_warmup_s(
        steps["train_s"].to_numpy(np.float64)[first],
        train_predictions(
            steps["tokens"].to_numpy(np.float64)[first],
            steps["train_gpus"].to_numpy(np.int64)[first],
            model,
            fitted,
        ),
    )
    fitted = fitted.model_copy(update={"first_step_warmup_s": warmup_s})
    assumptions.append(
        f"first training step of a run: warm-up {warmup_s:.3g} s from {int(first.sum())} first "
        "steps, which the rate fit leaves out"
    )
    fit = StageFit(
        stage="train",
        params=fitted.model_dump(),
        measured_s=measured,
        predicted_s=aligned,
        assumptions=assumptions,
    )
    return costs.model_copy(update={"train": fitted}), fit


def train_predictions(
    tokens: np.ndarray, gpus: np.ndarray, model: ModelConfig, params: TrainCostParams
) -> np.ndarray:
    """The training model's time for each (tokens, training GPUs) pair, in input order."""
    out = np.empty(len(tokens), dtype=np.float64)
    for n in np.unique(gpus):
        rows = gpus == n
        out[rows] = train_stage_s(tokens[rows], train_gpus=int(n), model=model, params=params)
    return out


def _fit_train_one_allocation(
    tokens: np.ndarray,
    num_gpus: int,
    measured: np.ndarray,
    base: TrainCostParams,
    model: ModelConfig,
) -> TrainCostParams:
    """Intercept and slope against tokens. The intercept is split into the configured per-GPU
    terms (optimizer step, all-reduce, collectives), which keep their shape for extrapolating to
    other splits, and a fixed rest; where the intercept is smaller than those terms, they are
    scaled down to it."""
    token_scale = max(tokens.mean(), 1.0)  # tokens in units of their mean: a well-scaled fit
    line = fit_nonnegative_line(tokens / token_scale, measured)
    intercept_s, slope_s_per_token = line.intercept, line.slope / token_scale
    efficiency = float(scaling_efficiency(num_gpus, base))
    no_tokens = base.model_copy(update={"s_per_token_one_gpu": 0.0, "fixed_overhead_s": 0.0})
    per_gpu_terms_s = float(train_stage_s(0.0, train_gpus=num_gpus, model=model, params=no_tokens))
    scale = 1.0 if intercept_s >= per_gpu_terms_s else intercept_s / per_gpu_terms_s
    return base.model_copy(
        update={
            "s_per_token_one_gpu": float(
                slope_s_per_token * num_gpus * efficiency / model.active_fraction
            ),
            "fixed_overhead_s": float(max(0.0, intercept_s - per_gpu_terms_s)),
            "optimizer_s_per_gb_shard": base.optimizer_s_per_gb_shard * scale,
            "allreduce_s_per_gb": base.allreduce_s_per_gb * scale,
            "exchange_s_per_gb": base.exchange_s_per_gb * scale,
            "collective_s_per_gb_per_extra_gpu": base.collective_s_per_gb_per_extra_gpu * scale,
        }
    )


def _fit_train_several_allocations(
    tokens: np.ndarray,
    gpus: np.ndarray,
    measured: np.ndarray,
    base: TrainCostParams,
    model: ModelConfig,
    *,
    runs: np.ndarray | None = None,
) -> tuple[TrainCostParams, list[str]]:
    """The training curve over several allocations, and what the fit chose.

    Two choices the step times alone cannot make by least squares:

    - The optimizer shard (1/n), a ring all-reduce (2 (n - 1) / n = 2 - 2/n) and an exchange
      flat beyond one GPU (0 on one, 1 from two) differ, beside the constant term, only in how
      they bend between the counts, so the times cannot say which cause is at work, only which
      shape fits. Each is tried with the others held at 0: shards that shrink with more
      trainers, gradients exchanged at a cost that grows to a plateau, or one that reaches it
      at two (trainers sharing one device through host memory). The better fit of the first
      two is kept, and the flat exchange replaces it only where it predicts better: with two
      or more runs by a lower leave-one-run-out error by more than one standard error (the
      rule below), with one run by the better fit.
    - A per-token cost is only worth its parameter if it predicts runs it was not fitted on.
      With two or more runs, each run is predicted by a fit to the others, with and without the
      term, and the usual one-standard-error rule of cross-validation decides: the term is
      dropped unless its mean held-out error is lower than the simpler form's by more than one
      standard error of its own (a small model on a large GPU trains in time that barely follows
      the tokens, and a term fitted to run-to-run noise then mispredicts the next run).
    """
    notes = []
    with_tokens = True
    if runs is not None and len(np.unique(runs)) >= 2:
        with_term = _leave_one_run_out_ape(tokens, gpus, measured, base, model, runs, True)
        without_term = _leave_one_run_out_ape(tokens, gpus, measured, base, model, runs, False)
        if with_term is not None and without_term is not None:
            with_mean, with_se = _mean_and_standard_error(with_term)
            without_mean, _ = _mean_and_standard_error(without_term)
            with_tokens = with_mean + with_se < without_mean
            notes.append(
                f"per-token cost {'kept' if with_tokens else 'dropped'}: leave-one-run-out "
                f"error {with_mean:.1%} ± {with_se:.1%} with it, {without_mean:.1%} without "
                f"(mean of {len(with_term)} held-out runs' median errors ± one standard error; "
                "the term is kept only where it wins by more than one standard error)"
            )
    fitted, form, kept_rss = _best_train_form(
        tokens, gpus, measured, base, model, with_tokens, forms=("optimizer", "allreduce")
    )
    shared, shared_rss = _fit_train_form(
        tokens, gpus, measured, base, model, with_tokens, "exchange"
    )
    held_out = (
        [
            _leave_one_run_out_ape(tokens, gpus, measured, base, model, runs, with_tokens, (f,))
            for f in (form, "exchange")
        ]
        if runs is not None and len(np.unique(runs)) >= 2
        else [None, None]
    )
    if held_out[0] is not None and held_out[1] is not None:
        kept_mean, _ = _mean_and_standard_error(held_out[0])
        shared_mean, shared_se = _mean_and_standard_error(held_out[1])
        adopt = shared_mean + shared_se < kept_mean
        how = (
            f"leave-one-run-out error {shared_mean:.1%} ± {shared_se:.1%} with the flat "
            f"exchange, {kept_mean:.1%} with the {_FORM_SHAPES[form]} form; it is taken only "
            "where it wins by more than one standard error"
        )
    else:
        adopt = shared_rss < kept_rss
        how = "one run: the better fit of the two decides"
    if adopt:
        fitted, form = shared, "exchange"
    notes.append(
        f"the per-GPU term is the {_FORM_SHAPES[form]} form (with a constant the forms differ "
        "only in how they bend between the counts, so the times choose, not the cause; "
        f"{how})"
    )
    return fitted, notes


_FORM_SHAPES = {
    "optimizer": "optimizer shard, 1/n",
    "allreduce": "ring all-reduce, 2(n-1)/n",
    "exchange": "exchange flat beyond one GPU",
}
"""The per-GPU forms the fit chooses among, in the order that breaks ties."""


def _best_train_form(
    tokens: np.ndarray,
    gpus: np.ndarray,
    measured: np.ndarray,
    base: TrainCostParams,
    model: ModelConfig,
    with_tokens: bool,
    forms: tuple[str, ...] = tuple(_FORM_SHAPES),
) -> tuple[TrainCostParams, str, float]:
    """The best fit among `forms` (default: the optimizer-shard, ring all-reduce and
    flat-exchange forms; the first on a tie), which form it is and its residual sum of
    squares."""
    fits = {
        form: _fit_train_form(tokens, gpus, measured, base, model, with_tokens, form)
        for form in forms
    }
    form = min(fits, key=lambda f: fits[f][1])
    return fits[form][0], form, fits[form][1]


def _mean_and_standard_error(values: list[float]) -> tuple[float, float]:
    """Mean and its standard error (0 for a single value)."""
    array = np.asarray(values, dtype=float)
    if len(array) < 2:
        return float(array.mean()), 0.0
    return float(array.mean()), float(array.std(ddof=1) / np.sqrt(len(array)))


def _leave_one_run_out_ape(
    tokens: np.ndarray,
    gpus: np.ndarray,
    measured: np.ndarray,
    base: TrainCostParams,
    model: ModelConfig,
    runs: np.ndarray,
    with_tokens: bool,
    forms: tuple[str, ...] = tuple(_FORM_SHAPES),
) -> list[float] | None:
    """Median absolute percentage error on each run of a fit to the others, one per run that can
    be held out (None if none can: the rest must still show two allocations)."""
    errors = []
    for run in np.unique(runs):
        rest = runs != run
        if len(np.unique(gpus[rest])) < 2 or rest.sum() < 4:
            continue
        fitted, _, _ = _best_train_form(
            tokens[rest], gpus[rest], measured[rest], base, model, with_tokens, forms
        )
        held = ~rest
        predicted = train_predictions(tokens[held], gpus[held], model, fitted)
        errors.append(float(np.median(np.abs(predicted / measured[held] - 1.0))))
    return errors or None


def _fit_train_form(
    tokens: np.ndarray,
    gpus: np.ndarray,
    measured: np.ndarray,
    base: TrainCostParams,
    model: ModelConfig,
    with_tokens: bool,
    form: str,
) -> tuple[TrainCostParams, float]:
    """One form of the curve by bounded least squares: fixed, per token (if `with_tokens`), the
    scaling efficiency (with tokens), the optimizer shard, the ring all-reduce or the flat
    exchange (`form`), and the collectives that grow with the rank count. Returns the
    parameters and the residual sum of squares."""
    token_scale = max(tokens.mean(), 1.0)
    scaled_tokens = tokens / token_scale
    # Every term but the tokens' is one value per training-GPU count: the solver evaluates the
    # model over a hundred times, so those are computed per count and spread over the steps
    # (the same values, elementwise, as computing them per step).
    counts, step_count = np.unique(gpus, return_inverse=True)
    log2_gpus = np.log2(counts.astype(np.float64))
    if form == "optimizer":
        per_gpu_gb = model.optimizer_state_gb / counts
    elif form == "allreduce":
        per_gpu_gb = model.gradients_gb * ring_traffic(counts)
    else:
        per_gpu_gb = model.gradients_gb * (counts > 1).astype(np.float64)
    extra_gpu_gb = model.gradients_gb * (counts - 1)

    def unpack(x: np.ndarray) -> tuple[float, float, float, float, float]:
        if with_tokens:
            return tuple(x)
        fixed_s, per_gpu_rate, collective_rate = x
        return fixed_s, 0.0, base.scaling_efficiency_per_doubling, per_gpu_rate, collective_rate

    def predict(x: np.ndarray) -> np.ndarray:
        fixed_s, per_token_scaled, efficiency, per_gpu_rate, collective_rate = unpack(x)
        divisor = (counts * efficiency**log2_gpus)[step_count]
        per_gpu_s = (per_gpu_rate * per_gpu_gb)[step_count]
        collective_s = (collective_rate * extra_gpu_gb)[step_count]
        return fixed_s + scaled_tokens * per_token_scaled / divisor + per_gpu_s + collective_s

    if with_tokens:
        x0 = np.array(
            [base.fixed_overhead_s, 1.0, base.scaling_efficiency_per_doubling, 0.01, 0.01]
        )
        x0[1] = max(float(np.median(measured * gpus)), 1e-6)
        bounds = ([0.0, 0.0, 0.05, 0.0, 0.0], [np.inf, np.inf, 1.0, np.inf, np.inf])
    else:
        x0 = np.array([max(float(np.median(measured)), 1e-6), 0.01, 0.01])
        bounds = ([0.0, 0.0, 0.0], [np.inf, np.inf, np.inf])
    solution = least_squares(
        lambda x: predict(x) - measured, x0, bounds=bounds, method="trf", x_scale="jac"
    )
    fixed_s, per_token_scaled, efficiency, per_gpu_rate, collective_rate = unpack(solution.x)
    fitted = base.model_copy(
        update={
            "fixed_overhead_s": float(fixed_s),
            "s_per_token_one_gpu": float(per_token_scaled / token_scale / model.active_fraction),
            "scaling_efficiency_per_doubling": float(efficiency),
            "optimizer_s_per_gb_shard": float(per_gpu_rate) if form == "optimizer" else 0.0,
            "allreduce_s_per_gb": float(per_gpu_rate) if form == "allreduce" else 0.0,
            "exchange_s_per_gb": float(per_gpu_rate) if form == "exchange" else 0.0,
            "collective_s_per_gb_per_extra_gpu": float(collective_rate),
        }
    )
    return fitted, float(np.sum((predict(solution.x) - measured) ** 2))
