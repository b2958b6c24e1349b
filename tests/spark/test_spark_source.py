"""The streaming source against a real local Spark and a real mosquitto."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from pyspark.sql import functions as F  # noqa: N812

from broker_mqtt import EmbeddedBroker, Endpoint, Port, PortProtocol


async def _publish_when_source_listens(url: str, namespace: str, count: int) -> None:
    async with Endpoint(url, namespace=namespace, name="sensor") as ep:
        with anyio.fail_after(60):
            while not any(p.name.startswith("spark-source") and "/sensors" in p.topics for p in ep.peers()):
                await anyio.sleep(0.05)
        for i in range(count):
            await ep.publish(f"/sensors/{i % 2}", {"n": i, "temp": 20.5 + i, "port": Port(443, PortProtocol.TCP)})
        await ep.publish("/other", {"n": -1})  # not under the source's prefix
        assert await ep.flush(10)


@pytest.mark.slow
def test_streaming_read_yields_rows_spark_can_parse(spark: Any, broker: EmbeddedBroker, namespace: str,
                                                    tmp_path: Path) -> None:
    n = 40
    table = "received_" + namespace
    stream = (
        spark.readStream.format("broker_mqtt")
        .option("broker", broker.url).option("namespace", namespace).option("topics", "/sensors")
        .load()
    )
    assert stream.columns == ["topic", "sender", "received", "data"]
    query = (
        stream.writeStream.format("memory").queryName(table)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="300 milliseconds").start()
    )
    try:
        before = dt.datetime.now(dt.UTC)
        anyio.run(_publish_when_source_listens, broker.url, namespace, n)
        deadline = time.monotonic() + 60
        while spark.table(table).count() < n:
            assert time.monotonic() < deadline, "the source did not deliver every message"
            assert query.exception() is None
            time.sleep(0.2)
    finally:
        query.stop()
    rows = (
        spark.table(table)
        .select("topic", "sender", "received",
                F.from_json("data", "n INT, temp DOUBLE, port STRING").alias("d"))
        .orderBy("d.n").collect()
    )
    assert [r.d.n for r in rows] == list(range(n))
    assert [r.topic for r in rows] == [f"/sensors/{i % 2}" for i in range(n)]
    assert rows[3].d.temp == 23.5 and rows[0].d.port == "443/tcp"
    assert len({r.sender for r in rows}) == 1
    assert all(r.received.replace(tzinfo=dt.UTC) >= before - dt.timedelta(seconds=1) for r in rows)
