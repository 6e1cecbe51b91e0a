"""Trace schema v1: the records the twin and the live executor both write.

Three tables, each a list of flat records:
- steps: one row per training step (stage times, idle GPU-seconds, allocation, lineage);
- resizes: one row per resize phase (resize id, phase name, start, end, critical or background);
- decisions: one row per policy call (what was decided, why, and which cost estimate was used).

Times are seconds on the run's own clock (SimPy time in the twin, wall time since the run started
in the executor). Every row carries `schema_version`; readers reject versions they do not know.
docs/trace-schema.md describes every field and its unit.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .phases import PhaseName, PipelineMode, Role, StrategyName

SCHEMA_VERSION = 1


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    schema_version: int = Field(default=SCHEMA_VERSION, description="Trace schema version.")

    @field_validator("*", mode="after")
    @classmethod
    def _finite(cls, value: object, info) -> object:
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{info.field_name} must be finite, got {value}")
        return value


class StepRecord(_Record):
    """One training step."""

    step: int = Field(ge=0, description="Step index, 0-based, consecutive.")
    start_s: float = Field(ge=0, description="Time the step began (s).")
    end_s: float = Field(ge=0, description="Time the step ended (s).")
    rollout_s: float = Field(ge=0, description="Duration of the rollout stage that fed it (s).")
    train_s: float = Field(ge=0, description="Duration of the training stage (s).")
    sync_s: float = Field(ge=0, description="Duration of the weight sync after training (s).")
    step_s: float = Field(ge=0, description="end_s - start_s (s).")
    idle_train_gpu_s: float = Field(ge=0, description="GPU-seconds training GPUs sat idle.")
    idle_rollout_gpu_s: float = Field(ge=0, description="GPU-seconds rollout GPUs sat idle.")
    train_gpus: int = Field(ge=0, description="GPUs in the Training role during the step.")
    rollout_gpus: int = Field(ge=0, description="GPUs in the Rollout role during the step.")
    device_roles: list[Role] = Field(
        description="Role of each device, indexed by device id (the device-to-role map)."
    )
    resize_id: int | None = Field(
        default=None, description="Resize that took effect just before this step, if any."
    )
    rollout_batch_id: int = Field(ge=0, description="Id of the rollout batch this step trained on.")
    rollout_weights_version: int = Field(
        ge=0, description="Weights version that generated that batch (lineage, staleness)."
    )
    num_samples: int = Field(ge=0, description="Samples (responses) in the batch.")
    tokens: int = Field(ge=0, description="Prompt plus response tokens in the batch.")
    response_len_mean: float = Field(ge=0, description="Mean response length (tokens).")
    response_len_p50: float = Field(ge=0, description="Median response length (tokens).")
    response_len_p99: float = Field(ge=0, description="99th percentile response length (tokens).")
    response_len_max: float = Field(ge=0, description="Longest response (tokens).")
    engine_logprob_abs_diff_mean: float | None = Field(
        default=None,
        ge=0,
        description="Mean absolute difference between the logprobs the rollout engine reported "
        "and those the trainer recomputed, per response token (nats); None if not reported.",
    )
    lent_gpus: int | None = Field(
        default=None,
        ge=0,
        description="Training GPUs lent to Rollout within the step (0: none); None where the "
        "run could not lend.",
    )
    lend_start_s: float | None = Field(
        default=None, ge=0, description="When the lent GPUs began to activate (s), if lent."
    )
    lend_end_s: float | None = Field(
        default=None, ge=0, description="When they were back in training, deactivated (s)."
    )
    lend_switch_s: float | None = Field(
        default=None, ge=0, description="Activate plus deactivate seconds of that lend."
    )

    @field_validator(
        "engine_logprob_abs_diff_mean",
        "lent_gpus",
        "lend_start_s",
        "lend_end_s",
        "lend_switch_s",
        mode="before",
    )
    @classmethod
    def _missing_is_none(cls, value: object) -> object:
        """A table's missing value (NaN) reads as not reported."""
        return None if isinstance(value, float) and math.isnan(value) else value

    @model_validator(mode="after")
    def _consistent(self) -> StepRecord:
        if self.end_s < self.start_s:
            raise ValueError("end_s is before start_s")
        if len(self.device_roles) != self.train_gpus + self.rollout_gpus:
            raise ValueError("device_roles length differs from train_gpus + rollout_gpus")
        return self


class ResizePhaseRecord(_Record):
    """One phase of one resize."""

    resize_id: int = Field(ge=0, description="Resize this phase belongs to.")
    step: int = Field(ge=0, description="The last step completed before the resize began.")
    phase: PhaseName = Field(description="Phase name from the shared vocabulary.")
    strategy: StrategyName = Field(description="How the resize was carried out.")
    from_allocation: str = Field(description="Allocation before, as train:rollout.")
    to_allocation: str = Field(description="Allocation after, as train:rollout.")
    start_s: float = Field(ge=0, description="Phase start (s).")
    end_s: float = Field(ge=0, description="Phase end (s).")
    critical: bool = Field(description="True if the pipeline waited for it; False if overlapped.")
    bytes_moved: int = Field(default=0, ge=0, description="Bytes the phase moved, if it moved any.")
    comm_cache_hits: int | None = Field(
        default=None,
        ge=0,
        description="Process groups of the target split taken ready-made from the communicator "
        "cache in this phase (None: not recorded, or no groups bound in it).",
    )
    comm_groups_built: int | None = Field(
        default=None,
        ge=0,
        description="Process groups built on the spot in this phase (None: not recorded).",
    )

    @model_validator(mode="after")
    def _ordered(self) -> ResizePhaseRecord:
        if self.end_s < self.start_s:
            raise ValueError("end_s is before start_s")
        return self


