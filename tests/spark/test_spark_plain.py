"""Plain MQTT topics through Spark (issue 22): the source and the sink with payload json, raw and
sparkplug, against a real local Spark and a real mosquitto, with ordinary MQTT clients (aiomqtt,
not this project's Endpoint) on the devices' side."""

from __future__ import annotations

import base64
import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import aiomqtt
import anyio
import pytest

from broker_mqtt import EmbeddedBroker
from broker_mqtt.spark.sparkplug import DataType, Metric, Payload, decode_payload, encode_payload

pytestmark = pytest.mark.slow


def _client(broker: EmbeddedBroker) -> aiomqtt.Client:
    return aiomqtt.Client(broker.connect_host, broker.port, protocol=aiomqtt.ProtocolVersion.V5)


async def _publish(broker: EmbeddedBroker, messages: list[tuple[str, bytes, int, bool]]) -> None:
    async with _client(broker) as client:
        for topic, payload, qos, retain in messages:
            await client.publish(topic, payload, qos=qos, retain=retain)


def _wait_subscribed(query: Any) -> None:
    """The source subscribes in its first ``latestOffset``; a progress report means it ran."""
    deadline = time.monotonic() + 60
    while query.lastProgress is None:
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, "the streaming query made no progress"
        time.sleep(0.1)


def _rows_until(spark: Any, table: str, query: Any, count: int) -> list[Any]:
    deadline = time.monotonic() + 60
    while (n := spark.table(table).count()) < count:
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"only {n} of {count} rows arrived"
        time.sleep(0.2)
    return list(spark.table(table).collect())


def _memory_query(stream: Any, table: str, tmp_path: Path) -> Any:
    return (stream.writeStream.format("memory").queryName(table)
            .option("checkpointLocation", str(tmp_path / table)).trigger(processingTime="300 milliseconds").start())


def test_json_source_gives_topic_levels_parsed_fields_and_corrupt_records(
        spark: Any, broker: EmbeddedBroker, namespace: str, tmp_path: Path) -> None:
    stream = (spark.readStream.format("broker_mqtt").option("broker", broker.url).option("payload", "json")
              .option("topics", f"{namespace}/{{site}}/{{device}}/telemetry")
              .option("jsonSchema", "temp DOUBLE, n BIGINT, at TIMESTAMP, tags ARRAY<STRING>").load())
    assert stream.columns == ["topic", "site", "device", "temp", "n", "at", "tags", "_corrupt_record",
                              "qos", "retain", "received"]
    table = "plain_json_" + namespace
    query = _memory_query(stream, table, tmp_path)
    try:
        _wait_subscribed(query)
        good = [(f"{namespace}/s1/dev{i}/telemetry",
                 json.dumps({"temp": 20.5 + i, "n": i, "at": "2026-11-26T10:00:00Z", "tags": ["a", str(i)]}).encode(),
                 1, False) for i in range(5)]
        odd = [
            (f"{namespace}/s2/devX/telemetry", b'{"temp": "hot", "n": 7}', 0, False),  # a field of the wrong type
            (f"{namespace}/s2/devY/telemetry", b"not json \xff", 1, False),  # not JSON, not UTF-8
            (f"{namespace}/s2/devZ/telemetry", b"[1, 2]", 1, False),  # JSON, but no object
            (f"{namespace}/s2/devX/other", b'{"temp": 1}', 1, False),  # not under the pattern
        ]
        anyio.run(_publish, broker, good + odd)
        rows = _rows_until(spark, table, query, 8)
    finally:
        query.stop()
    assert len(rows) == 8
    by_device = {r.device: r for r in rows}
    assert sorted(by_device) == ["dev0", "dev1", "dev2", "dev3", "dev4", "devX", "devY", "devZ"]
    d3 = by_device["dev3"]
    assert (d3.site, d3.temp, d3.n, d3.tags, d3._corrupt_record, d3.qos, d3.retain) == (
        "s1", 23.5, 3, ["a", "3"], None, 1, False)
    assert d3.at.replace(tzinfo=dt.UTC) == dt.datetime(2026, 11, 26, 10, tzinfo=dt.UTC)
    x = by_device["devX"]
    assert (x.temp, x.n, x._corrupt_record, x.qos) == (None, 7, '{"temp": "hot", "n": 7}', 0)
    assert by_device["devY"].temp is None and by_device["devY"]._corrupt_record == "not json \ufffd"
    assert by_device["devZ"]._corrupt_record == "[1, 2]"


