"""Load a reward function (a user's Python file or a built-in) and call it as veRL does.

A user's function is called with keyword arguments, as veRL's reward manager calls a custom
reward: `name(data_source=..., solution_str=..., ground_truth=..., extra_info=..., **kwargs)`,
and returns a number or a mapping with a `score` (its other keys come back as details, veRL's
`reward_extra_info`). `load_reward` executes the file and checks that the function exists and
accepts those arguments, so a wrong path, a typo in the name or a missing parameter stops the run
before anything starts. At call time, a function that raises, or returns something that is not a
finite number, raises one `RewardFunctionError` naming the function, the sample and the problem;
the caller stops the run there (its last checkpoint stays as it was).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import math
import numbers
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from dynaresize.config_io import ConfigError

from . import builtin_rewards
from .config import BuiltinReward, RewardConfig

VERL_ARGUMENTS = ("data_source", "solution_str", "ground_truth", "extra_info")


class RewardConfigError(ConfigError):
    """The reward cannot be loaded: no such file, the file fails, or no such function."""


class RewardFunctionError(RuntimeError):
    """A reward function raised, or returned something other than a finite number."""

    def __init__(self, *, function: str, sample: str, problem: str) -> None:
        super().__init__(f"reward {function}: {sample}: {problem}")
        self.function = function
        self.sample = sample
        self.problem = problem

    def __reduce__(self) -> tuple[Any, ...]:  # crosses Ray and process boundaries intact
        return (_rebuild_error, (self.function, self.sample, self.problem))


def _rebuild_error(function: str, sample: str, problem: str) -> RewardFunctionError:
    return RewardFunctionError(function=function, sample=sample, problem=problem)


@dataclass(frozen=True)
class RewardInput:
    """What the reward of one sample is computed from."""

    data_source: str
    solution_str: str
    """The response decoded to text, without the end-of-sequence token."""
    ground_truth: Any
    extra_info: dict[str, Any] | None = None
    finished: bool = True
    """The response ended with end-of-sequence (False: it was cut at the length cap)."""
    sample: str = "a sample"
    """Names the sample in errors, e.g. `prompt 17 sample 2 (train.parquet: row 530)`."""


@dataclass(frozen=True)
class RewardOutcome:
    score: float
    details: dict[str, Any] = field(default_factory=dict)
    """The other keys of a mapping the function returned."""


class RewardFunction:
    """A loaded reward: call it on one `RewardInput`, or score a list of them."""

    def __init__(self, label: str, call: Callable[[RewardInput], Any]) -> None:
        self.label = label
        self._call = call

    def __call__(self, sample: RewardInput) -> RewardOutcome:
        try:
            value = self._call(sample)
        except Exception as err:
            problem = f"raised {type(err).__name__}: {err}"
            raise RewardFunctionError(
                function=self.label, sample=sample.sample, problem=problem
            ) from err
        return self._outcome(value, sample)

    def score_all(self, samples: Sequence[RewardInput]) -> list[RewardOutcome]:
        return [self(sample) for sample in samples]

    def _outcome(self, value: Any, sample: RewardInput) -> RewardOutcome:
        details: dict[str, Any] = {}
        if isinstance(value, Mapping):
            if "score" not in value:
                keys = ", ".join(sorted(str(k) for k in value)) or "none"
                self._fail(sample, f"returned a mapping without a 'score' key (keys: {keys})")
            details = {str(k): v for k, v in value.items() if k != "score"}
            value = value["score"]
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            self._fail(sample, f"returned {value!r} ({type(value).__name__}), not a number")
        score = float(value)
        if not math.isfinite(score):
            self._fail(sample, f"returned {score}, not a finite number")
        return RewardOutcome(score=score, details=details)

    def _fail(self, sample: RewardInput, problem: str) -> None:
        raise RewardFunctionError(function=self.label, sample=sample.sample, problem=problem)


def load_reward(config: RewardConfig, *, base_dir: Path | None = None) -> RewardFunction:
    """The reward `config` names, checked so that only the data can still make it fail.
    A relative `path` is read from `base_dir` (the current directory when None)."""
    if config.builtin is not None:
        return _builtin(config.builtin, config.kwargs)
    assert config.path is not None  # the config allows exactly one of builtin and path
    path = Path(config.path)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    function = _load_function(path, config.name)
    _check_signature(function, config.name, f"{config.name} in {path}", config.kwargs)
    return RewardFunction(f"{config.name} ({path})", _verl_call(function, config.kwargs))


def _builtin(builtin: BuiltinReward, kwargs: dict[str, Any]) -> RewardFunction:
    label = f"builtin {builtin.value}"
    if builtin is BuiltinReward.FINAL_NUMBER:
        _check_signature(builtin_rewards.final_number, "final_number", label, kwargs)
        return RewardFunction(label, _verl_call(builtin_rewards.final_number, kwargs))
    if kwargs:
        raise RewardConfigError(f"reward.kwargs: {label} takes none, got {sorted(kwargs)}")

    def repeat(sample: RewardInput) -> float:
        return builtin_rewards.repeat(
            sample.solution_str, sample.ground_truth, finished=sample.finished
        )

    return RewardFunction(label, repeat)


def _verl_call(function: Callable[..., Any], kwargs: dict[str, Any]) -> Callable[..., Any]:
    def call(sample: RewardInput) -> Any:
        return function(
            data_source=sample.data_source,
            solution_str=sample.solution_str,
            ground_truth=sample.ground_truth,
            extra_info=sample.extra_info,
            **kwargs,
        )

    return call


def _load_function(path: Path, name: str) -> Callable[..., Any]:
    if not path.is_file():
        raise RewardConfigError(f"reward.path: {path}: no such file")
    module = _execute(path)
    if not hasattr(module, name):
        defined = sorted(
            n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
        )
        raise RewardConfigError(
            f"reward.name: {path} defines no {name!r} (functions there: "
            f"{', '.join(defined) or 'none'})"
        )
    function = getattr(module, name)
    if not callable(function):
        raise RewardConfigError(f"reward.name: {name} in {path} is not a function")
    return function


def _execute(path: Path) -> ModuleType:
    """Run the file as a module of its own (registered, so pickling and dataclasses in it
    work); the name is derived from the path, so loading it twice gives one module."""
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    module_name = f"dynaresize_reward_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise RewardConfigError(f"reward.path: {path}: not loadable as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        sys.modules.pop(module_name, None)
        where = f" (line {err.lineno})" if isinstance(err, SyntaxError) else ""
        raise RewardConfigError(
            f"reward.path: {path}: the file failed to load{where}: {type(err).__name__}: {err}"
        ) from None
    return module


def _check_signature(
    function: Callable[..., Any], name: str, label: str, kwargs: dict[str, Any]
) -> None:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return  # a builtin or C function: its arguments are found out at the first call
    probe = dict.fromkeys(VERL_ARGUMENTS) | kwargs
    try:
        signature.bind(**probe)
    except TypeError as err:
        raise RewardConfigError(
            f"reward: {label} cannot be called as {name}"
            f"({', '.join(VERL_ARGUMENTS)}{', **kwargs' if kwargs else ''}): {err}"
        ) from None
