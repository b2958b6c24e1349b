"""``packing.checked_copy``: what a write's placing takes in one encoding and one decoding (its size and
a copy), agreeing with ``checked_size`` and then ``detached``, which it replaces there."""

from __future__ import annotations

import datetime
import decimal
import uuid
from typing import Any

import pytest
from hypothesis import given, settings

from broker_mqtt.store.commands import Put
from broker_mqtt.store.errors import BackendError
from broker_mqtt.store.packing import checked_copy, checked_size, detached, is_plain
from broker_mqtt.store.writer_core import WriterCore
from broker_mqtt.wire import codec
from tests.test_codec import values

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def _containers(value: Any) -> list[Any]:
    """Every list, dict and set in ``value`` (the parts a caller could change)."""
    found: list[Any] = []
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, (list, dict, set)):
            found.append(v)
        if isinstance(v, dict):
            todo += [*v.keys(), *v.values()]
        elif isinstance(v, (list, tuple, set, frozenset)):
            todo += list(v)
    return found


@settings(max_examples=400, deadline=None)
@given(values)
def test_the_size_is_the_encodings_and_the_copy_is_detached(value: Any) -> None:
    size, copy = checked_copy(value)
    assert len(codec.encode(value)) <= size <= checked_size(value)
    if not is_plain(value):
        assert size == len(codec.encode(value))
    assert codec.encode(copy) == codec.encode(detached(value))  # (encodings: a NaN is not equal to itself)
    mine = {id(c) for c in _containers(value)}
    assert not any(id(c) in mine for c in _containers(copy))


class _NotData:
    pass


@pytest.mark.parametrize("value", [[_NotData()], {"k": [1, _NotData()]}, [datetime.date(2024, 1, 2)],
                                   [uuid.UUID(int=5)], [decimal.Decimal(5)], ["\ud800"], ["ok", {"\udfff": 1}],
                                   _nested(385)], ids=lambda v: repr(v)[:24])
def test_what_checked_size_refuses_it_refuses(value: Any) -> None:
    with pytest.raises(BackendError, match="cannot encode"):
        checked_size(value)
    with pytest.raises(BackendError, match="cannot encode"):
        checked_copy(value)


def test_a_value_as_deep_as_value_depth_is_taken_and_one_deeper_is_not() -> None:
    size, copy = checked_copy(_nested(codec.VALUE_DEPTH))
    assert copy == _nested(codec.VALUE_DEPTH) and size == codec.VALUE_DEPTH + 1
    writer = WriterCore("w", "o", 0.0)
    writer.write(Put("k", _nested(codec.VALUE_DEPTH - 1), None), 0.0)  # (the put's own list is one more)
    with pytest.raises(BackendError, match="nested|depth"):
        writer.write(Put("k", _nested(codec.VALUE_DEPTH), None), 0.0)
    assert writer.pending == 1


def test_a_placed_write_holds_its_own_copy() -> None:
    value = {"items": [1, 2, {"x": [3]}]}
    writer = WriterCore("w", "o", 0.0)
    writer.write(Put("k", value, None), 0.0)
    value["items"][2]["x"].append(4)  # type: ignore[index]
    (pending,) = writer._writes.values()
    assert pending.cmd[2] == {"items": [1, 2, {"x": [3]}]}
