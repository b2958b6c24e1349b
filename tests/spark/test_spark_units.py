"""The bridge's pure parts, without Spark or a broker: row ids, de-duplication, options, mappings,
the column-wise encoder (pinned byte for byte to the row path)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import uuid
from decimal import Decimal
from typing import Any

import anyio
import pyarrow as pa
import pytest

from broker_mqtt import Count, EnumValue, Message, Port, PortProtocol, TopicError, UsageError
from broker_mqtt.spark import ROW_ID_KEY, Deduplicator, RowId, dedup, row_id, to_json
from broker_mqtt.spark.columnar import PayloadEncoder, cbor_head
from broker_mqtt.spark.convert import RowConverter
from broker_mqtt.spark.options import SinkOptions, SourceOptions
from broker_mqtt.wire import codec


def _row(job: str, batch: int, part: int, row: int, **fields: Any) -> dict[str, Any]:
    return {**fields, ROW_ID_KEY: [job, batch, part, row]}


def test_row_id_parses_only_well_formed_ids() -> None:
    assert row_id(_row("j", 1, 2, 3)) == RowId("j", 1, 2, 3)
    assert row_id({"x": 1}) is None
    assert row_id({ROW_ID_KEY: ["j", 1, 2]}) is None
    assert row_id({ROW_ID_KEY: ["j", 1, 2, "3"]}) is None
    assert row_id([1, 2]) is None


def test_deduplicator_drops_repeats_in_any_order() -> None:
    d = Deduplicator()
    rows = [_row("a", 0, 0, i) for i in range(100)]
    replay = rows[:40] + rows  # a failed attempt sent 40 rows, the retry all of them
    passed = [r for r in replay if d.is_new(r)]
    assert passed == rows
    assert d.statistics().dropped == 40
    # out of order, other partitions and batches are independent; rows without ids always pass
    d2 = Deduplicator()
    assert [d2.is_new(_row("a", 0, 1, i)) for i in (5, 3, 5, 0, 1, 2, 4, 3, 6)] == [
        True, True, False, True, True, True, True, False, True]
    assert d2.is_new(_row("a", 1, 1, 5)) and d2.is_new(_row("b", 0, 1, 5))
    assert d2.is_new({"plain": 1}) and d2.is_new({"plain": 1})
    assert d2.statistics().without_id == 2


def test_deduplicator_memory_is_bounded() -> None:
    d = Deduplicator(max_partitions=2)
    for part in range(3):
        assert d.is_new(_row("a", 0, part, 0))
    stats = d.statistics()
    assert stats.partitions == 2 and stats.evicted == 1
    assert d.is_new(_row("a", 0, 0, 0)), "an evicted partition's repeat passes again (documented)"


@pytest.mark.anyio
async def test_dedup_wraps_a_message_stream() -> None:
    sender = uuid.uuid4().bytes
    datas = [_row("a", 0, 0, i, v=i) for i in (0, 1, 0, 2, 1)]

    async def source() -> Any:
        for d in datas:
            yield Message("/t", sender, codec.encode(d))

    got = [m.data["v"] async for m in dedup(source())]
    assert got == [0, 1, 2]
    await anyio.lowlevel.checkpoint()


def test_sink_options() -> None:
    opts = SinkOptions.parse({"broker": "mqtts://u:s3cret@h:8884", "topic": "/a", "tlsCaFile": "/ca.pem",
                              "qos": "0", "maxPendingMessages": "1000", "namespace": "ns"})
    assert opts.connection.tls is not None and opts.connection.tls.ca_file == "/ca.pem"
    assert opts.connection.qos == 0 and opts.max_pending == 1000 and opts.connection.namespace == "ns"
    assert "s3cret" not in repr(opts) and "s3cret" not in repr(opts.connection)
    # Spark lower-cases option keys
    assert SinkOptions.parse({"broker": "mqtt://h", "topiccolumn": "t"}).topic_column == "t"
    with_auth = SinkOptions.parse({"broker": "mqtt://h:1", "topic": "/a", "username": "me", "password": "p@ss"})
    assert with_auth.connection.broker == "mqtt://me:p%40ss@h:1"
    with pytest.raises(UsageError, match="exactly one"):
        SinkOptions.parse({"broker": "mqtt://h", "topic": "/a", "topicColumn": "t"})
    with pytest.raises(TopicError):
        SinkOptions.parse({"broker": "mqtt://h", "topic": "/a/+"})
    with pytest.raises(UsageError, match="qos"):
        SinkOptions.parse({"broker": "mqtt://h", "topic": "/a", "qos": "2"})
    with pytest.raises(UsageError, match="mqtts"):
        SinkOptions.parse({"broker": "mqtt://h", "topic": "/a", "tlsCaFile": "x"})
    with pytest.raises(UsageError, match="decimals"):
        SinkOptions.parse({"broker": "mqtt://h", "topic": "/a", "decimals": "exact"})


def test_source_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BROKER_MQTT_URL", raising=False)
    opts = SourceOptions.parse({"broker": "mqtt://h", "topics": "/a, /b/c"})
    assert opts.topics == ("/a", "/b/c")
    with pytest.raises(UsageError, match="topics"):
        SourceOptions.parse({"broker": "mqtt://h"})
    with pytest.raises(UsageError, match="broker"):
        SourceOptions.parse({"topics": "/a"})


def test_row_converter_maps_arrow_values() -> None:
    ts = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    batch = pa.record_batch({
        "topic": pa.array(["/x"]),
        "ts": pa.array([ts], pa.timestamp("us", tz="America/New_York")),
        "dec": pa.array([Decimal("1.50")], pa.decimal128(5, 2)),
        "m": pa.array([[("k", [Decimal("2.0")])]], pa.map_(pa.string(), pa.list_(pa.decimal128(3, 1)))),
    })
    conv = RowConverter(batch.schema, topic_column="topic", keep_topic_column=False, decimals="string")
    assert conv.names == ["ts", "dec", "m"]
    assert conv.topics(batch) == ["/x"]
    [[t], [d], [m]] = conv.values(batch)
    assert t == ts and t.tzinfo is dt.UTC
    assert d == "1.50" and m == {"k": ["2.0"]}
    with pytest.raises(UsageError):
        RowConverter(pa.schema([("u", pa.dictionary(pa.int8(), pa.string()))]), topic_column=None,
                     keep_topic_column=False, decimals="string")


def test_json_document_of_data_model_values() -> None:
    value = {
        "c": Count(3), "p": Port(53, PortProtocol.UDP), "e": EnumValue("Conn::LOG"),
        "a": ipaddress.ip_address("10.0.0.1"), "net": ipaddress.ip_network("10.0.0.0/8"),
        "t": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=1))),
        "span": dt.timedelta(seconds=1.5), "b": b"\x00\x01", "s": {3, 1}, 7: [None, True],
    }
    assert json.loads(to_json(value)) == {
        "c": 3, "p": "53/udp", "e": "Conn::LOG", "a": "10.0.0.1", "net": "10.0.0.0/8",
        "t": "2024-01-02T02:04:05Z", "span": 1.5, "b": "AAE=", "s": [1, 3], "7": [None, True],
    }


# -- the column-wise encoder: every payload is byte for byte codec.encode of the row path's dict --

_INTS = [0, 1, 23, 24, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1,
         -1, -24, -25, -256, -257, -65536, -65537, -2**32, -2**32 - 1, -2**63, None]


def _mixed_batch() -> pa.RecordBatch:
    """Every type of the mapping, with nulls and the edges of each CBOR width."""
    n = len(_INTS)

    def cycle(values: list[Any]) -> list[Any]:
        return (values * n)[:n]

    ts_us = [0, 1_700_000_000_123_456, -1, None, -62135596800_000000, 253402300799_999999, 1_700_000_000_000_000]
    return pa.record_batch({
        "topic": pa.array(cycle(["/a", "/b/c"])),
        "i64": pa.array(_INTS, pa.int64()),
        "i8": pa.array(cycle([1, -5, None, 100, -128]), pa.int8()),
        "i32": pa.array(cycle([2**31 - 1, -2**31, 0, None]), pa.int32()),
        "f64": pa.array(cycle([0.0, -0.0, 1.5, float("nan"), float("inf"), float("-inf"), None, 1e300, 5e-324]),
                        pa.float64()),
        "f32": pa.array(cycle([1.25, None, 0.1, float("nan")]), pa.float32()),
        "b": pa.array(cycle([True, False, None])),
        "s": pa.array(cycle(["", "a", "x" * 23, "y" * 24, "z" * 255, "z" * 256, "é€😀", None, "w" * 70_000])),
        "bin": pa.array(cycle([b"", b"\x00\xff", None, b"q" * 256])),
        "ts": pa.array(cycle(ts_us), pa.timestamp("us", tz="UTC")),
        "ts_ny": pa.array(cycle(ts_us[:4]), pa.timestamp("us", tz="America/New_York")),
        "ts_ntz": pa.array(cycle(ts_us), pa.timestamp("us")),
        "ts_ms": pa.array(cycle([0, 1_700_000_000_123, None]), pa.timestamp("ms")),
        "d": pa.array(cycle([0, 19_000, None, -719_162, 2_932_896]), pa.date32()),
        "dec": pa.array(cycle([Decimal("1.20"), None, Decimal("-0.01")]), pa.decimal128(5, 2)),
        "arr": pa.array(cycle([[1, 2], None, [], [None]]), pa.list_(pa.int32())),
        "st": pa.array(cycle([{"a": 1, "t": 0}, None, {"a": None, "t": None}]),
                       pa.struct([("a", pa.int32()), ("t", pa.timestamp("us", tz="UTC"))])),
        "m": pa.array(cycle([[("k", 1)], None, []]), pa.map_(pa.string(), pa.int64())),
        "dur": pa.array(cycle([dt.timedelta(seconds=3), None, dt.timedelta(microseconds=-1)]), pa.duration("us")),
        "nothing": pa.nulls(n),
    })


def _row_path(batch: pa.RecordBatch, *, topic_column: str | None = None, keep: bool = False,
              decimals: str = "string", id_key: str = ROW_ID_KEY, job: str = "j" * 32, batch_id: int = 7,
              partition: int = 3, first_row: int = 0) -> list[bytes]:
    """The reference: the row path's dicts (RowConverter), each encoded by codec.encode."""
    conv = RowConverter(batch.schema, topic_column=topic_column, keep_topic_column=keep, decimals=decimals)
    columns, names = conv.values(batch), list(conv.names)
    if id_key:
        names.append(id_key)
        columns.append([[job, batch_id, partition, first_row + i] for i in range(batch.num_rows)])
    return [codec.encode(dict(zip(names, row, strict=True))) for row in zip(*columns, strict=True)]


