"""``packing.canonical``: what a joiner keys a snapshot's entries by, checked in place for the usual keys."""

from __future__ import annotations

import random
from typing import Any

import pytest

from broker_mqtt.store.errors import BackendError
from broker_mqtt.store.packing import canonical, pack, unpack

VALUES: list[Any] = [0, 1, 23, 24, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**64 - 1, -1, -24, -25, -256, -257,
                     -(2**64), "", "a", "x" * 23, "x" * 24, "é" * 200, "k" * 70_000, "\u2603", 1.5, [1, "a"], b"xx",
                     None, True, {"a": 1}, ("t", 2)]


def _repacked(data: bytes) -> tuple[bytes | None, type | None]:
    try:
        return pack(unpack(data)), None
    except BackendError as exc:
        return None, type(exc)


def _canonical(data: bytes) -> tuple[bytes | None, type | None]:
    try:
        return canonical(data), None
    except BackendError as exc:
        return None, type(exc)


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_a_canonical_packing_comes_back_as_it_is(value: Any) -> None:
    k = pack(value)
    assert canonical(k) == k


@pytest.mark.parametrize("data", [b"\x18\x05", b"\x19\x00\x05", b"\x1a\x00\x00\x00\x05", b"\x1b" + (5).to_bytes(8, "big"),
                                  b"\x38\x01", b"\x39\x00\x01", b"\x78\x01a", b"\x79\x00\x01a", b"\x7a\x00\x00\x00\x01a"])
def test_a_longer_than_needed_count_is_packed_anew(data: bytes) -> None:
    assert canonical(data) == pack(unpack(data)) != data


@pytest.mark.parametrize("data", [b"", b"\x19\x01", b"\x62a", b"\x62\xff\xfe", b"\x61a\x00", b"\x78", b"\x1c"])
def test_what_is_not_one_well_formed_item_is_a_backend_error(data: bytes) -> None:
    with pytest.raises(BackendError):
        canonical(data)


def test_it_agrees_with_packing_what_unpacks_on_mutated_input() -> None:
    rng = random.Random(20)
    for _ in range(50_000):
        b = bytearray(pack(rng.choice(VALUES[:23])))
        for _ in range(rng.randint(1, 3)):
            op = rng.random()
            if op < 0.4 and b:
                b[rng.randrange(len(b))] = rng.randrange(256)
            elif op < 0.7 and b:
                del b[rng.randrange(len(b))]
            else:
                b.insert(rng.randrange(len(b) + 1), rng.randrange(256))
        assert _canonical(bytes(b)) == _repacked(bytes(b)), bytes(b)
