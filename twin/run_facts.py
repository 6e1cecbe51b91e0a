"""Facts about a traced run that its log may not carry, and which of them had to be assumed.

A veRL log holds step times but not the GPU split, the model size, the GPU memory or the link
between trainers and rollout engines, and every what-if the twin answers depends on them. The
user supplies them as flags (`--train-gpus`, `--rollout-gpus`, `--model-params-b`,
`--gpu-memory-gb`, `--link-gbps`), in a sidecar beside the log, or through `--config`; whatever is
still missing is assumed, and each assumption is an `AssumedFact` naming the flag that would
supply it, so the output can list them in one block and `--strict` can refuse them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dynaresize.config_io import ConfigError

from ..traces.importers import ImportOptions


@dataclass(frozen=True)
class RunFacts:
    """What the user said about the traced run (None: not said)."""

    train_gpus: int | None = None
    rollout_gpus: int | None = None
    model_params_b: float | None = None
    gpu_memory_gb: float | None = None
    link_gbps: float | None = None
    """Bandwidth of the trainer-to-rollout link (GB/s)."""

    def __post_init__(self) -> None:
        if (self.train_gpus is None) != (self.rollout_gpus is None):
            given = "--train-gpus" if self.train_gpus is not None else "--rollout-gpus"
            needed = "--rollout-gpus" if self.train_gpus is not None else "--train-gpus"
            raise ConfigError(f"{given} needs {needed}: give the whole split")
        for name in ("train_gpus", "rollout_gpus", "model_params_b", "gpu_memory_gb", "link_gbps"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                flag = "--" + name.replace("_", "-")
                raise ConfigError(f"{flag} must be > 0, got {value}")

    @property
    def has_split(self) -> bool:
        return self.train_gpus is not None and self.rollout_gpus is not None

    def import_options(self, base: ImportOptions | None) -> ImportOptions | None:
        """`base` (a sidecar's options, or None) with the facts given here put over it."""
        updates: dict = {}
        if self.has_split:
            updates.update(train_gpus=self.train_gpus, rollout_gpus=self.rollout_gpus)
            if base is not None and base.num_gpus is not None:
                updates["num_gpus"] = None  # the split given now says the count
        if self.model_params_b is not None:
            updates["model_params_b"] = self.model_params_b
        if not updates:
            return base
        return (base or ImportOptions()).model_copy(update=updates)


@dataclass(frozen=True)
class AssumedFact:
    """A fact the output depends on that neither the log, a sidecar, a flag nor a config gave."""

    name: str
    value: str
    flags: str
    """The flag(s) that would supply it."""

    def line(self) -> str:
        return f"{self.name}: {self.value} (give {self.flags})"

    def as_dict(self) -> dict[str, str]:
        return {"fact": self.name, "assumed": self.value, "flag": self.flags}


@dataclass
class Assumptions:
    """What one analysis had to assume, and notes about how the rest was derived."""

    facts: list[AssumedFact] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def assume(self, name: str, value: str, flags: str) -> None:
        self.facts.append(AssumedFact(name, value, flags))


COLOCATED_START_FACT = "disaggregated start split for the what-ifs"
"""The fact a colocated run's analysis needs and its log cannot hold: which disaggregated split
the compared runs start on."""
SPLIT_FLAGS = "--train-gpus and --rollout-gpus"


def colocated_start_fact(value: str = "the twin's fastest split on the first steps") -> AssumedFact:
    return AssumedFact(COLOCATED_START_FACT, value, SPLIT_FLAGS)


def with_fact_value(
    facts: tuple[AssumedFact, ...], name: str, value: str
) -> tuple[AssumedFact, ...]:
    """`facts` with the value of the fact called `name` replaced (once the analysis knows it)."""
    return tuple(AssumedFact(f.name, value, f.flags) if f.name == name else f for f in facts)


def assumed_block(facts: list[AssumedFact] | tuple[AssumedFact, ...]) -> list[str]:
    """The lines every trace command prints first: each assumed fact and how to give it."""
    if not facts:
        return [
            "assumed: nothing (every fact the analysis uses came from the log, flags or config)"
        ]
    return ["assumed (not in the log, flags or config):"] + [f"  {f.line()}" for f in facts]


def refuse_assumed(facts: list[AssumedFact] | tuple[AssumedFact, ...]) -> None:
    """--strict: an assumed fact is an error naming the flags that supply it."""
    if facts:
        listed = "; ".join(f"{f.name} (assumed {f.value}): give {f.flags}" for f in facts)
        raise ConfigError(f"--strict: the analysis would assume {listed}")
