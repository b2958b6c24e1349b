"""The bridge's pure parts, without Spark or a broker: row ids, de-duplication, options, mappings."""

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

from broker_mqtt import Count, EnumValue, Message, Port, PortProtocol, TopicError, UsageError, codec
from broker_mqtt.spark import ROW_ID_KEY, Deduplicator, RowId, dedup, row_id, to_json
from broker_mqtt.spark.convert import RowConverter
from broker_mqtt.spark.options import SinkOptions, SourceOptions


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