class DecisionRecord(_Record):
    """One policy call at a step boundary."""

    step: int = Field(ge=0, description="The step that had just completed.")
    time_s: float = Field(ge=0, description="Clock at the call (s).")
    policy: str = Field(description="Policy kind that decided.")
    decision: str = Field(description="'hold' or 'resize'.")
    from_allocation: str = Field(description="Allocation at the call, train:rollout.")
    to_allocation: str | None = Field(default=None, description="Target when resizing.")
    reason: str = Field(default="", description="The policy's stated reason.")
    cost_source: str = Field(
        default="model", description="Which resize-cost estimate the observation carried."
    )
    predicted_resize_critical_s: float | None = Field(
        default=None, ge=0, description="Predicted critical path of the chosen move (s)."
    )
    resize_id: int | None = Field(default=None, description="Id given to the resize, if any.")
    lend: bool = Field(
        default=False,
        description="Whether the decision lent the trainers' GPUs to Rollout for the next wait "
        "of training (always false where the run could not lend).",
    )
    prior_over_measured: float | None = Field(
        default=None,
        ge=0,
        description="On the first decision after a run's first measured resize: the critical "
        "path the policy was given for that resize before it (its decision's "
        "predicted_resize_critical_s), over the measured one (None elsewhere).",
    )


# --- Extensions of v1 (optional records; nothing above is renamed) ---------------------------


class RunMeta(BaseModel):
    """What run a trace describes and how it was obtained; one per trace."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    schema_version: int = Field(default=SCHEMA_VERSION, description="Trace schema version.")
    source: str = Field(
        default="unknown",
        description="What produced the trace: 'twin', 'executor', or the system a log came from.",
    )
    source_path: str | None = Field(
        default=None, description="File the trace was read or imported from, if any."
    )
    importer: str | None = Field(
        default=None, description="Importer that converted a foreign log ('verl', 'csv:slime')."
    )
    cluster: str | None = Field(default=None, description="Free text, e.g. '1 node, 8x H20'.")
    gpu_type: str | None = Field(default=None, description="Accelerator model, e.g. 'H20'.")
    num_gpus: int | None = Field(default=None, ge=0, description="GPUs the run used in total.")
    model_name: str | None = Field(default=None, description="Policy model, e.g. 'Qwen3-8B'.")
    model_params_b: float | None = Field(
        default=None, ge=0, description="Policy model size (billions of parameters)."
    )
    pipeline_mode: PipelineMode | None = Field(
        default=None, description="How rollout and training shared the GPUs."
    )
    start_train_gpus: int | None = Field(
        default=None, ge=0, description="GPUs in the Training role at the first step."
    )
    start_rollout_gpus: int | None = Field(
        default=None, ge=0, description="GPUs in the Rollout role at the first step."
    )
    notes: list[str] = Field(
        default_factory=list,
        description="What the producer or importer inferred or assumed rather than measured.",
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description="Free key-value labels (experiment name, commit, ...)."
    )


class SampleRecord(_Record):
    """One sample (prompt and response) of one step: the per-sample lengths a replay needs."""

    step: int = Field(ge=0, description="Step whose batch the sample belongs to.")
    sample_index: int = Field(ge=0, description="Position of the sample in its batch, 0-based.")
    prompt_tokens: int = Field(ge=0, description="Prompt length (tokens).")
    response_tokens: int = Field(ge=0, description="Response length (tokens).")
    rollout_replica: int | None = Field(
        default=None, ge=0, description="Rollout engine replica that generated it, if known."
    )
    device: int | None = Field(
        default=None, ge=0, description="Device id (as in device_roles) that generated it."
    )
    finish_s: float | None = Field(
        default=None, ge=0, description="Clock when its generation finished (s), if known."
    )
    data_source: str | None = Field(
        default=None,
        description="`data_source` of the dataset row whose prompt the sample answers (veRL's "
        "field: the dataset or task it came from); None without a dataset file.",
    )
    extra_info_index: str | None = Field(
        default=None,
        description="`extra_info.index` of that dataset row, as text (veRL's preprocessing "
        "writes the row's index in its split, some datasets a string id); None where the row "
        "has none.",
    )
    num_resumes: int | None = Field(
        default=None,
        ge=0,
        description="Times its generation was aborted in flight and resumed on another replica "
        "with its tokens kept (partial rollout), or restarted without them; None if not "
        "recorded.",
    )


class ExtraMetricRecord(_Record):
    """A metric of a step that the schema has no field for, kept as the importer found it."""

    step: int = Field(ge=0, description="Step the metric was logged at (trace numbering).")
    key: str = Field(description="The metric's name in the original log.")
    value_json: str = Field(description="The metric's value, JSON-encoded.")
