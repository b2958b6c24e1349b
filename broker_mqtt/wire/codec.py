"""CBOR codec for Zeek Broker data-model values: one encode path, one decode path.

Theory of operation
-------------------
cbor2 (a compiled extension) does all the work.  It encodes and decodes natively every type of
the model that has a standard CBOR form: null, booleans, integers (bignum tags 2/3 beyond 64
bits), floats, text, bytes, arrays, maps, sets (tag 258), addresses and subnets (tags 52/54,
RFC 9164) and aware datetimes (tag 0, RFC 3339 text with the UTC offset and microseconds).
The remaining types are plugged in through cbor2's per-item hooks, which only run for the
values that need them; there is no Python-level walk of the value.  ``encode`` costs what bare
``cbor2.dumps`` costs; ``decode`` adds a constant ~0.4 us for the trailing-byte check below.

* encode: ``default=`` turns :class:`~broker_mqtt.wire.data.Count`, :class:`~broker_mqtt.wire.data.Port`,
  ``timedelta`` and :class:`~broker_mqtt.wire.data.EnumValue` into the project tags of
  :data:`PROJECT_TAGS`; anything else cbor2 cannot encode raises :class:`EncodeError`.
* decode: ``semantic_decoders=`` maps the project tags back, and refuses the tags cbor2 would
  otherwise turn into types outside the model (Decimal, Fraction, UUID, regex, ...);
  ``tag_hook=`` refuses every other unknown tag.  Every failure becomes :class:`DecodeError`.

``cbor2.loads`` silently ignores trailing bytes.  :func:`decode` therefore decodes the
two-item array ``0x82 <data> <mark>`` and requires the second item to be the mark's value.
The mark is the byte 0xf7 (``undefined``), or when ``data`` holds 0xf7 the first of the bytes
0xe0..0xf3 (simple values 0..19) that ``data`` does not hold.  Each of these values comes only
from its one byte (their two-byte forms ``0xf8 0x00..0x1f`` are malformed, and no accepted tag
yields a simple value), so this is exact: if the first item ends early, the second item starts
inside ``data``, which lacks the mark's byte; if it runs late, the input ends before the second
item.  0xf7 never occurs in UTF-8, so most messages take the first mark.  Input holding every
mark byte, and every failure (to report an offset), takes the exact slow path: a stream decoder
whose position is checked afterwards.

:func:`decode_many` decodes the payloads of a whole PUBLISH in one C call (the per-call cost,
option handling included, is ~0.6 us of the ~3.5 us a Spark-bridge row takes alone): the array ``<head 2n> p1 0xf7 p2 0xf7
... pn 0xf7`` of the payloads that hold no 0xf7.  The marks are then the only 0xf7 bytes, and
``undefined`` comes only from a 0xf7 byte, so if every odd item is ``undefined`` the n odd items
sit on the n marks and every even item is exactly one payload.  Anything else (a payload that
holds 0xf7, a malformed one in the batch) is decoded by :func:`decode` alone, so the results
and errors are exactly :func:`decode`'s.

Tuples encode as arrays; arrays decode as ``list``, except as a dict key or set member where
they decode as ``tuple`` (cbor2 decodes keys and set members immutably; sets there decode as
``frozenset``).  A value round-trips to an equal value under these two substitutions.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from datetime import timedelta
from itertools import chain
from typing import Any, Final

import cbor2

from ..errors import DecodeError, EncodeError
from .data import Count, EnumValue, Port, PortProtocol

__all__ = ["PROJECT_TAGS", "TAG_COUNT", "TAG_ENUM", "TAG_PORT", "TAG_TIMESPAN", "DecodeError",
           "EncodeError", "decode", "decode_many", "decode_sequence", "encode", "size_bound", "decode_within", "VALUE_DEPTH", "DECODE_DEPTH"]

TAG_COUNT: Final = 55810
TAG_PORT: Final = 55811
TAG_TIMESPAN: Final = 55812
TAG_ENUM: Final = 55813

#: The project's private CBOR tags (IANA "first come first served" range, unregistered) and
#: their content.  ``docs/data-model.md`` specifies the layout byte for byte.
PROJECT_TAGS: Final[dict[int, str]] = {
    TAG_COUNT: "count: unsigned integer 0..2**64-1",
    TAG_PORT: "port: array [number 0..65535, protocol 0=unknown 1=tcp 2=udp 3=icmp]",
    TAG_TIMESPAN: "timespan: integer, whole microseconds (may be negative)",
    TAG_ENUM: "enum value: non-empty text string, the enum value's name",
}

# Tags cbor2 decodes natively into types outside the data model: refused on decode.
_FOREIGN_TAGS: Final = {4: "decimal fraction", 5: "bigfloat", 25: "string reference",
                        28: "shareable value", 29: "shared reference", 30: "rational",
                        35: "regular expression", 36: "MIME message", 37: "UUID", 100: "date",
                        256: "string reference namespace", 260: "network address (old)",
                        261: "network prefix (old)", 1004: "date string", 43000: "complex number",
                        55799: "self-described CBOR"}


# --- encoding -------------------------------------------------------------------------------

def _encode_timespan(enc: cbor2.CBOREncoder, v: timedelta) -> None:
    enc.encode_semantic(TAG_TIMESPAN, (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds)


_ENCODERS: Final[dict[type, Callable[[cbor2.CBOREncoder, Any], None]]] = {
    Count: lambda enc, v: enc.encode_semantic(TAG_COUNT, v.value),
    Port: lambda enc, v: enc.encode_semantic(TAG_PORT, [v.number, v.protocol.value]),
    EnumValue: lambda enc, v: enc.encode_semantic(TAG_ENUM, v.name),
    timedelta: _encode_timespan,
}


def _default(enc: cbor2.CBOREncoder, value: Any) -> None:
    encoder = _ENCODERS.get(type(value))
    if encoder is None:
        raise EncodeError(f"cannot encode {type(value).__module__}.{type(value).__qualname__}: "
                          "not a Broker data-model type")
    encoder(enc, value)


def encode(value: Any) -> bytes:
    """Encode a data-model value (see :mod:`broker_mqtt.wire.data` for the mapping) to one CBOR item.

    :raises EncodeError: for a value outside the model anywhere in ``value``, e.g. a naive
        datetime or an arbitrary object; the message names the offending type.
    """
    try:
        return cbor2.dumps(value, default=_default)
    except cbor2.CBOREncodeError as exc:
        if "naive datetime" in str(exc):
            raise EncodeError("cannot encode a naive datetime.datetime: timestamps must be "
                              "timezone-aware") from exc
        raise EncodeError(f"cannot encode {type(value).__name__} value: {exc}") from exc


_SCALAR_BOUND: Final[dict[type, int]] = {float: 9, bool: 1, type(None): 1}


def _head(n: int) -> int:
    """The size of a CBOR head holding ``n`` (0 <= n < 2**64)."""
    return 1 if n < 24 else 2 if n < 0x100 else 3 if n < 0x10000 else 5 if n < 0x100000000 else 9


#: levels a value may nest, a container or a tag each (the decoders' limit is 400, :data:`DECODE_DEPTH`:
#: the rest is room for the messages that carry a value, a store's log record in a log message, say)
VALUE_DEPTH: Final = 384
#: levels cbor2's decoder takes nested, a container or a tag each (one more: "maximum container nesting depth")
DECODE_DEPTH: Final = 400


def size_bound(value: Any) -> int:
    """An upper bound of the size of ``value``'s encoding, cheap for the usual values: containers,
    text, bytes and numbers are walked, not encoded (their size is then exact but for floats, which
    count 9 bytes); any other type is encoded and decoded back.

    :raises EncodeError: if ``value`` is outside the data model: what :func:`encode` refuses, what
        every decoder refuses although cbor2 encodes it (a date, a UUID, a Decimal), text with a lone
        surrogate, containers nested more than :data:`VALUE_DEPTH` deep."""
    return _bound(value, VALUE_DEPTH)


def _bound(value: Any, room: int) -> int:
    t = type(value)
    if t is str:
        if value.isascii():
            return _head(len(value)) + len(value)
        try:
            n = len(value.encode())
        except UnicodeEncodeError as exc:
            raise EncodeError(f"cannot encode text with a lone surrogate: {exc}") from exc
        return _head(n) + n
    if t is bytes:
        return _head(len(value)) + len(value)
    if t is int:
        m: int = value if value >= 0 else -1 - value
        if m < 0x10000000000000000:
            return _head(m)
        if room <= 0:  # (a tag is a level for the decoders)
            raise EncodeError(f"cannot encode containers nested more than {VALUE_DEPTH} deep")
        n = (m.bit_length() + 7) // 8
        return 1 + _head(n) + n  # a bignum: a tag and a byte string
    if t is list or t is tuple or t is dict or t is frozenset or t is set:
        tagged = t is frozenset or t is set  # (a set: tag 258 around an array, two levels)
        if room < 1 + tagged:
            raise EncodeError(f"cannot encode containers nested more than {VALUE_DEPTH} deep")
        room -= 1 + tagged
        total = _head(len(value)) + (3 if tagged else 0)
        for v in (value if t is not dict else chain.from_iterable(value.items())):
            tv = type(v)  # (short text and ints inline: no call for the usual items)
            if tv is str and v.isascii():
                n = len(v)
                total += n + (1 if n < 24 else 2 if n < 0x100 else 3 if n < 0x10000 else 5 if n < 0x100000000 else 9)
            elif tv is int and -0x100000000 < v < 0x100000000:
                m = v if v >= 0 else -1 - v
                total += 1 if m < 24 else 2 if m < 0x100 else 3 if m < 0x10000 else 5
            else:
                total += _bound(v, room)
        return total
    bound = _SCALAR_BOUND.get(t)
    if bound is not None:
        return bound
    encoded = encode(value)
    try:
        decode_within(encoded, room)
    except DecodeError as exc:
        raise EncodeError(f"cannot encode {type(value).__name__} value: no decoder takes it back ({exc})") from exc
    return len(encoded)


def decode_within(data: bytes, levels: int) -> Any:
    """:func:`decode` of an item that may nest ``levels`` levels (containers and tags, as the decoders
    count them: ``VALUE_DEPTH`` for a value that messages carry), no more: it is decoded behind
    ``DECODE_DEPTH - levels`` one-item array heads, as deep as a receiver's decoder would see it.

    :raises DecodeError: as :func:`decode`, and for an item nested past ``levels``."""
    value = decode(b"\x81" * (DECODE_DEPTH - levels) + data)
    for _ in range(DECODE_DEPTH - levels):
        value = value[0]
    return value


# --- decoding -------------------------------------------------------------------------------

def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _decode_count(v: Any, immutable: bool) -> Count:
    if not _is_int(v):
        raise DecodeError(f"count tag {TAG_COUNT} must hold an unsigned integer, got {type(v).__name__}")
    return Count(v)


def _decode_port(v: Any, immutable: bool) -> Port:
    if not (isinstance(v, (list, tuple)) and len(v) == 2 and _is_int(v[0]) and _is_int(v[1])):
        raise DecodeError(f"port tag {TAG_PORT} must hold [number, protocol], got {v!r:.60}")
    try:
        return Port(v[0], PortProtocol(v[1]))
    except ValueError as exc:
        raise DecodeError(f"port tag {TAG_PORT}: {exc}") from None


def _decode_timespan(v: Any, immutable: bool) -> timedelta:
    if not _is_int(v):
        raise DecodeError(f"timespan tag {TAG_TIMESPAN} must hold an integer, got {type(v).__name__}")
    try:
        return timedelta(microseconds=v)
    except OverflowError:
        raise DecodeError(f"timespan tag {TAG_TIMESPAN}: {v} microseconds is out of range") from None


def _decode_enum(v: Any, immutable: bool) -> EnumValue:
    if not isinstance(v, str) or not v:
        raise DecodeError(f"enum tag {TAG_ENUM} must hold a non-empty text string, got {v!r:.60}")
    return EnumValue(v)


def _refuse(tag: int, what: str) -> Callable[[Any, bool], Any]:
    def refuse(v: Any, immutable: bool) -> Any:
        raise DecodeError(f"CBOR tag {tag} ({what}) is outside the Broker data model")
    return refuse


def _unknown_tag(tag: cbor2.CBORTag, immutable: bool) -> Any:
    raise DecodeError(f"unknown CBOR tag {tag.tag}")


_SEMANTIC: Final = {TAG_COUNT: _decode_count, TAG_PORT: _decode_port,
                    TAG_TIMESPAN: _decode_timespan, TAG_ENUM: _decode_enum,
                    **{t: _refuse(t, w) for t, w in _FOREIGN_TAGS.items()}}
_OPTS: Final[dict[str, Any]] = {"semantic_decoders": _SEMANTIC, "tag_hook": _unknown_tag}
_UNDEFINED: Final = cbor2.undefined


def _why(exc: BaseException) -> str:
    """cbor2 wraps hook errors in a generic CBORDecodeError: put the cause's message first."""
    cause = exc.__cause__
    return f"{cause} ({exc})" if cause is not None else str(exc)


