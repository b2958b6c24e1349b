"""How a store packs keys and values into bytes: the canonical CBOR encoding, and back.

Keys compare by their encoding (``1`` and ``1.0`` are different keys, a list and a tuple the same),
so every backend and the elected store's state key their maps by what :func:`pack` returns. The
encoding is ``broker_mqtt.wire.codec``'s, in canonical form; a :class:`Packed` stands for an item
encoded earlier. Pure functions: no I/O, no clock.
"""

from __future__ import annotations

import functools
from typing import Any

import cbor2

from ..errors import EncodeError, peer_repr
from ..wire import codec
from .errors import BackendError

__all__ = ["Packed", "pack", "pack_array", "unpack", "unpack_key", "canonical", "checked_size", "checked_copy", "detached",
           "detached_key", "is_plain", "plain_size", "is_small_int"]


@functools.lru_cache(maxsize=65_536)
def _pack_scalar(obj: int | str) -> bytes:
    return cbor2.dumps(obj, canonical=True)


def pack(obj: Any) -> bytes:
    """Encode a key or value: ``broker_mqtt.wire.codec``'s encoding, in canonical form (so that equal
    keys, e.g. sets built in another order, get equal bytes). Plain ints and strings, the usual
    keys, come from a cache (``type(...) is``: a bool, an int subclass, never shares 1's bytes).
    A :class:`Packed` inside ``obj`` stands for the item it holds the encoding of."""
    t = type(obj)
    if t is int or t is str:
        return _pack_scalar(obj)
    try:
        return cbor2.dumps(obj, canonical=True, default=_default)
    except (cbor2.CBOREncodeError, codec.EncodeError, TypeError, ValueError) as exc:
        raise BackendError(f"cannot encode {obj!r}: {exc}") from exc


def _default(encoder: cbor2.CBOREncoder, obj: Any) -> None:
    """``pack``'s hook for what cbor2 does not encode itself: a :class:`Packed` is written as the
    encoding it holds (a part encoded earlier), anything else goes to the codec."""
    if type(obj) is Packed:
        encoder.write(obj.data)
    else:
        codec._default(encoder, obj)


def pack_array(parts: list[bytes]) -> bytes:
    """``pack`` of a list whose items ``pack`` to ``parts``: a canonical array is its head (the
    length in the fewest bytes) followed by its items' encodings."""
    n = len(parts)
    if n < 24:
        head = bytes((0x80 + n,))
    elif n < 0x100:
        head = bytes((0x98, n))
    elif n < 0x1_0000:
        head = b"\x99" + n.to_bytes(2, "big")
    elif n < 0x1_0000_0000:
        head = b"\x9a" + n.to_bytes(4, "big")
    else:
        head = b"\x9b" + n.to_bytes(8, "big")
    return head + b"".join(parts)


def unpack(data: bytes) -> Any:
    """Decode a key or value (``broker_mqtt.wire.codec.decode``)."""
    try:
        return codec.decode(data)
    except codec.DecodeError as exc:
        raise BackendError(f"cannot decode stored data: {exc}") from exc


def unpack_key(k: bytes) -> Any:
    """The key packed as ``k``: an array comes back a tuple (hashable; a list and a tuple are the same key)."""
    key = unpack(k)
    return _as_tuple(key) if type(key) is list else key


def _as_tuple(items: list[Any]) -> tuple[Any, ...]:
    return tuple(_as_tuple(x) if type(x) is list else x for x in items)


# an int's or a text string's short count (the head byte's low 5 bits) past 23 -> the bytes of the
# count that follow, and the least count that needs them (a smaller one is not canonical)
_COUNT_BYTES = {0x18: 1, 0x19: 2, 0x1A: 4, 0x1B: 8}
_COUNT_FLOOR = {1: 24, 2: 0x100, 4: 0x1_0000, 8: 0x1_0000_0000}


