"""The sink against a real local Spark and a real mosquitto: batch, streaming, retries, types."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F  # noqa: N812

from broker_mqtt import EmbeddedBroker
from broker_mqtt.spark import ROW_ID_KEY, Deduplicator, row_id

UTC = dt.UTC


def _write(df: Any, broker: EmbeddedBroker, namespace: str, **options: str) -> None:
    writer = df.write.format("broker_mqtt").option("broker", broker.url).option("namespace", namespace)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_batch_write_100k_rows_received_exactly_once(spark: Any, broker: EmbeddedBroker, namespace: str,
                                                      collector: Any) -> None:
    n = 100_000
    sub = collector(broker.url, namespace, "/sensors")
    df = spark.range(n, numPartitions=4).selectExpr("id", "cast(id % 7 as int) as device", "cast(id as double) * 0.5 as value")
    _write(df, broker, namespace, topic="/sensors/agg")
    messages = sub.wait_for(n, timeout=120, settle=0.5)
    dedup = Deduplicator()
    unique = [m for m in messages if dedup.is_new(m.data)]
    assert len(unique) == n
    assert sorted(m.data["id"] for m in unique) == list(range(n))
    first = unique[0]
    assert first.topic == "/sensors/agg"
    assert set(first.data) == {"id", "device", "value", ROW_ID_KEY}
    assert first.data["device"] == first.data["id"] % 7 and first.data["value"] == first.data["id"] * 0.5
    ids = [row_id(m.data) for m in unique]
    assert len({i.job for i in ids if i}) == 1, "one job id per save()"
    assert {i.partition for i in ids if i} == {0, 1, 2, 3}
    assert {i.batch for i in ids if i} == {0}


def test_topic_column_routes_each_row(spark: Any, broker: EmbeddedBroker, namespace: str, collector: Any) -> None:
    sub = collector(broker.url, namespace, "/dev")
    df = spark.createDataFrame([(f"/dev/{i % 3}", i) for i in range(30)], "topic string, n int")
    _write(df, broker, namespace, topicColumn="topic")
    messages = sub.wait_for(30, settle=0.2)
    assert len(messages) == 30
    for m in messages:
        assert m.topic == f"/dev/{m.data['n'] % 3}"
        assert "topic" not in m.data


def test_options_are_checked_on_the_driver(spark: Any, broker: EmbeddedBroker, namespace: str) -> None:
    df = spark.range(3)
    with pytest.raises(Exception, match="exactly one of the options 'topic', 'topicColumn' and 'store'"):
        _write(df, broker, namespace)
    with pytest.raises(Exception, match="topicColumn 'nope' is not a column"):
        _write(df, broker, namespace, topicColumn="nope")


@pytest.mark.slow
def test_unreachable_broker_fails_the_write_with_the_reason(spark: Any, namespace: str) -> None:
    df = spark.range(3, numPartitions=1)
    with pytest.raises(Exception, match="could not connect to the broker"):
        df.write.format("broker_mqtt").option("broker", "mqtt://127.0.0.1:1").option("connectTimeout", "0.5") \
            .option("topic", "/x").option("namespace", namespace).mode("append").save()


def test_type_mapping(spark: Any, broker: EmbeddedBroker, namespace: str, collector: Any) -> None:
    sub = collector(broker.url, namespace, "/types")
    df = spark.sql("""
        SELECT true AS b, CAST(1 AS TINYINT) AS i8, CAST(2 AS SMALLINT) AS i16, 3 AS i32, 4L AS i64,
               CAST(1.5 AS FLOAT) AS f32, 2.25D AS f64, 'é' AS s, X'0102' AS bin,
               TIMESTAMP'2024-01-02 03:04:05.123456' AS ts,
               TIMESTAMP_NTZ'2024-01-02 03:04:05' AS ntz,
               DATE'2024-01-02' AS d,
               INTERVAL '1 02:03:04.5' DAY TO SECOND AS span,
               CAST(12.34 AS DECIMAL(10, 2)) AS dec,
               array(1, 2, NULL) AS arr,
               map('a', 1, 'b', 2) AS m,
               named_struct('x', 1, 'when', TIMESTAMP'2024-01-02 00:00:00', 'price', CAST(1.5 AS DECIMAL(4, 2))) AS st,
               array(named_struct('k', DATE'2024-02-03')) AS nested,
               map(1, array(CAST(0.1 AS DECIMAL(3, 1)))) AS intkeys,
               CAST(NULL AS INT) AS n_int, CAST(NULL AS STRING) AS n_str,
               CAST(NULL AS ARRAY<INT>) AS n_arr, CAST(NULL AS TIMESTAMP) AS n_ts
    """)  # the session time zone is UTC (conftest)
    _write(df, broker, namespace, topic="/types")
    [msg] = sub.wait_for(1, settle=0.2)
    data = dict(msg.data)
    assert isinstance(data.pop(ROW_ID_KEY), list)
    assert data == {
        "b": True, "i8": 1, "i16": 2, "i32": 3, "i64": 4, "f32": 1.5, "f64": 2.25, "s": "é",
        "bin": b"\x01\x02",
        "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
        "ntz": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
        "d": "2024-01-02",
        "span": dt.timedelta(days=1, hours=2, minutes=3, seconds=4.5),
        "dec": "12.34",
        "arr": [1, 2, None],
        "m": {"a": 1, "b": 2},
        "st": {"x": 1, "when": dt.datetime(2024, 1, 2, tzinfo=UTC), "price": "1.50"},
        "nested": [{"k": "2024-02-03"}],
        "intkeys": {1: ["0.1"]},
        "n_int": None, "n_str": None, "n_arr": None, "n_ts": None,
    }
    assert data["ts"].utcoffset() == dt.timedelta(0)


def test_decimals_as_float_and_no_row_ids(spark: Any, broker: EmbeddedBroker, namespace: str,
                                          collector: Any) -> None:
    sub = collector(broker.url, namespace, "/dec")
    df = spark.sql("SELECT CAST(12.5 AS DECIMAL(10, 2)) AS dec")
    _write(df, broker, namespace, topic="/dec", decimals="float", idKey="")
    [msg] = sub.wait_for(1, settle=0.2)
    assert msg.data == {"dec": 12.5}
    assert isinstance(msg.data["dec"], float) and not isinstance(msg.data["dec"], Decimal)


# The Python UDF worker's output reaches the JVM in 64 KiB writes: fail late enough that the
# writer has received (and published) thousands of rows of the first attempt by then.
FAIL_AT = 20_000


def test_failed_and_retried_task_delivers_no_duplicate_after_dedup(spark: Any, broker: EmbeddedBroker,
                                                                   namespace: str, collector: Any) -> None:
    n = 50_000  # two partitions of 25000; partition 0 fails once at row FAIL_AT
    sub = collector(broker.url, namespace, "/retry")
    @F.udf(returnType="long", useArrow=False)  # the Arrow path needs pandas
    def flaky(i: int) -> int:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 0 and i == FAIL_AT:
            # no pause before failing: rows before this one are already on their way to the writer
            # (see FAIL_AT), and a UDF that blocks here holds them back until it fails anyway
            raise RuntimeError("injected failure of the first attempt")
        return i

    old = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        df = spark.range(n, numPartitions=2).select(flaky("id").alias("id"))
        _write(df, broker, namespace, topic="/retry")
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", old)
    # the repeats count towards n: wait for every row instead (the failed attempt's come first)
    messages = sub.wait_until(
        lambda ms: len(ms) >= n and len({(r.partition, r.row) for m in ms if (r := row_id(m.data))}) == n, 120)
    dedup = Deduplicator()
    unique = [m.data["id"] for m in messages if dedup.is_new(m.data)]
    assert sorted(unique) == list(range(n))
    repeats = len(messages) - n
    assert repeats > 0, "the failed first attempt should have published some rows before failing"
    assert dedup.statistics().dropped == repeats
    # The first attempt's rows are a prefix of partition 0, repeated with the same ids.
    senders = {m.sender for m in messages}
    assert len(senders) == 3, "one endpoint per task attempt: two attempts of partition 0, one of 1"


@pytest.mark.slow
def test_streaming_write_from_a_rate_source(spark: Any, broker: EmbeddedBroker, namespace: str,
                                            collector: Any, tmp_path: Path) -> None:
    sub = collector(broker.url, namespace, "/rate")
    stream = spark.readStream.format("rate").option("rowsPerSecond", 100).option("numPartitions", 2).load()
    query = (
        stream.writeStream.format("broker_mqtt")
        .option("broker", broker.url).option("namespace", namespace).option("topic", "/rate")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 90
        while len({rid.batch for m in list(sub.messages) if (rid := row_id(m.data))}) < 2:
            assert time.monotonic() < deadline, "expected rows of two micro-batches"
            assert query.exception() is None
            time.sleep(0.2)
    finally:
        query.stop()
    messages = sub.wait_for(1, settle=0.5)
    dedup = Deduplicator()
    unique = [m for m in messages if dedup.is_new(m.data)]
    values = [m.data["value"] for m in unique]
    assert len(values) == len(set(values)) == len(messages)
    assert all(isinstance(m.data["timestamp"], dt.datetime) and m.data["timestamp"].tzinfo for m in unique)
    ids = [row_id(m.data) for m in unique]
    assert {i.job for i in ids if i} == {uuid.UUID(query.id).hex}
    assert len({i.batch for i in ids if i}) >= 2, "several micro-batches"
