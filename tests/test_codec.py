"""Tests for broker_mqtt.wire.codec and broker_mqtt.wire.data: round-trips, wire forms, malformed input."""

from __future__ import annotations

import decimal
import fractions
import ipaddress
import math
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_mqtt.wire.codec import (
    DECODE_DEPTH,
    PROJECT_TAGS,
    VALUE_DEPTH,
    DecodeError,
    EncodeError,
    decode,
    decode_many,
    decode_sequence,
    encode,
    size_bound,
)
from broker_mqtt.wire.data import Count, EnumValue, Port, PortProtocol

# The composite strategies below have long reprs; hypothesis warns when it renders one.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

# --- strategies -----------------------------------------------------------------------------

counts = st.integers(0, 2**64 - 1).map(Count)
ports = st.builds(Port, st.integers(0, 65535), st.sampled_from(PortProtocol))
enums = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)?", fullmatch=True).map(EnumValue)
addresses = st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6))


def _network(address: ipaddress.IPv4Address | ipaddress.IPv6Address, prefix: int) -> Any:
    return ipaddress.ip_network((address, prefix), strict=False)


subnets = st.one_of(st.builds(_network, st.ip_addresses(v=4), st.integers(0, 32)),
                    st.builds(_network, st.ip_addresses(v=6), st.integers(0, 128)))
offsets = st.integers(-1439, 1439).map(lambda m: timezone(timedelta(minutes=m)))
timestamps = st.datetimes(timezones=offsets)
timespans = st.timedeltas()

hashable_leaves = st.one_of(
    st.none(), st.booleans(), counts, st.integers(), st.floats(allow_nan=False), st.text(), st.binary(),
    addresses, subnets, ports, timestamps, timespans, enums,
)
hashables = st.deferred(lambda: st.recursive(
    hashable_leaves,
    lambda inner: st.one_of(st.tuples(inner, inner), st.lists(inner, max_size=3).map(tuple),
                            st.frozensets(inner, max_size=3)),
    max_leaves=8,
))
leaves = st.one_of(hashable_leaves, st.floats())
values = st.deferred(lambda: st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(hashables, inner, max_size=4),
        st.sets(hashables, max_size=4),
        st.frozensets(hashables, max_size=4),
        st.tuples(inner, inner),
    ),
    max_leaves=20,
))


def expected(v: Any, hashed: bool = False) -> Any:
    """What decode(encode(v)) must return: tuples become lists except in keys and set members."""
    if isinstance(v, (list, tuple)):
        items = [expected(x, hashed) for x in v]
        return tuple(items) if hashed else items
    if isinstance(v, dict):
        return {expected(k, True): expected(x) for k, x in v.items()}
    if isinstance(v, (set, frozenset)):
        members = {expected(x, True) for x in v}
        return frozenset(members) if hashed else members
    return v