def _columnar(batch: pa.RecordBatch, *, topic_column: str | None = None, keep: bool = False,
              decimals: str = "string", id_key: str = ROW_ID_KEY, job: str = "j" * 32, batch_id: int = 7,
              partition: int = 3, first_row: int = 0) -> list[bytes]:
    enc = PayloadEncoder(batch.schema, topic_column=topic_column, keep_topic_column=keep, decimals=decimals,
                         id_key=id_key, job=job, batch_id=batch_id, partition=partition)
    payloads: list[bytes] = enc.payloads(batch, first_row).to_pylist()
    return payloads


def test_cbor_head_is_the_canonical_head() -> None:
    import cbor2

    for v in (0, 23, 24, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**64 - 1):
        assert cbor_head(0, v) == cbor2.dumps(v)
        assert cbor_head(1, v) == cbor2.dumps(-1 - v)
    with pytest.raises(ValueError):
        cbor_head(0, 2**64)


def test_columnar_payloads_are_the_row_paths_bytes_for_every_type() -> None:
    batch = _mixed_batch()
    assert _columnar(batch, first_row=5) == _row_path(batch, first_row=5)
    assert _columnar(batch, decimals="float") == _row_path(batch, decimals="float")
    assert _columnar(batch, id_key="") == _row_path(batch, id_key="")
    assert _columnar(batch, topic_column="topic") == _row_path(batch, topic_column="topic")
    assert _columnar(batch, topic_column="topic", keep=True) == _row_path(batch, topic_column="topic", keep=True)
    # Row ids across the widths of an unsigned integer, and a job id that is not hex.
    big = 2**32 - 3
    assert _columnar(batch, first_row=big, job="x", batch_id=70_000) == \
        _row_path(batch, first_row=big, job="x", batch_id=70_000)