def _stream(data: bytes) -> tuple[io.BytesIO, cbor2.CBORDecoder]:
    fp = io.BytesIO(data)
    return fp, cbor2.CBORDecoder(fp, **_OPTS)


def _next_item(fp: io.BytesIO, dec: cbor2.CBORDecoder, end: int) -> Any:
    start = fp.tell()
    try:
        return dec.decode()
    except cbor2.CBORDecodeEOF:
        raise DecodeError(f"truncated input: item at byte {start} runs past the end ({end} bytes)") from None
    except (cbor2.CBORDecodeError, RecursionError) as exc:
        raise DecodeError(f"invalid item at byte {start}: {_why(exc)}") from None


# The simple values 0..19 (bytes 0xe0..0xf3): the marks tried when ``data`` holds 0xf7.
_SIMPLE_MARKS: Final = tuple((0xE0 + k, bytes((0xE0 + k,)), k) for k in range(20))
_SIMPLE: Final = cbor2.CBORSimpleValue


def decode(data: bytes | bytearray | memoryview) -> Any:
    """Decode exactly one CBOR item holding a data-model value.

    :raises DecodeError: for empty, truncated or malformed input, an unknown or out-of-model
        tag, bad tag contents, or bytes left after the item; the message gives the offset.
    """
    if type(data) is not bytes:
        data = bytes(data)
    try:
        if 0xF7 not in data:  # (an int needle: 5x faster than b"\xf7" on CPython 3.11)
            value, end = cbor2.loads(b"\x82" + data + b"\xf7", semantic_decoders=_SEMANTIC,
                                     tag_hook=_unknown_tag)
            if end is _UNDEFINED:
                return value
        else:
            for byte, mark, k in _SIMPLE_MARKS:
                if byte not in data:
                    value, end = cbor2.loads(b"\x82" + data + mark, semantic_decoders=_SEMANTIC,
                                             tag_hook=_unknown_tag)
                    if type(end) is _SIMPLE and end.value == k:
                        return value
                    break
    except (cbor2.CBORDecodeError, RecursionError):
        pass  # the exact path below produces the precise message
    if not data:
        raise DecodeError("empty input: expected one CBOR item")
    fp, dec = _stream(data)
    value = _next_item(fp, dec, len(data))
    if fp.tell() != len(data):
        raise DecodeError(f"trailing bytes: item ends at byte {fp.tell()} of {len(data)}")
    return value