def same(a: Any, b: Any) -> bool:
    """Type-strict structural equality (1 != 1.0 != True, tuple != list, offsets must match)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(k, next(j for j in b if j == k)) and same(a[k], b[k])
                                            for k in a)
    if isinstance(a, (set, frozenset)):
        return a == b and all(any(same(x, y) for y in b) for x in a)
    if isinstance(a, datetime):
        return a == b and a.utcoffset() == b.utcoffset()
    return bool(a == b)


def roundtrip(v: Any) -> Any:
    out = decode(encode(v))
    assert same(out, expected(v)), (v, out)
    return out


# --- round-trips ----------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", [
    st.none(), st.booleans(), counts, st.integers(), st.floats(), st.text(), st.binary(), addresses,
    subnets, ports, timestamps, timespans, enums,
], ids=lambda s: repr(s)[:40])
@settings(deadline=None)
@given(data=st.data())
def test_roundtrip_each_type(strategy: st.SearchStrategy[Any], data: st.DataObject) -> None:
    roundtrip(data.draw(strategy))


@settings(max_examples=300, deadline=None)
@given(values)
def test_roundtrip_nested(v: Any) -> None:
    roundtrip(v)


@settings(deadline=None)
@given(st.dictionaries(hashables, values, max_size=5))
def test_roundtrip_tables_with_composite_keys(v: dict[Any, Any]) -> None:
    roundtrip(v)


def test_nested_structures_explicitly() -> None:
    v = {
        (1, "a"): [{Count(1): {frozenset({1, 2}), frozenset()}}],
        frozenset({(1, 2), (3, 4)}): {ipaddress.ip_address("::1"): Port(53, PortProtocol.UDP)},
        Count(7): [{"x": timedelta(microseconds=-1)}, {EnumValue("Conn::LOG"): None}],
    }
    out = roundtrip(v)
    assert isinstance(out[(1, "a")], list)
    inner = out[(1, "a")][0][Count(1)]
    assert isinstance(inner, set) and all(isinstance(m, frozenset) for m in inner)


def test_containers_after_the_first_item_of_a_table_value_stay_mutable() -> None:
    # cbor2 6.0.0 decoded these immutably ({1: [1, ()]}): pyproject requires cbor2 >= 6.1
    for v in ({1: [1, []]}, {None: [None, []]}, {"k": [0, {"a": 1}]}):
        out = decode(encode(v))
        assert out == v and type(out[next(iter(v))][1]) is type(next(iter(v.values()))[1]), out


def test_tuple_rule() -> None:
    assert decode(encode((1, 2))) == [1, 2]
    assert decode(encode([(1, 2)])) == [[1, 2]]
    assert decode(encode({(1, 2): (3, 4)})) == {(1, 2): [3, 4]}
    assert decode(encode({(1, (2, 3))})) == {(1, (2, 3))}


def test_timestamp_keeps_offset_and_microseconds() -> None:
    ts = datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-9, minutes=-30)))
    out = decode(encode(ts))
    assert out == ts and out.utcoffset() == ts.utcoffset() and out.microsecond == 999999


def test_count_is_distinct_from_integer() -> None:
    out = decode(encode({Count(5): "count", 5: "integer"}))
    assert out == {Count(5): "count", 5: "integer"}
    assert int(Count(5)) == 5 and [10, 11, 12][Count(1)] == 11


# --- wire forms -----------------------------------------------------------------------------

def _tag_of(b: bytes) -> int:
    item = cbor2.loads(b, tag_hook=lambda tag, immutable: tag, semantic_decoders={
        t: (lambda t: lambda v, imm: cbor2.CBORTag(t, v))(t)  # noqa: B023 - t is bound by the outer call
        for t in (0, 52, 54, 258)})
    assert isinstance(item, cbor2.CBORTag)
    return item.tag


@pytest.mark.parametrize(("value", "tag", "prefix"), [
    (ipaddress.ip_address("192.0.2.1"), 52, "d83444c0000201"),
    (ipaddress.ip_address("2001:db8::1"), 54, "d83650"),
    (ipaddress.ip_network("192.0.2.0/24"), 52, "d834821818"),
    (ipaddress.ip_network("2001:db8::/32"), 54, "d836821820"),
    ({1}, 258, "d9010281"),
    (frozenset({1}), 258, "d9010281"),
    (datetime(2020, 1, 1, tzinfo=UTC), 0, "c0"),
])
def test_standard_tags(value: Any, tag: int, prefix: str) -> None:
    b = encode(value)
    assert b.hex().startswith(prefix)
    assert _tag_of(b) == tag


@pytest.mark.parametrize(("value", "hexed"), [
    (Count(1), "d9da0201"),
    (Port(443, PortProtocol.TCP), "d9da03821901bb01"),
    (timedelta(seconds=1, microseconds=5), "d9da041a000f4245"),
    (timedelta(microseconds=-1), "d9da0420"),
    (EnumValue("A"), "d9da056141"),
])
def test_project_tag_layout(value: Any, hexed: str) -> None:
    assert encode(value).hex() == hexed
    assert decode(bytes.fromhex(hexed)) == value


def test_project_tags_table() -> None:
    assert sorted(PROJECT_TAGS) == [55810, 55811, 55812, 55813]


# --- malformed input ------------------------------------------------------------------------

@settings(deadline=None)
@given(values)
def test_every_truncation_raises_decode_error(v: Any) -> None:
    b = encode(v)
    for n in range(len(b)):
        with pytest.raises(DecodeError):
            decode(b[:n])


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_is_decode_error_or_value(b: bytes) -> None:
    try:
        decode(b)
    except DecodeError:
        pass


@settings(deadline=None)
@given(values, st.binary(min_size=1, max_size=8))
def test_trailing_bytes(v: Any, tail: bytes) -> None:
    with pytest.raises(DecodeError, match="trailing bytes"):
        decode(encode(v) + tail)


@pytest.mark.parametrize("hexed", [
    "d9da0163616263",          # tag 55809: not ours
    "d9da0263616263",          # count holding a string
    "d9da0220",                # negative count
    "d9da0363616263",          # port holding a string
    "d9da03821a0001000001",    # port number 65536
    "d9da0382185009",          # unknown protocol code
    "d9da04f93c00",            # timespan holding a float
    "d9da0560",                # empty enum name
    "d9da0501",                # enum holding an int
    "d81e820102",              # rational: outside the model
    "d8184101",                # embedded CBOR: unknown tag
    "d9010201",                # set tag holding an int
    "d83401",                  # address tag holding an int
])
def test_bad_tags(hexed: str) -> None:
    with pytest.raises(DecodeError):
        decode(bytes.fromhex(hexed))


def test_decode_error_messages() -> None:
    with pytest.raises(DecodeError, match="unknown CBOR tag 55809"):
        decode(bytes.fromhex("d9da0101"))
    with pytest.raises(DecodeError, match="truncated"):
        decode(b"\x82\x01")
    with pytest.raises(DecodeError, match="empty"):
        decode(b"")
    with pytest.raises(DecodeError, match="at byte 2"):
        decode_sequence(b"\x01\x02\x82\x01")


def test_decode_accepts_buffers() -> None:
    b = encode([1, "x", Count(2)])
    assert decode(bytearray(b)) == decode(memoryview(b)) == [1, "x", Count(2)]
    # 0xf7 inside the data takes the exact path
    assert decode(encode([247, b"\xf7"])) == [247, b"\xf7"]


def test_decode_with_0xf7_inside_uses_another_mark() -> None:
    # 0xf7 in the data: the first simple-value byte the data lacks (0xe0) marks the end
    assert decode(encode({"n": 0xF7, "f": 0.1})) == {"n": 0xF7, "f": 0.1}
    with pytest.raises(DecodeError, match="trailing bytes"):
        decode(encode(0xF7) + b"\xe0")  # our own mark byte as a trailing item
    with pytest.raises(DecodeError, match="trailing bytes"):
        decode(encode(0xF7) + b"\xf7")
    with pytest.raises(DecodeError, match="truncated"):
        decode(b"\x82\x18\xf7")  # the mark would complete the array
    every_mark = bytes([0xF7, *range(0xE0, 0xF4)])  # holds every mark byte: the exact path
    assert decode(encode(every_mark)) == every_mark
    with pytest.raises(DecodeError, match="trailing bytes"):
        decode(encode(every_mark) + b"\x01")


def _outcome(p: bytes) -> Any:
    try:
        return decode(p)
    except DecodeError as exc:
        return exc


def _same_outcome(got: Any, want: Any) -> bool:
    if isinstance(want, DecodeError):
        return type(got) is DecodeError and str(got) == str(want)
    return same(got, want)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(values.map(encode), st.binary(max_size=24), st.just(b""),
                          values.map(lambda v: encode(v)[:-1]), values.map(lambda v: encode(v) + b"\xf7")),
                max_size=12))
def test_decode_many_is_decode_of_each(payloads: list[bytes]) -> None:
    got = decode_many(payloads)
    assert len(got) == len(payloads)
    for g, p in zip(got, payloads, strict=True):
        assert _same_outcome(g, _outcome(p)), (p, g)


@pytest.mark.parametrize("payloads", [
    [b"\x82\x01", b"\x02"],                  # misaligned: the first is truncated, the second completes it
    [b"\x81", b"\x01"],                       # the mark would complete the first
    [b"\x01\x02", b"\x03"],                  # two items in one payload
    [b"\x9f", b"\xff"],                       # an indefinite array split over two payloads
    [b"\xd9\xda\x02", b"\x05"],             # a tag and its content split
    [encode(1), b"", encode(2)],              # an empty payload between good ones
    [encode(1), encode(0xF7), encode("x")],   # 0xf7 in one: decoded alone
])
def test_decode_many_keeps_payload_boundaries(payloads: list[bytes]) -> None:
    got = decode_many(payloads)
    assert len(got) == len(payloads)
    for g, p in zip(got, payloads, strict=True):
        assert _same_outcome(g, _outcome(p)), (p, g)


def test_decode_many_rows() -> None:
    rows = [{"id": i, "device": f"device-{i % 16}", "value": i * 0.25,
             "ts": datetime.fromtimestamp(1_700_000_000 + i, UTC), "$spark": ["job", 0, 1, i]}
            for i in range(0, 600_000, 997)]
    got = decode_many([encode(r) for r in rows])
    assert all(same(g, r) for g, r in zip(got, rows, strict=True))
    assert all(g["ts"].tzinfo is UTC for g in got)
    assert decode_many([]) == []


# --- encode errors and helper types ---------------------------------------------------------

@pytest.mark.parametrize("value", [
    datetime(2020, 1, 1), [datetime(2020, 1, 1)], object(), {"k": object()}, {1: [2, {3}, object()]},
])
def test_encode_error(value: Any) -> None:
    with pytest.raises(EncodeError):
        encode(value)


def test_encode_error_names_type() -> None:
    class Gadget:
        pass
    with pytest.raises(EncodeError, match="Gadget"):
        encode([Gadget()])
    with pytest.raises(EncodeError, match="naive datetime"):
        encode({"ts": datetime(2020, 1, 1)})


def test_helper_validation() -> None:
    with pytest.raises(ValueError):
        Count(-1)
    with pytest.raises(ValueError):
        Count(2**64)
    with pytest.raises(TypeError):
        Count(True)
    with pytest.raises(ValueError):
        Port(65536, PortProtocol.TCP)
    with pytest.raises(TypeError):
        Port(80, "tcp")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        EnumValue("")
    assert str(Port(80, PortProtocol.TCP)) == "80/tcp"


@settings(deadline=None)
@given(st.lists(values, max_size=5))
def test_decode_sequence(items: list[Any]) -> None:
    data = b"".join(encode(v) for v in items)
    out = decode_sequence(data)
    assert len(out) == len(items) and all(same(o, expected(v)) for o, v in zip(out, items, strict=True))


# --- size_bound --------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(values)
def test_size_bound_is_at_least_the_encoding(v: Any) -> None:
    assert size_bound(v) >= len(encode(v))


@pytest.mark.parametrize("value", [
    "a" * 70_000, "é" * 3, "\U0001F600", b"", 2**64 - 1, 2**64, -(2**64) - 1, 2**300, [[[1.5, None, True]]],
    {(1, "a"): {"k": b"v"}}, ("x", Count(3), Port(22, PortProtocol.TCP), timedelta(seconds=-1)),
])
def test_size_bound_of_values_it_walks(value: Any) -> None:
    n = len(encode(value))
    assert n <= size_bound(value) <= n + 8  # (exact but for floats)


@pytest.mark.parametrize("value", [
    datetime(2020, 1, 1).date(), uuid.UUID(int=5), decimal.Decimal("1.5"), fractions.Fraction(1, 3), "\ud800",
    ["ok", {"k": decimal.Decimal(1)}], object(), 1 + 2j, [{"k": complex(0, 1)}],
])
def test_size_bound_refuses_what_no_decoder_takes_back(value: Any) -> None:
    with pytest.raises(EncodeError):
        size_bound(value)


def test_size_bound_counts_nesting_inside_sets() -> None:
    """A set is walked like the containers in it: a tuple 398 deep inside one passed (403) and
    then failed inside a log record; sizes stay exact."""
    deep: Any = 0
    for _ in range(398):
        deep = (deep,)
    with pytest.raises(EncodeError, match="nested"):
        size_bound(frozenset({deep}))
    for value in ({1, 2}, frozenset(), frozenset({(1, "a"), (2, "b")}), [{frozenset({3})}]):
        assert size_bound(value) == len(encode(value))


class _Items(list[Any]):
    """A list subclass: encoded as an array, walked by encoding it (not by the fast path)."""


def _wrapped(kind: str, depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"list": lambda v: [v], "tuple": lambda v: (v,), "set": lambda v: frozenset({v}),
                 "dict": lambda v: {"k": v}, "subclass": lambda v: _Items([v])}[kind](value)
    return value


@pytest.mark.parametrize("kind", ["list", "tuple", "set", "dict", "subclass"])
@pytest.mark.parametrize("leaf", [0, "x", 2**70, Count(5), Port(80, PortProtocol.TCP), timedelta(seconds=1),
                                  EnumValue("a::b"), (1, 2), frozenset({1})], ids=repr)
def test_size_bound_refuses_exactly_what_decoders_refuse_inside_a_message(kind: str, leaf: Any) -> None:
    """Near the limit, a value passes the size bound exactly when the decoders take it back behind
    the levels a message adds (DECODE_DEPTH - VALUE_DEPTH of them): tags count as levels for the
    decoders (a set's, a Count's, a bignum's); before, the walk counted containers only, and passed
    values (a set of sets 200 deep, 384 lists around a Count) that no receiver could decode."""
    room = b"\x81" * (DECODE_DEPTH - VALUE_DEPTH)
    lo, hi = (185, 200) if kind == "set" else (376, 390)
    for depth in range(lo, hi):
        value = _wrapped(kind, depth, leaf)
        try:
            decode(room + encode(value))
            taken = True
        except DecodeError:
            taken = False
        try:
            size_bound(value)
            bounded = True
        except EncodeError:
            bounded = False
        assert bounded == taken, (kind, depth, leaf)


@pytest.mark.parametrize("value", [1 + 2j, ["x", {"k": complex(0, 1)}]], ids=repr)
def test_a_complex_number_is_outside_the_model_and_decoders_refuse_it(value: Any) -> None:
    """cbor2 encodes and decodes ``complex`` natively (tag 43000); it is not a Broker data-model type,
    so a peer's complex value is a decode error, as a peer's Decimal or UUID is."""
    with pytest.raises(DecodeError, match="43000"):
        decode(encode(value))
