"""Plain MQTT devices in a Spark pipeline: telemetry in, per-device aggregates back out as commands.

The devices are ordinary paho clients (tests/fleet.py), not broker_mqtt endpoints: JSON devices on
``<prefix>/<device>/telemetry`` and ``<prefix>/<device>/cmd``, and Sparkplug B edge nodes (births with
aliases, DDATA by alias only, DCMD back). A real mosquitto, a real local Spark.

Births are sent only once the Spark job is known to be listening (a probe device publishes until its
own command comes back), since the source cannot resolve aliases of a birth it never saw.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F  # noqa: N812

from broker_mqtt import EmbeddedBroker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))  # the repo root: tests.fleet
from tests.fleet import EdgeNode, Fleet  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SCHEMA = "seq LONG, temp DOUBLE"  # the device comes from the topic level {device} (a `device` field too would clash)
PROBE = "probe"
MESSAGES = 5  # per device


@pytest.fixture
def fleet(broker: EmbeddedBroker) -> Iterator[Fleet]:
    f = Fleet(broker.url).start()
    yield f
    f.close()


def _wait_spark(what: str, predicate: Callable[[], bool], queries: list[Any], timeout: float = 90) -> None:
    """Until ``predicate()`` holds, failing early when a query died."""
    deadline = time.monotonic() + timeout
    while not predicate():
        for q in queries:
            if q.exception() is not None:
                raise AssertionError(f"query {q.name} failed: {q.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _batches_pass(queries: list[Any], count: int = 2) -> None:
    """Until every query completed ``count`` more micro-batches: whatever was in flight has been sent."""
    start = {q.id: (q.lastProgress or {}).get("batchId", -1) for q in queries}
    _wait_spark(f"{count} more micro-batches",
                lambda: all((q.lastProgress or {}).get("batchId", -1) >= start[q.id] + count for q in queries),
                queries)


def _json_pipeline(spark: Any, url: str, prefix: str, chk: Path) -> Any:
    telemetry = (spark.readStream.format("broker_mqtt").option("broker", url).option("payload", "json")
                 .option("topics", f"{prefix}/{{device}}/telemetry").option("jsonSchema", SCHEMA).load())
    assert {"topic", "device", "seq", "temp", "_corrupt_record", "qos", "retain", "received"} <= set(telemetry.columns)
    agg = telemetry.groupBy("device").agg(F.count("*").alias("count"), F.avg("temp").alias("avg_temp"))
    return _update_mode(agg, {"broker": url, "payload": "json", "topic": f"{prefix}/{{device}}/cmd"}, chk,
                        f"json_{prefix}")


def _update_mode(agg: Any, options: dict[str, str], chk: Path, name: str) -> Any:
    """The changed aggregates of each micro-batch (outputMode update) through the sink.

    ``agg.writeStream.format("broker_mqtt").outputMode("update")`` fails ("broker_mqtt does not support
    Update mode"), and complete mode would send every unchanged aggregate again each micro-batch, so each
    micro-batch's update goes through the same sink as a batch write, from foreachBatch."""
    def write(batch: Any, _batch_id: int) -> None:
        batch.write.format("broker_mqtt").options(**options).mode("append").save()

    return (agg.writeStream.outputMode("update").foreachBatch(write).option("checkpointLocation", str(chk))
            .trigger(processingTime="300 milliseconds").queryName(name).start())


def test_json_devices_get_their_aggregates_back(spark: Any, broker: EmbeddedBroker, fleet: Fleet, namespace: str,
                                                tmp_path: Path) -> None:
    prefix = namespace
    query = _json_pipeline(spark, broker.url, prefix, tmp_path / "chk")
    try:
        # the probe publishes until its command comes back: the source listens and the sink writes
        probe = fleet.add_json_devices(prefix, 1, first=99, name=PROBE)[0]
        fleet.connect()
        deadline = time.monotonic() + 90
        while not probe.commands:
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, "the probe's command never came back"
            fleet.publish_telemetry(1, clients=[probe])
            try:
                fleet.wait_until(lambda: bool(probe.commands), 1.0, "probe command")
            except TimeoutError:
                pass
        assert probe.commands[-1]["count"] >= 1 and "device" not in probe.commands[-1]  # template column left out

        devices = fleet.add_json_devices(prefix, 20)
        fleet.connect()
        fleet.publish_telemetry(MESSAGES, clients=list(devices))

        def final_arrived() -> bool:
            return all(any(c.get("count") == MESSAGES and c.get("avg_temp") == d.expected["avg_temp"]
                           for c in d.commands) for d in devices)

        try:
            fleet.wait_until(final_arrived, 90, "every device's final aggregate")
        except TimeoutError:
            missing = {d.device: (d.expected, d.commands[-3:]) for d in devices
                       if not any(c.get("count") == MESSAGES for c in d.commands)}
            raise AssertionError(f"final aggregates missing: {missing}") from None
        _batches_pass([query])  # a repeat of a command would have been sent by now
    finally:
        query.stop()
    assert not fleet.errors
    for d in devices:
        assert d.sent == MESSAGES
        repeated = {cmd: n for cmd, n in d.command_counts.items() if n > 1}
        assert not repeated, f"{d.device} got commands more than once: {repeated}"
        # every command is this device's own: counts grow, and each is the average of the first `count` temps
        counts = [c["count"] for c in d.commands]
        assert counts == sorted(counts) and counts[-1] == MESSAGES
        for c in d.commands:
            assert set(c) == {"count", "avg_temp"}, c
            temps = [20.0 + (d.index % 64) * 0.5 + (s % 4) * 0.25 for s in range(c["count"])]
            assert c["avg_temp"] == sum(temps) / len(temps), (d.device, c)


def _sparkplug_pipeline(spark: Any, url: str, group: str, chk: Path) -> Any:
    metrics = (spark.readStream.format("broker_mqtt").option("broker", url).option("payload", "sparkplug")
               .option("topics", f"spBv1.0/{group}/#").load())
    assert {"topic", "group", "message_type", "edge_node", "device", "seq", "metric", "alias", "datatype", "value",
            "double_value", "long_value", "received"} <= set(metrics.columns)
    temps = metrics.where("message_type = 'DDATA' AND metric = 'temp'")
    agg = temps.groupBy("group", "edge_node", "device").agg(F.count("*").alias("n"),
                                                           F.avg("double_value").alias("avg_temp"))
    commands = agg.select("group", "edge_node", "device", F.explode(F.array(
        F.struct(F.lit("count").alias("metric"), F.col("n").cast("double").alias("value")),
        F.struct(F.lit("avg_temp").alias("metric"), F.col("avg_temp").alias("value")))).alias("m")) \
        .select("group", "edge_node", "device", "m.metric", "m.value")
    return _update_mode(commands, {"broker": url, "payload": "sparkplug"}, chk, f"spb_{group}")


def test_sparkplug_edge_nodes_get_dcmd_with_their_aggregates(spark: Any, broker: EmbeddedBroker, fleet: Fleet,
                                                             namespace: str, tmp_path: Path) -> None:
    group = namespace
    query = _sparkplug_pipeline(spark, broker.url, group, tmp_path / "chk")
    try:
        probe = fleet.add_edge_node(group, "probe", [PROBE], first_index=99)
        fleet.connect()
        deadline = time.monotonic() + 90
        while not probe.commands.get(PROBE):
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, "the probe's DCMD never came back"
            fleet.rebirth([probe])  # the source may have subscribed after the last birth
            fleet.publish_telemetry(1, clients=[probe])
            try:
                fleet.wait_until(lambda: bool(probe.commands.get(PROBE)), 1.0, "probe DCMD")
            except TimeoutError:
                pass

        nodes: list[EdgeNode] = [fleet.add_edge_node(group, f"edge{n}", [f"dev{n}{k}" for k in range(3)],
                                                     first_index=3 * n) for n in range(2)]
        fleet.connect()  # births now, while the source listens
        fleet.publish_telemetry(MESSAGES, clients=list(nodes))

        def final(node: EdgeNode, device: str) -> dict[str, Any]:
            e = node.expected(device)
            return {"count": float(e["count"]), "avg_temp": e["avg_temp"]}

        def final_arrived() -> bool:
            return all(final(n, d) in n.commands.get(d, []) for n in nodes for d in n.devices)

        try:
            fleet.wait_until(final_arrived, 90, "every Sparkplug device's final aggregate")
        except TimeoutError:
            raise AssertionError("final DCMDs missing: " + repr(
                {(n.edge_node, d): (final(n, d), n.commands.get(d, [])[-3:]) for n in nodes for d in n.devices
                 if final(n, d) not in n.commands.get(d, [])})) from None
        _batches_pass([query])
    finally:
        query.stop()
    assert not fleet.errors
    for n in nodes:
        assert n.births == 1
        assert None not in n.commands, f"{n.edge_node} got an NCMD: {n.commands[None]}"
        assert set(n.commands) == set(n.devices)
        repeated = {key: k for key, k in n.command_counts.items() if k > 1}
        assert not repeated, f"{n.edge_node} got DCMDs more than once: {repeated}"
        for d in n.devices:
            assert n.sent_per_device[d] == MESSAGES
            for c in n.commands[d]:
                assert set(c) == {"count", "avg_temp"}, c
                temps = [20.0 + (n.index[d] % 64) * 0.5 + (s % 4) * 0.25 for s in range(int(c["count"]))]
                assert c["avg_temp"] == sum(temps) / len(temps), (n.edge_node, d, c)