def test_columnar_payloads_decode_to_the_mapped_values() -> None:
    batch = _mixed_batch()
    row = codec.decode(_columnar(batch, topic_column="topic", first_row=4)[1])
    assert row["i64"] == 1 and row["i8"] == -5 and row["s"] == "a" and row["bin"] == b"\x00\xff"
    assert row["ts"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=dt.UTC)
    assert row["d"] == "2022-01-08" and row["dec"] is None and row["nothing"] is None
    assert row[ROW_ID_KEY] == ["j" * 32, 7, 3, 5] and "topic" not in row


def test_columnar_slices_all_nulls_and_edge_shapes() -> None:
    batch = _mixed_batch()
    for start, length in ((1, 7), (5, 1), (9, 13), (0, 0)):
        part = batch.slice(start, length)  # arrays with an offset into their buffers
        assert _columnar(part, first_row=start) == _row_path(part, first_row=start)
    nulls = pa.record_batch({name: pa.nulls(3, type=batch.schema.field(name).type) for name in batch.schema.names})
    assert _columnar(nulls) == _row_path(nulls)
    empty_schema = pa.record_batch({"t": pa.array(["/a", "/b"])})
    assert _columnar(empty_schema, topic_column="t", id_key="") == [b"\xa0", b"\xa0"]