def _array_head(n: int) -> bytes:
    """The canonical head of a CBOR array of ``n`` items."""
    return bytes((0x80 | n,)) if n < 24 else b"\x98" + n.to_bytes(1, "big") if n < 0x100 else \
        b"\x99" + n.to_bytes(2, "big") if n < 0x10000 else b"\x9a" + n.to_bytes(4, "big") if n < 1 << 32 \
        else b"\x9b" + n.to_bytes(8, "big")


def _decode_marked(clean: list[bytes]) -> list[Any] | None:
    """The values of ``clean`` (non-empty payloads holding no 0xf7) in one call, or None."""
    n = len(clean)
    try:
        items: list[Any] = cbor2.loads(_array_head(2 * n) + b"\xf7".join(clean) + b"\xf7",
                            semantic_decoders=_SEMANTIC, tag_hook=_unknown_tag)
    except (cbor2.CBORDecodeError, RecursionError):
        return None  # one of them is malformed: each is decoded alone
    if {*map(id, items[1::2])} != _UNDEFINED_IDS:  # identity: CBORSimpleValue(0) == 0, say
        return None
    return items[0::2]


_UNDEFINED_IDS: Final = {id(_UNDEFINED)}


def _decode_or_error(data: bytes) -> Any:
    try:
        return decode(data)
    except DecodeError as exc:
        return exc