def test_raw_source_keeps_bytes_and_retain(spark: Any, broker: EmbeddedBroker, namespace: str,
                                           tmp_path: Path) -> None:
    anyio.run(_publish, broker, [(f"{namespace}/state/lamp", b"\x00\x01ON", 1, True)])  # retained before the query
    stream = (spark.readStream.format("broker_mqtt").option("broker", broker.url).option("payload", "raw")
              .option("topics", f"{namespace}/state/+,{namespace}/bin/#").load())
    assert stream.columns == ["topic", "payload", "qos", "retain", "received"]
    table = "plain_raw_" + namespace
    query = _memory_query(stream, table, tmp_path)
    try:
        _wait_subscribed(query)
        anyio.run(_publish, broker, [(f"{namespace}/bin/a/b", bytes(range(256)), 1, False)])
        rows = _rows_until(spark, table, query, 2)
    finally:
        query.stop()
    got = {r.topic: (bytes(r.payload), r.retain) for r in rows}
    assert got == {f"{namespace}/state/lamp": (b"\x00\x01ON", True), f"{namespace}/bin/a/b": (bytes(range(256)), False)}


def test_batch_read_collects_retained_device_state(spark: Any, broker: EmbeddedBroker, namespace: str) -> None:
    anyio.run(_publish, broker, [(f"{namespace}/{d}/state", json.dumps({"on": d == "b"}).encode(), 1, True)
                                 for d in "abc"])
    df = (spark.read.format("broker_mqtt").option("broker", broker.url).option("payload", "json")
          .option("topics", f"{namespace}/{{device}}/state").option("jsonSchema", "on BOOLEAN")
          .option("readSeconds", "1").load())
    rows = sorted((r.device, r.on, r.retain) for r in df.collect())
    assert rows == [("a", False, True), ("b", True, True), ("c", False, True)]


class _Listener:
    """An ordinary MQTT subscriber in a background thread (aiomqtt), for what the sink publishes."""

    def __init__(self, broker: EmbeddedBroker, mqtt_filter: str) -> None:
        import threading

        self.messages: list[aiomqtt.Message] = []
        self._ready = threading.Event()
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._broker, self._filter = broker, mqtt_filter
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(30), "listener did not subscribe"
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            anyio.run(self._main, backend="asyncio")
        except BaseException as exc:
            self.error = exc
            self._ready.set()

    async def _main(self) -> None:
        async with _client(self._broker) as client, anyio.create_task_group() as tg:
            await client.subscribe(self._filter, qos=1)
            self._ready.set()

            async def watch() -> None:
                await anyio.to_thread.run_sync(self._stop.wait, abandon_on_cancel=True)
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            async for msg in client.messages:
                self.messages.append(msg)

    def wait_for(self, count: int) -> list[aiomqtt.Message]:
        deadline = time.monotonic() + 60
        while len(self.messages) < count:
            if self.error is not None:
                raise self.error
            assert time.monotonic() < deadline, f"got {len(self.messages)} of {count} messages"
            time.sleep(0.05)
        return list(self.messages)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


