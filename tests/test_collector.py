"""tune_garbage_collector: what a node does to Python's collector once started."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from broker_mqtt import tune_garbage_collector
from broker_mqtt.collector import NODE_THRESHOLDS


@pytest.fixture
def restored_collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_it_freezes_what_exists_and_collects_less_often(restored_collector: None) -> None:
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    before = gc.get_threshold()
    assert tune_garbage_collector() == before  # (what to set again to undo it)
    assert gc.get_threshold() == NODE_THRESHOLDS
    assert gc.get_freeze_count() > 0  # (the modules and classes loaded by now)
    assert tune_garbage_collector((5000, 10, 10)) == NODE_THRESHOLDS
    assert gc.get_threshold() == (5000, 10, 10)


@pytest.mark.parametrize("bad", [(0, 10, 10), (700, 10), (700.0, 10, 10), (True, 10, 10), 5, [700, 10, 10]])
def test_thresholds_that_are_not_three_positive_ints_are_refused_and_change_nothing(
        restored_collector: None, bad: Any) -> None:
    gc.unfreeze()
    before = gc.get_threshold()
    with pytest.raises(ValueError, match="three ints"):
        tune_garbage_collector(bad)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