def decode_many(payloads: Sequence[bytes]) -> list[Any]:
    """Decode each payload as :func:`decode` does; a malformed one's :class:`DecodeError` is
    returned in its place instead of raised (no data-model value is an exception).

    ``decode_many(ps)[i]`` is ``decode(ps[i])`` or the error it raises, exactly; one C call
    decodes most of the batch (see the module notes), so this is the cheap way to decode the
    payloads of one PUBLISH. Never raises :class:`DecodeError`.
    """
    if not payloads:
        return []
    clean = [p for p in payloads if p and 0xF7 not in p]
    values = _decode_marked(clean) if clean else []
    if values is None:
        return [_decode_or_error(p) for p in payloads]
    if len(clean) == len(payloads):
        return values
    it = iter(values)
    return [next(it) if p and 0xF7 not in p else _decode_or_error(p) for p in payloads]


def decode_sequence(data: bytes | bytearray | memoryview) -> list[Any]:
    """Decode a CBOR sequence (RFC 8742): zero or more concatenated items, in order.

    :raises DecodeError: as :func:`decode`, for the first bad item; its offset is in the message.
    """
    data = bytes(data)
    fp, dec = _stream(data)
    out = []
    while fp.tell() < len(data):
        out.append(_next_item(fp, dec, len(data)))
    return out