def test_json_sink_publishes_each_row_on_its_templated_topic(spark: Any, broker: EmbeddedBroker,
                                                              namespace: str) -> None:
    listener = _Listener(broker, f"{namespace}/+/cmd")
    try:
        df = spark.createDataFrame(
            [("dev1", 21.5, dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC), b"\x01"),
             ("dev2", None, dt.datetime(2026, 1, 2, 3, 4, 6, tzinfo=dt.UTC), b"\x02")],
            "device STRING, setpoint DOUBLE, at TIMESTAMP, blob BINARY")
        (df.write.format("broker_mqtt").option("broker", broker.url).option("payload", "json")
         .option("topic", f"{namespace}/{{device}}/cmd").option("retain", "true").mode("append").save())
        messages = listener.wait_for(2)
    finally:
        listener.close()
    late = _Listener(broker, f"{namespace}/+/cmd")  # subscribes after the write: gets the retained commands
    try:
        retained = late.wait_for(2)
    finally:
        late.close()
    got = {m.topic.value: json.loads(m.payload) for m in messages}  # type: ignore[arg-type]
    assert got == {
        f"{namespace}/dev1/cmd": {"setpoint": 21.5, "at": "2026-01-02T03:04:05Z", "blob": base64.b64encode(b"\x01").decode()},
        f"{namespace}/dev2/cmd": {"setpoint": None, "at": "2026-01-02T03:04:06Z", "blob": base64.b64encode(b"\x02").decode()},
    }
    assert not any(m.retain for m in messages)  # live delivery
    assert sorted((m.topic.value, m.retain) for m in retained) == [  # type: ignore[type-var]
        (f"{namespace}/dev1/cmd", True), (f"{namespace}/dev2/cmd", True)]


def test_raw_sink_sends_bytes_as_they_are_and_a_bad_level_fails_the_write(spark: Any, broker: EmbeddedBroker,
                                                                         namespace: str) -> None:
    listener = _Listener(broker, f"{namespace}/raw/#")
    try:
        df = spark.createDataFrame([("a", b"\x00\xffbin"), ("b", b"")], "dev STRING, payload BINARY")
        (df.write.format("broker_mqtt").option("broker", broker.url).option("payload", "raw")
         .option("topic", f"{namespace}/raw/{{dev}}").mode("append").save())
        messages = listener.wait_for(2)
        bad = spark.createDataFrame([("x/y", b"1")], "dev STRING, payload BINARY")
        with pytest.raises(Exception, match="cannot be a topic level"):
            (bad.write.format("broker_mqtt").option("broker", broker.url).option("payload", "raw")
             .option("topic", f"{namespace}/raw/{{dev}}").mode("append").save())
    finally:
        listener.close()
    assert {m.topic.value: bytes(m.payload) for m in messages} == {  # type: ignore[arg-type]
        f"{namespace}/raw/a": b"\x00\xffbin", f"{namespace}/raw/b": b""}


def _sparkplug(topic: str, metrics: list[Metric], seq: int) -> tuple[str, bytes, int, bool]:
    return topic, encode_payload(Payload(timestamp=1_700_000_000_000, metrics=tuple(metrics), seq=seq)), 0, False


def test_sparkplug_source_resolves_aliases_and_tracks_online_state(spark: Any, broker: EmbeddedBroker,
                                                                    namespace: str, tmp_path: Path) -> None:
    group = namespace
    base = f"spBv1.0/{group}"
    stream = (spark.readStream.format("broker_mqtt").option("broker", broker.url).option("payload", "sparkplug")
              .option("topics", f"{base}/#").load())
    table = "plain_spb_" + namespace
    query = _memory_query(stream, table, tmp_path)
    try:
        _wait_subscribed(query)
        anyio.run(_publish, broker, [
            _sparkplug(f"{base}/NBIRTH/gw1", [Metric("bdSeq", None, None, DataType.Int64, 0)], 0),
            _sparkplug(f"{base}/DBIRTH/gw1/pump", [Metric("temp", 1, None, DataType.Double, 20.0),
                                                   Metric("rpm", 2, None, DataType.Int32, -5)], 1),
            _sparkplug(f"{base}/DDATA/gw1/pump", [Metric(None, 1, None, None, 21.5),
                                                  Metric(None, 2, None, None, -7)], 2),
            (f"{base}/DDATA/gw1/pump", b"\xff\xff\xff", 0, False),  # malformed: skipped, the stream goes on
            _sparkplug(f"{base}/DDEATH/gw1/pump", [], 3),
        ])
        rows = _rows_until(spark, table, query, 6)
    finally:
        query.stop()
    data = sorted((r.metric, r.double_value, r.long_value, r.datatype, r.online) for r in rows
                  if r.message_type == "DDATA")
    assert data == [("rpm", None, -7, "Int32", True), ("temp", 21.5, None, "Double", True)]
    death = [r for r in rows if r.message_type == "DDEATH"]
    assert [(r.device, r.metric, r.online) for r in death] == [("pump", None, False)]
    assert all(r.group == group and r.edge_node == "gw1" for r in rows)