def canonical(data: bytes) -> bytes:
    """``pack(unpack(data))``: the canonical packing of the item ``data`` holds (how a store keys what a
    peer packed). An int or a text string already packed canonically, the usual key, comes back as
    it is, checked in place rather than decoded and packed again (a joiner takes a million keys in
    a snapshot). Raises BackendError if ``data`` is not one well-formed item."""
    if data:
        major, short = data[0] >> 5, data[0] & 0x1F
        if major in (0, 1, 3) and (short < 24 or short in _COUNT_BYTES):  # uint, negative int, text
            n = _COUNT_BYTES.get(short, 0)
            count = int.from_bytes(data[1:1 + n], "big") if n else short
            # (a truncated count fails the length check: the item would be longer than data)
            if (not n or count >= _COUNT_FLOOR[n]) and len(data) == 1 + n + (count if major == 3 else 0):
                if major == 3:
                    try:
                        data[1 + n:].decode("utf-8")
                    except UnicodeDecodeError as exc:
                        raise BackendError(f"cannot decode stored data: {exc}") from exc
                return data
    return pack(unpack(data))


class Packed:
    """A value kept as its CBOR encoding: a MemoryBackend's stored value (every mutable or composite
    value: a fresh copy on every read), or a part of what ``pack`` encodes, encoded earlier."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


_PLAIN: frozenset[type] = frozenset({int, float, bool, bytes, type(None)})
_INT_LIMIT = 1 << 64


def is_small_int(value: int) -> bool:
    """The int ``value`` encodes in CBOR without a bignum, in 9 bytes at most (-2**64 <= value < 2**64)."""
    return -_INT_LIMIT <= value < _INT_LIMIT


def is_plain(value: Any) -> bool:
    """``value`` is a scalar CBOR encodes whatever it holds (a str only if ASCII: a lone surrogate
    does not encode)."""
    t = type(value)
    return t in _PLAIN or (t is str and value.isascii())


def plain_size(value: Any) -> int:
    """At least the size of a plain value's encoding (:func:`is_plain`), and at most 9 bytes more."""
    t = type(value)
    if t is str or t is bytes:
        return len(value) + 9
    return value.bit_length() // 8 + 12 if t is int else 9  # (an int past 64 bits: a bignum)


def checked_size(value: Any) -> int:
    """A bound of the size of ``value``'s encoding (:func:`~broker_mqtt.wire.codec.size_bound`), the
    check every store makes of a write before it takes it: BackendError if ``value`` is outside the
    data model, what every receiver decodes too (cbor2 encodes a date or a UUID, which decoders
    refuse; containers nested past ``VALUE_DEPTH`` would pass the decoders' limit inside a log
    record). A plain scalar needs no walk."""
    if is_plain(value):
        return plain_size(value)
    try:
        return codec.size_bound(value)
    except (EncodeError, ValueError) as exc:
        raise BackendError(f"cannot encode {peer_repr(value, 80)}: {exc}") from exc


def checked_copy(value: Any) -> tuple[int, Any]:
    """``(size, copy)``: the size of ``value``'s encoding and :func:`detached`'s copy of it, from one
    encoding and one decoding (what :func:`checked_size` and then :func:`detached` find, without the
    walk): BackendError for what :func:`checked_size` refuses; the size is exact rather than a bound
    (but for a plain scalar: :func:`plain_size`, and the scalar itself)."""
    if is_plain(value):
        return plain_size(value), value
    try:
        encoded = codec.encode(value)
        copy = codec.decode_within(encoded, codec.VALUE_DEPTH)
    except (EncodeError, codec.DecodeError, ValueError) as exc:  # (ValueError: a lone surrogate's UnicodeError)
        raise BackendError(f"cannot encode {peer_repr(value, 80)}: {exc}") from exc
    return len(encoded), copy


def detached(value: Any) -> Any:
    """A copy of ``value`` that shares no mutable part with it, in the form every replica decodes it
    from the wire (an array comes back a list): what an elected store keeps of a caller's value, and
    what it hands a caller of what it keeps, so that neither changes the other afterwards (a caller's
    list changed after its put, or a read's, would otherwise change this replica's state alone). A
    plain scalar is its own copy. Raises BackendError for a value outside the data model."""
    if is_plain(value):
        return value
    try:
        return codec.decode(codec.encode(value))
    except (EncodeError, codec.DecodeError, ValueError) as exc:  # (ValueError: a lone surrogate's UnicodeError)
        raise BackendError(f"cannot encode {peer_repr(value, 80)}: {exc}") from exc


def detached_key(key: Any) -> Any:
    """A copy of ``key`` as :func:`detached` makes one of a value, in the form a store hands keys out
    (``keys()``: an array a tuple, :func:`unpack_key`). Raises BackendError as :func:`detached`."""
    return key if is_plain(key) else unpack_key(pack(key))