def test_columnar_keeps_dict_semantics_for_repeated_names() -> None:
    # Two columns of one name: the first position, the last value; a column named like the row
    # id key is overridden by the row id, in the column's position (as the row path's dict does).
    batch = pa.RecordBatch.from_arrays(
        [pa.array([1, 2]), pa.array(["x", "y"]), pa.array([3.5, None]), pa.array(["p", "q"])],
        names=["a", ROW_ID_KEY, "a", "b"])
    assert _columnar(batch) == _row_path(batch)
    assert list(codec.decode(_columnar(batch)[0])) == ["a", ROW_ID_KEY, "b"]


def test_timestamps_python_cannot_hold_take_the_row_path() -> None:
    batch = pa.record_batch({"ts": pa.array([253402300800_000000], pa.timestamp("us", tz="UTC"))})  # year 10000
    with pytest.raises(OverflowError):  # the task fails as it always did
        _columnar(batch)
    with pytest.raises(OverflowError):
        _row_path(batch)


def test_payload_encoder_refuses_types_outside_the_mapping() -> None:
    schema = pa.schema([("u", pa.dictionary(pa.int8(), pa.string()))])
    with pytest.raises(UsageError, match="cannot map"):
        PayloadEncoder(schema, topic_column=None, keep_topic_column=False, decimals="string", id_key="",
                       job="j", batch_id=0, partition=0)
    with pytest.raises(UsageError, match="topicColumn"):
        PayloadEncoder(pa.schema([("a", pa.int8())]), topic_column="t", keep_topic_column=False,
                       decimals="string", id_key="", job="j", batch_id=0, partition=0)


@pytest.mark.parametrize("low, high", [(0, 23), (24, 255), (256, 65535), (65536, 2**32 - 1), (2**32, 2**63 - 1),
                                       (0, 2**63 - 1), (300, 2**40)])
def test_integer_columns_within_and_across_head_widths(low: int, high: int) -> None:
    import cbor2

    values = sorted({low, high, (low + high) // 2, low + 1, high - 1})
    for sign in (1, -1):
        column = [sign * v - (sign < 0) for v in values]  # negatives: -1 - v, the same widths
        batch = pa.record_batch({"i": pa.array(column, pa.int64())})
        head = bytes([0xA2, 0x61]) + b"i"
        payloads = _columnar(batch, id_key="r", first_row=low)
        assert [p.startswith(head) for p in payloads] == [True] * len(values)
        assert payloads == [head + cbor2.dumps(v) + b"\x61r" + cbor2.dumps(["j" * 32, 7, 3, low + i])
                            for i, v in enumerate(column)]
