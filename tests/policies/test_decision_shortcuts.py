"""`Decision.hold` and `Decision.resize` skip validation on their common path; what they build
must be what validation builds: equal, the same fields given, the same dump, the target the
instance passed."""

from __future__ import annotations

import pytest

from dynaresize.policies.types import Allocation, Decision, DecisionKind, LendAction


def _same(shortcut: Decision, validated: Decision) -> None:
    assert shortcut == validated
    assert shortcut.model_fields_set == validated.model_fields_set
    assert list(shortcut.__dict__.items()) == list(validated.__dict__.items())
    assert shortcut.model_dump_json() == validated.model_dump_json()


def test_a_resize_is_the_validated_resize():
    target = Allocation(train_gpus=4, rollout_gpus=4)
    shortcut = Decision.resize(target, "move")
    _same(shortcut, Decision(kind=DecisionKind.RESIZE, target=target, reason="move"))
    assert shortcut.target is target


def test_a_hold_is_the_validated_hold():
    _same(Decision.hold("stay"), Decision(kind=DecisionKind.HOLD, reason="stay"))


def test_a_resize_that_lends_or_has_a_bad_target_is_validated():
    target = Allocation(train_gpus=4, rollout_gpus=4)
    lent = Decision.resize(target, "move", lend=LendAction())
    assert lent.lend == LendAction()
    with pytest.raises(ValueError):
        Decision.resize({"train_gpus": 0, "rollout_gpus": 4}, "bad")  # type: ignore[arg-type]
