"""The Sparkplug B codec (broker_mqtt/spark/sparkplug*.py): cross-checked against Google's protobuf
runtime (the Tahu descriptors built at run time), the decoder's birth/data/death state, hostile
bytes, topics and commands. No Spark, no broker."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_mqtt.errors import DecodeError, UsageError
from broker_mqtt.spark.sparkplug import (
    DataType,
    Metric,
    Payload,
    SparkplugDecoder,
    SparkplugTopic,
    command_payload,
    command_topic,
    decode_payload,
    encode_payload,
)

descriptor_pb2 = pytest.importorskip("google.protobuf.descriptor_pb2")
from google.protobuf import descriptor_pool, message_factory  # noqa: E402

F = descriptor_pb2.FieldDescriptorProto


def _build() -> dict[str, Any]:
    """The Sparkplug B messages of Tahu's sparkplug_b.proto (the fields the codec reads), plus an
    ``Extra`` Payload look-alike with fields of every wire type the codec must skip."""
    fdp = descriptor_pb2.FileDescriptorProto(name="sparkplug_test.proto", package="sptest", syntax="proto2")
    opt, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED

    def message(name: str, fields: list[tuple[str, int, int, int, str | None]], oneof: tuple[int, ...] = ()) -> None:
        msg = fdp.message_type.add(name=name)
        if oneof:
            msg.oneof_decl.add(name="value")
        for fname, number, ftype, label, type_name in fields:
            f = msg.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = f".sptest.{type_name}"
            if number in oneof:
                f.oneof_index = 0

    message("DataSetValue", [("int_value", 1, F.TYPE_UINT32, opt, None), ("long_value", 2, F.TYPE_UINT64, opt, None),
                             ("float_value", 3, F.TYPE_FLOAT, opt, None), ("double_value", 4, F.TYPE_DOUBLE, opt, None),
                             ("boolean_value", 5, F.TYPE_BOOL, opt, None), ("string_value", 6, F.TYPE_STRING, opt, None)],
            oneof=(1, 2, 3, 4, 5, 6))
    message("Row", [("elements", 1, F.TYPE_MESSAGE, rep, "DataSetValue")])
    message("DataSet", [("num_of_columns", 1, F.TYPE_UINT64, opt, None), ("columns", 2, F.TYPE_STRING, rep, None),
                        ("types", 3, F.TYPE_UINT32, rep, None), ("rows", 4, F.TYPE_MESSAGE, rep, "Row")])
    message("PropertySet", [("keys", 1, F.TYPE_STRING, rep, None)])
    message("Template", [("version", 1, F.TYPE_STRING, opt, None), ("metrics", 2, F.TYPE_MESSAGE, rep, "Metric"),
                         ("template_ref", 4, F.TYPE_STRING, opt, None), ("is_definition", 5, F.TYPE_BOOL, opt, None)])
    message("Metric", [
        ("name", 1, F.TYPE_STRING, opt, None), ("alias", 2, F.TYPE_UINT64, opt, None),
        ("timestamp", 3, F.TYPE_UINT64, opt, None), ("datatype", 4, F.TYPE_UINT32, opt, None),
        ("is_historical", 5, F.TYPE_BOOL, opt, None), ("is_transient", 6, F.TYPE_BOOL, opt, None),
        ("is_null", 7, F.TYPE_BOOL, opt, None), ("properties", 9, F.TYPE_MESSAGE, opt, "PropertySet"),
        ("int_value", 10, F.TYPE_UINT32, opt, None), ("long_value", 11, F.TYPE_UINT64, opt, None),
        ("float_value", 12, F.TYPE_FLOAT, opt, None), ("double_value", 13, F.TYPE_DOUBLE, opt, None),
        ("boolean_value", 14, F.TYPE_BOOL, opt, None), ("string_value", 15, F.TYPE_STRING, opt, None),
        ("bytes_value", 16, F.TYPE_BYTES, opt, None), ("dataset_value", 17, F.TYPE_MESSAGE, opt, "DataSet"),
        ("template_value", 18, F.TYPE_MESSAGE, opt, "Template"),
        # unknown to the codec: every wire type, to be skipped
        ("x_varint", 100, F.TYPE_UINT64, opt, None), ("x_fixed64", 101, F.TYPE_FIXED64, opt, None),
        ("x_fixed32", 102, F.TYPE_FIXED32, opt, None), ("x_bytes", 103, F.TYPE_BYTES, opt, None),
    ], oneof=tuple(range(10, 19)))
    message("Payload", [("timestamp", 1, F.TYPE_UINT64, opt, None), ("metrics", 2, F.TYPE_MESSAGE, rep, "Metric"),
                        ("seq", 3, F.TYPE_UINT64, opt, None), ("uuid", 4, F.TYPE_STRING, opt, None),
                        ("body", 5, F.TYPE_BYTES, opt, None), ("x_bytes", 99, F.TYPE_BYTES, opt, None),
                        ("x_fixed32", 98, F.TYPE_FIXED32, opt, None)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"sptest.{name}"))
            for name in ("Payload", "Metric", "DataSet", "Template")}


PB = _build()


def google_payload(**fields: Any) -> Any:
    return PB["Payload"](**fields)


# --- cross-checks with Google's protobuf ----------------------------------------------------------

def test_google_encoded_scalars_decode_with_signs_and_types() -> None:
    pb = google_payload(timestamp=1_700_000_000_000, seq=7, uuid="u-1", body=b"\x00\x01")
    cases = [
        (DataType.Int8, "int_value", (-5) & 0xFFFFFFFF, -5),
        (DataType.Int8, "int_value", 0xFB, -5),  # Tahu's Python client sends Int8 at its own width
        (DataType.Int16, "int_value", (-300) & 0xFFFFFFFF, -300),
        (DataType.Int32, "int_value", (-(2**31)) & 0xFFFFFFFF, -(2**31)),
        (DataType.Int64, "long_value", (-(2**40)) & (2**64 - 1), -(2**40)),
        (DataType.UInt32, "int_value", 2**32 - 1, 2**32 - 1),
        (DataType.UInt64, "long_value", 2**64 - 1, 2**64 - 1),
        (DataType.Float, "float_value", 1.5, 1.5),
        (DataType.Double, "double_value", -2.25, -2.25),
        (DataType.Boolean, "boolean_value", True, True),
        (DataType.String, "string_value", "héllo", "héllo"),
        (DataType.UUID, "string_value", "0b7e", "0b7e"),
        (DataType.DateTime, "long_value", 1_700_000_000_123, 1_700_000_000_123),
        (DataType.Bytes, "bytes_value", b"\xff\x00", b"\xff\x00"),
    ]
    for i, (dt, fname, raw, _) in enumerate(cases):
        m = pb.metrics.add(name=f"m{i}", alias=i, datatype=int(dt), x_varint=2**63, x_fixed64=1,
                           x_fixed32=2, x_bytes=b"skip me")
        setattr(m, fname, raw)
    pb.metrics.add(name="nothing", datatype=int(DataType.Int32), is_null=True, is_historical=True)
    pb.x_bytes = b"unknown"
    pb.x_fixed32 = 9
    decoded = decode_payload(pb.SerializeToString())
    assert (decoded.timestamp, decoded.seq, decoded.uuid, decoded.body) == (1_700_000_000_000, 7, "u-1", b"\x00\x01")
    assert [m.value for m in decoded.metrics[:-1]] == [want for *_, want in cases]
    assert [m.alias for m in decoded.metrics[:-1]] == list(range(len(cases)))
    null = decoded.metrics[-1]
    assert (null.name, null.is_null, null.is_historical, null.value) == ("nothing", True, True, None)


def test_google_encoded_arrays_dataset_and_template() -> None:
    pb = google_payload()
    pb.metrics.add(name="i16", datatype=int(DataType.Int16Array), bytes_value=struct.pack("<3h", -1, 2, -32768))
    pb.metrics.add(name="u64", datatype=int(DataType.UInt64Array), bytes_value=struct.pack("<2Q", 52, 2**64 - 1))
    pb.metrics.add(name="f", datatype=int(DataType.FloatArray), bytes_value=struct.pack("<2f", 1.5, -0.25))
    # the specification's example: 12 booleans, MSB first
    pb.metrics.add(name="b", datatype=int(DataType.BooleanArray), bytes_value=bytes([12, 0, 0, 0, 0x34, 0xD0]))
    pb.metrics.add(name="s", datatype=int(DataType.StringArray), bytes_value=b"ABC\x00hello\x00")
    ds = pb.metrics.add(name="ds", datatype=int(DataType.DataSet)).dataset_value
    ds.num_of_columns = 2
    ds.columns.extend(["a", "b"])
    ds.types.extend([int(DataType.Int8), int(DataType.String)])
    row = ds.rows.add()
    row.elements.add(int_value=(-3) & 0xFFFFFFFF)
    row.elements.add(string_value="x")
    tpl = pb.metrics.add(name="t", datatype=int(DataType.Template)).template_value
    tpl.version = "v1"
    tpl.template_ref = "Motor"
    tpl.metrics.add(name="rpm", datatype=int(DataType.Int32), int_value=(-7) & 0xFFFFFFFF)
    values = {m.name: m.value for m in decode_payload(pb.SerializeToString()).metrics}
    assert values["i16"] == [-1, 2, -32768]
    assert values["u64"] == [52, 2**64 - 1]
    assert values["f"] == [1.5, -0.25]
    assert values["b"] == [False, False, True, True, False, True, False, False, True, True, False, True]
    assert values["s"] == ["ABC", "hello"]
    assert values["ds"] == {"columns": ["a", "b"], "types": ["Int8", "String"], "rows": [[-3, "x"]]}
    assert values["t"]["template_ref"] == "Motor" and values["t"]["version"] == "v1"
    assert [(m["name"], m["value"]) for m in values["t"]["metrics"]] == [("rpm", -7)]


ints = st.integers


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just(DataType.Int8), ints(-128, 127)), st.tuples(st.just(DataType.Int16), ints(-(2**15), 2**15 - 1)),
    st.tuples(st.just(DataType.Int32), ints(-(2**31), 2**31 - 1)),
    st.tuples(st.just(DataType.Int64), ints(-(2**63), 2**63 - 1)),
    st.tuples(st.just(DataType.UInt64), ints(0, 2**64 - 1)),
    st.tuples(st.just(DataType.Double), st.floats(allow_nan=False)),
    st.tuples(st.just(DataType.Float), st.floats(width=32, allow_nan=False)),
    st.tuples(st.just(DataType.Boolean), st.booleans()),
    st.tuples(st.just(DataType.Text), st.text()),
    st.tuples(st.just(DataType.File), st.binary()),
    st.tuples(st.just(DataType.Int32Array), st.lists(ints(-(2**31), 2**31 - 1), max_size=5)),
    st.tuples(st.just(DataType.DoubleArray), st.lists(st.floats(allow_nan=False), max_size=5)),
    st.tuples(st.just(DataType.BooleanArray), st.lists(st.booleans(), max_size=20)),
    st.tuples(st.just(DataType.StringArray), st.lists(st.text().filter(lambda s: "\x00" not in s), max_size=4)),
    st.tuples(st.just(DataType.Int64), st.none()),
), max_size=6), st.none() | ints(0, 255), st.none() | ints(0, 2**64 - 1))
def test_round_trip_through_google(values: list[tuple[DataType, Any]], seq: int | None, ts: int | None) -> None:
    metrics = tuple(Metric(f"m{i}", i, ts, int(dt), v, is_null=v is None) for i, (dt, v) in enumerate(values))
    payload = Payload(ts, metrics, seq)
    ours = encode_payload(payload)
    pb = PB["Payload"].FromString(ours)  # Google parses ours ...
    assert len(pb.metrics) == len(metrics)
    assert [m.datatype for m in pb.metrics] == [int(dt) for dt, _ in values]
    assert decode_payload(pb.SerializeToString()) == payload  # ... and ours parses Google's re-encoding
    assert decode_payload(ours) == payload


def test_google_sees_our_twos_complement_and_fields() -> None:
    data = encode_payload(Payload(5, (Metric("a", 1, None, int(DataType.Int8), -1),
                                      Metric("b", None, 9, int(DataType.Int64), -2),
                                      Metric("c", None, None, int(DataType.String), None, is_null=True)), 3, "id"))
    pb = PB["Payload"].FromString(data)
    assert (pb.timestamp, pb.seq, pb.uuid) == (5, 3, "id")
    assert pb.metrics[0].int_value == 0xFFFFFFFF and pb.metrics[0].alias == 1
    assert pb.metrics[1].long_value == 2**64 - 2 and pb.metrics[1].timestamp == 9
    assert pb.metrics[2].is_null and pb.metrics[2].WhichOneof("value") is None


# --- malformed bytes ------------------------------------------------------------------------------

@pytest.mark.parametrize(("data", "why"), [
    (b"\x08\x80", "truncated varint"),
    (b"\x08" + b"\xff" * 10 + b"\x01", "over-long"),
    (b"\x08" + b"\xff" * 9 + b"\x7f", "64 bits"),
    (b"\x0e\x00", "wire type 6"),
    (b"\x12\x05ab", "past the end"),
    (b"\x0a\x01a", "wire type 2, expected 0"),  # timestamp as bytes
    (b"\x12\x03\x10\x01\x00", "field number 0"),
    (b"\x12\x02\x0a\x01", "past the end"),
    (b"\x22\x01\xff", "UTF-8"),
    (b"\x12\x04\x20\x01\x70\x01", "cannot be carried"),  # an Int8 in boolean_value
    (b"\x12\x06\x20\x20\x82\x01\x01\x00", "4-byte count"),  # BooleanArray too short
    (b"\x12\x05\x20\x18\x82\x01\x01\x00", "past the end"),  # the metric is 6 bytes
])
def test_malformed_payloads_raise_decode_error(data: bytes, why: str) -> None:
    with pytest.raises(DecodeError, match=why):
        decode_payload(data)


def test_groups_are_skipped_like_unknown_fields() -> None:
    group = b"\x93\x03" + b"\x08\x05" + b"\x9b\x03\x9c\x03" + b"\x94\x03"  # field 50 holding field 51
    assert decode_payload(b"\x08\x07" + group + b"\x18\x02") == Payload(7, (), 2)
    with pytest.raises(DecodeError, match="closed by end-group"):
        decode_payload(b"\x93\x03\x94\x02")
    with pytest.raises(DecodeError, match="truncated"):
        decode_payload(b"\x93\x03\x08\x05")


def test_deep_template_nesting_is_a_decode_error() -> None:
    assert decode_payload(_deep(3)).metrics[0].value["metrics"][0]["value"]["metrics"][0]["datatype"] == 19
    with pytest.raises(DecodeError, match="nested"):
        decode_payload(_deep(40))


def _deep(levels: int) -> bytes:
    """A payload whose metric holds a template whose metric holds a template ... ``levels`` deep."""
    def varint(n: int) -> bytes:
        out = bytearray()
        while n > 0x7F:
            out.append(n & 0x7F | 0x80)
            n >>= 7
        return bytes(out) + bytes([n])

    def ld(number: int, body: bytes) -> bytes:
        return varint(number << 3 | 2) + varint(len(body)) + body
    metric = b"\x20\x13"
    for _ in range(levels):
        metric = b"\x20\x13" + ld(18, ld(2, metric))
    return ld(2, metric)


def _birth_bytes() -> bytes:
    return encode_payload(Payload(1000, (Metric("bdSeq", None, None, int(DataType.Int64), 3),
                                         Metric("temp", 1, None, int(DataType.Int16), -4),
                                         Metric("arr", 2, None, int(DataType.Int8Array), [-1, 1])), 0))


def test_every_truncation_raises_only_decode_error_and_keeps_state() -> None:
    dec = SparkplugDecoder()
    dec.receive("spBv1.0/g/NBIRTH/n", _birth_bytes())
    pb = PB["Payload"](timestamp=2000, seq=1)
    pb.metrics.add(alias=1, int_value=7)
    pb.metrics.add(alias=2, bytes_value=b"\xff\x01")
    data = pb.SerializeToString()
    assert [r.value for r in SparkplugDecoder().receive("spBv1.0/g/NDATA/n", data)] == [7, b"\xff\x01"]
    before = (dict(dec._nodes["g", "n"].aliases), dec.statistics())
    failures = 0
    for cut in range(len(data)):
        try:
            dec.receive("spBv1.0/g/NDATA/n", data[:cut])
        except DecodeError:
            failures += 1
        else:
            continue
        assert dict(dec._nodes["g", "n"].aliases) == before[0] and dec._nodes["g", "n"].seq == 0
    assert failures > 0 and dec.malformed == failures
    assert dec.seq_gaps == 0


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_decode_error(data: bytes) -> None:
    dec = SparkplugDecoder()
    dec.receive("spBv1.0/g/NBIRTH/n", _birth_bytes())
    snapshot = repr(dec._nodes)
    for topic in ("spBv1.0/g/NDATA/n", "spBv1.0/g/NBIRTH/n", "spBv1.0/g/NDEATH/n"):
        try:
            rows = dec.receive(topic, data)
        except DecodeError:
            assert repr(dec._nodes) == snapshot
        else:
            assert rows and all(r.topic == topic for r in rows)
            snapshot = repr(dec._nodes)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_mutated_valid_payloads_raise_only_decode_error(data: st.DataObject) -> None:
    valid = bytearray(_birth_bytes())
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(valid) - 1))
        valid[i] = data.draw(st.integers(0, 255))
    dec = SparkplugDecoder()
    try:
        rows = dec.receive("spBv1.0/g/NBIRTH/n", bytes(valid))
    except DecodeError:
        assert dec._nodes == {} and dec.malformed == 1
    else:
        assert rows and dec.malformed == 0


# --- the decoder's state --------------------------------------------------------------------------

def _payload(seq: int | None, *metrics: Metric, ts: int = 5000) -> bytes:
    return encode_payload(Payload(ts, metrics, seq))


def test_birth_data_death_with_aliases() -> None:
    dec = SparkplugDecoder()
    rows = dec.receive("spBv1.0/plant/NBIRTH/gw", _payload(
        0, Metric("bdSeq", None, None, int(DataType.Int64), 1), Metric("Node/Temp", 10, 111, int(DataType.Int8), -3)))
    assert [(r.metric, r.alias, r.datatype, r.value, r.online, r.timestamp) for r in rows] == [
        ("bdSeq", None, "Int64", 1, True, 5000), ("Node/Temp", 10, "Int8", -3, True, 111)]
    dec.receive("spBv1.0/plant/DBIRTH/gw/pump", _payload(
        1, Metric("Speed", 20, None, int(DataType.Int32), -100), Metric("Run", 21, None, int(DataType.Boolean), True)))
    assert dec.online("plant", "gw", "pump") is True
    # data by alias alone, no datatype: resolved from the births; Int32 two's complement signed
    pb = PB["Payload"]()
    pb.timestamp, pb.seq = 6000, 2
    pb.metrics.add(alias=20, int_value=0xFFFFFFF0)
    pb.metrics.add(alias=21, timestamp=77, boolean_value=False)
    rows = dec.receive("spBv1.0/plant/DDATA/gw/pump", pb.SerializeToString())
    assert [(r.metric, r.datatype, r.value, r.timestamp, r.seq, r.online) for r in rows] == [
        ("Speed", "Int32", -16, 6000, 2, True), ("Run", "Boolean", False, 77, 2, True)]
    pb = PB["Payload"](timestamp=7000, seq=3)
    pb.metrics.add(alias=10, int_value=0xFF)
    rows = dec.receive("spBv1.0/plant/NDATA/gw", pb.SerializeToString())
    assert (rows[0].metric, rows[0].value, rows[0].device) == ("Node/Temp", -1, None)
    rows = dec.receive("spBv1.0/plant/DDEATH/gw/pump", _payload(4))
    assert [(r.metric, r.online, r.device) for r in rows] == [(None, False, "pump")]
    rows = dec.receive("spBv1.0/plant/NDEATH/gw", _payload(None, Metric("bdSeq", None, None, int(DataType.Int64), 1)))
    assert rows[0].online is False and dec.online("plant", "gw") is False
    assert dec.statistics().seq_gaps == 0 and dec.stale_deaths == 0 and dec.unknown_alias == 0


def test_data_by_name_takes_the_birth_datatype_and_data_before_birth_is_unknown() -> None:
    dec = SparkplugDecoder()
    pb = PB["Payload"](seq=0)
    pb.metrics.add(alias=4, int_value=1)
    rows = dec.receive("spBv1.0/g/DDATA/n/d", pb.SerializeToString())
    assert (rows[0].online, rows[0].metric, rows[0].value) == (None, None, 1) and dec.unknown_alias == 1
    dec.receive("spBv1.0/g/NBIRTH/n", _payload(0))
    dec.receive("spBv1.0/g/DBIRTH/n/d", _payload(1, Metric("Speed", None, None, int(DataType.Int16), 1)))
    pb = PB["Payload"](seq=2)
    pb.metrics.add(name="Speed", int_value=0xFFFF)
    rows = dec.receive("spBv1.0/g/DDATA/n/d", pb.SerializeToString())
    assert (rows[0].metric, rows[0].datatype, rows[0].value, rows[0].online) == ("Speed", "Int16", -1, True)


def test_stale_ndeath_is_ignored_and_counted() -> None:
    dec = SparkplugDecoder()
    dec.receive("spBv1.0/g/NBIRTH/n", _payload(0, Metric("bdSeq", None, None, int(DataType.Int64), 5)))
    dec.receive("spBv1.0/g/DBIRTH/n/d", _payload(1, Metric("x", 1, None, int(DataType.Double), 1.0)))
    rows = dec.receive("spBv1.0/g/NDEATH/n", _payload(None, Metric("bdSeq", None, None, int(DataType.Int64), 4)))
    assert rows[0].online is True and dec.stale_deaths == 1
    assert dec.online("g", "n") is True and dec.online("g", "n", "d") is True
    dec.receive("spBv1.0/g/NDEATH/n", _payload(None, Metric("bdSeq", None, None, int(DataType.Int64), 5)))
    assert dec.online("g", "n") is False and dec.online("g", "n", "d") is False
    assert dec.stale_deaths == 1


def test_seq_gap_and_wrap() -> None:
    dec = SparkplugDecoder()
    dec.receive("spBv1.0/g/NBIRTH/n", _payload(254))
    dec.receive("spBv1.0/g/NDATA/n", _payload(255))
    dec.receive("spBv1.0/g/NDATA/n", _payload(0))  # wraps: no gap
    assert dec.seq_gaps == 0
    dec.receive("spBv1.0/g/NDATA/n", _payload(5))
    assert dec.seq_gaps == 1
    dec.receive("spBv1.0/g/NBIRTH/n", _payload(0))  # a new session restarts the count
    dec.receive("spBv1.0/g/NDATA/n", _payload(1))
    assert dec.seq_gaps == 1
    with pytest.raises(DecodeError, match="seq"):
        dec.receive("spBv1.0/g/NDATA/n", _payload(256))
    assert dec.malformed == 1


def test_unknown_alias_yields_a_row_and_is_counted() -> None:
    dec = SparkplugDecoder()
    dec.receive("spBv1.0/g/NBIRTH/n", _payload(0, Metric("a", 1, None, int(DataType.UInt8), 3)))
    pb = PB["Payload"](seq=1)
    pb.metrics.add(alias=99, long_value=12)
    pb.metrics.add(alias=1, int_value=250)
    rows = dec.receive("spBv1.0/g/NDATA/n", pb.SerializeToString())
    assert [(r.metric, r.alias, r.datatype, r.value) for r in rows] == [(None, 99, None, 12), ("a", 1, "UInt8", 250)]
    assert dec.unknown_alias == 1


def test_a_new_nbirth_voids_old_aliases_and_device_births() -> None:
    dec = SparkplugDecoder()
    dec.receive("spBv1.0/g/NBIRTH/n", _payload(0, Metric("a", 1, None, int(DataType.Int8), 1)))
    dec.receive("spBv1.0/g/DBIRTH/n/d", _payload(1, Metric("b", 2, None, int(DataType.Int8), 1)))
    dec.receive("spBv1.0/g/NBIRTH/n", _payload(0, Metric("c", 3, None, int(DataType.Int8), 1)))
    assert dec.online("g", "n") is True and dec.online("g", "n", "d") is False
    rows = dec.receive("spBv1.0/g/DDATA/n/d", _payload(1, Metric(None, 2, None, None, 5)))
    assert rows[0].metric is None and dec.unknown_alias == 1


def test_wrong_field_for_the_birth_datatype_is_malformed_and_keeps_state() -> None:
    dec = SparkplugDecoder()
    dec.receive("spBv1.0/g/NBIRTH/n", _payload(0, Metric("a", 1, None, int(DataType.Int8), 1)))
    with pytest.raises(DecodeError, match="Int8"):
        dec.receive("spBv1.0/g/NDATA/n", _payload(1, Metric(None, 1, None, None, "text")))
    assert dec._nodes["g", "n"].seq == 0 and dec.malformed == 1
    dec.receive("spBv1.0/g/NDATA/n", _payload(1, Metric(None, 1, None, None, 2)))
    assert dec.seq_gaps == 0


def test_state_and_commands() -> None:
    dec = SparkplugDecoder()
    assert dec.receive("spBv1.0/STATE/host1", b'{"online": true, "timestamp": 1}') == []
    assert dec.state_messages == 1
    data = command_payload([("Node Control/Rebirth", True, None), ("sp", -5, DataType.Int16)], timestamp=42)
    rows = dec.receive(command_topic("g", "n", "d"), data)
    assert [(r.message_type, r.device, r.metric, r.datatype, r.value, r.timestamp) for r in rows] == [
        ("DCMD", "d", "Node Control/Rebirth", "Boolean", True, 42), ("DCMD", "d", "sp", "Int16", -5, 42)]


# --- topics and commands --------------------------------------------------------------------------

def test_topic_parsing() -> None:
    t = SparkplugTopic.parse("spBv1.0/g/DDATA/n/d")
    assert (t.group, t.message_type, t.edge_node, t.device) == ("g", "DDATA", "n", "d")
    assert str(t) == "spBv1.0/g/DDATA/n/d"
    assert str(SparkplugTopic.parse("spBv1.0/g/NBIRTH/n")) == "spBv1.0/g/NBIRTH/n"
    state = SparkplugTopic.parse("spBv1.0/STATE/host")
    assert (state.message_type, state.edge_node, str(state)) == ("STATE", "host", "spBv1.0/STATE/host")
    for bad in ("spAv1.0/g/NDATA/n", "spBv1.0/g/NDATA/n/d", "spBv1.0/g/DDATA/n", "spBv1.0/g/XDATA/n",
                "spBv1.0/g/NDATA", "spBv1.0//NDATA/n", "spBv1.0/g/NDATA/", "spBv1.0/g/DDATA/n/d/e",
                "spBv1.0/g/NDATA/+", "spBv1.0/STATE/", "spBv1.0/g/STATE/n", "", "spBv1.0"):
        with pytest.raises(DecodeError):
            SparkplugTopic.parse(bad)
    with pytest.raises(DecodeError):
        SparkplugDecoder().receive("other/topic", b"")


def test_command_topic() -> None:
    assert command_topic("g", "n", None) == "spBv1.0/g/NCMD/n"
    assert command_topic("g", "n", "d") == "spBv1.0/g/DCMD/n/d"
    for args in (("", "n", None), ("g", "a/b", None), ("g", "n", "#"), ("g+", "n", "d"), ("g", "n", "")):
        with pytest.raises(UsageError):
            command_topic(*args)


def test_command_payload_round_trip_and_inference() -> None:
    data = command_payload([("b", False, None), ("i", -(2**63), None), ("f", 0.5, None), ("s", "é", None),
                            ("y", b"\x00", None), ("u", 7, DataType.UInt8), ("n", None, DataType.Float),
                            ("arr", [1, -2], DataType.Int64Array)], timestamp=99)
    p = decode_payload(data)
    assert p.timestamp == 99
    assert [(m.name, DataType(m.datatype or 0).name, m.value, m.is_null) for m in p.metrics] == [
        ("b", "Boolean", False, False), ("i", "Int64", -(2**63), False), ("f", "Double", 0.5, False),
        ("s", "String", "é", False), ("y", "Bytes", b"\x00", False), ("u", "UInt8", 7, False),
        ("n", "Float", None, True), ("arr", "Int64Array", [1, -2], False)]
    assert PB["Payload"].FromString(data).metrics[1].long_value == 2**63


@pytest.mark.parametrize("metric", [
    ("x", 256, DataType.UInt8), ("x", -1, DataType.UInt32), ("x", 2**63, None), ("x", "1", DataType.Int32),
    ("x", 1, DataType.Boolean), ("x", True, DataType.Int8), ("x", 1e300, DataType.Float), ("x", [1], None),
    ("x", None, None), ("x", [300], DataType.Int8Array), ("x", {"a": 1}, DataType.DataSet), ("", 1, None),
    ("x", "\ud800", DataType.String), ("x", 1, 999),
])
def test_command_payload_rejects_what_does_not_fit(metric: tuple[str, Any, Any]) -> None:
    with pytest.raises(UsageError):
        command_payload([metric], timestamp=1)