def test_sparkplug_sink_sends_device_and_node_commands(spark: Any, broker: EmbeddedBroker, namespace: str) -> None:
    listener = _Listener(broker, f"spBv1.0/{namespace}/+/gw1/#")
    try:
        df = spark.createDataFrame(
            [(namespace, "gw1", "pump", "setpoint", 22.5), (namespace, "gw1", "pump", "speed", 3.0),
             (namespace, "gw1", None, "Node Control/Rebirth", 1.0)],
            "group STRING, edge_node STRING, device STRING, metric STRING, value DOUBLE")
        df.coalesce(1).write.format("broker_mqtt").option("broker", broker.url).option("payload", "sparkplug") \
            .mode("append").save()
        messages = listener.wait_for(2)
    finally:
        listener.close()
    got = {m.topic.value: decode_payload(bytes(m.payload)) for m in messages}  # type: ignore[arg-type]
    assert sorted(got) == [f"spBv1.0/{namespace}/DCMD/gw1/pump", f"spBv1.0/{namespace}/NCMD/gw1"]
    dcmd = got[f"spBv1.0/{namespace}/DCMD/gw1/pump"]
    assert [(m.name, m.value, m.datatype) for m in dcmd.metrics] == [
        ("setpoint", 22.5, DataType.Double), ("speed", 3.0, DataType.Double)]
    assert [m.name for m in got[f"spBv1.0/{namespace}/NCMD/gw1"].metrics] == ["Node Control/Rebirth"]


async def _edge_node_that_rebirths(broker: EmbeddedBroker, base: str, asked: list[bytes]) -> None:
    """Sends data by alias only; when the source asks for a rebirth, sends its births, then data."""
    async with _client(broker) as client:
        await client.subscribe(f"{base}/NCMD/gw9", qos=1)
        await client.publish(*_sparkplug(f"{base}/DDATA/gw9/valve", [Metric(None, 4, None, None, 1.5)], 5)[:2])
        with anyio.fail_after(60):
            async for message in client.messages:
                asked.append(bytes(message.payload))  # type: ignore[arg-type]
                break
        await client.publish(*_sparkplug(f"{base}/NBIRTH/gw9", [Metric("bdSeq", None, None, DataType.Int64, 1)], 0)[:2])
        await client.publish(*_sparkplug(f"{base}/DBIRTH/gw9/valve",
                                         [Metric("position", 4, None, DataType.Double, 1.5)], 1)[:2])
        await client.publish(*_sparkplug(f"{base}/DDATA/gw9/valve", [Metric(None, 4, None, None, 2.5)], 2)[:2])


def test_sparkplug_source_asks_an_edge_node_it_never_saw_born_to_rebirth(
        spark: Any, broker: EmbeddedBroker, namespace: str, tmp_path: Path) -> None:
    base = f"spBv1.0/{namespace}"
    stream = (spark.readStream.format("broker_mqtt").option("broker", broker.url).option("payload", "sparkplug")
              .option("topics", f"{base}/#").load())
    table = "plain_rebirth_" + namespace
    query = _memory_query(stream, table, tmp_path)
    asked: list[bytes] = []
    try:
        _wait_subscribed(query)
        anyio.run(_edge_node_that_rebirths, broker, base, asked)
        rows = _rows_until(spark, table, query, 4)
    finally:
        query.stop()
    request = decode_payload(asked[0])
    assert [(m.name, m.value) for m in request.metrics] == [("Node Control/Rebirth", True)]
    data = [(r.metric, r.double_value) for r in rows if r.message_type == "DDATA"]
    assert data == [(None, 1.5), ("position", 2.5)]  # unnamed before the rebirth, named after
