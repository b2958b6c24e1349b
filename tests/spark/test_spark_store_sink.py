"""The store sink against a real local Spark, a real mosquitto and elected-store replicas in their own
processes: rows become puts, and a failed and retried task applies no row twice."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F  # noqa: N812

from broker_mqtt import EmbeddedBroker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "store"))
from elected_procs import ElectedProc, elected_replicas  # noqa: E402

from .conftest import TouchWhen  # noqa: E402

FAIL_AT = 3000


@pytest.fixture
def replicas(broker: EmbeddedBroker, namespace: str) -> Any:
    with elected_replicas(broker.url, namespace, "sink") as nodes:
        yield nodes


def _contents(nodes: list[ElectedProc]) -> tuple[dict[Any, Any], dict[str, Any]]:
    for n in nodes:
        n.quiet()
    for n in nodes:
        n.wait_quiet()
    dumps = [n.dump() for n in nodes]
    assert dumps[0]["contents"] == dumps[1]["contents"]
    return {json.dumps(json.loads(k)): v for k, v in dumps[0]["contents"].items()}, dumps[0]["stats"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_rows_become_puts_and_a_retried_task_applies_no_row_twice(spark: Any, broker: EmbeddedBroker,
                                                                   namespace: str, replicas: Any,
                                                                   tmp_path: Path) -> None:
    n = 8000  # two partitions of 4000; partition 0 fails once at row FAIL_AT
    arrived = tmp_path / "first-puts-arrived"


    @F.udf(returnType="int", useArrow=False)
    def attempt(i: int) -> int:
        import os

        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 0 and i == FAIL_AT:
            raise RuntimeError("injected failure of the first attempt")
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 1 and i == 0:
            # The failed attempt's rows before FAIL_AT reach the store only as it fails (none arrive
            # while its UDF is stuck), racing the retry's repeats of them: the retry waits until one
            # (dev-7) is in the store, so that its repeat finds it there and is not applied.
            deadline = time.monotonic() + 120
            while not os.path.exists(arrived):
                if time.monotonic() > deadline:
                    raise RuntimeError("the failed attempt's put of dev-7 never reached the store")
                time.sleep(0.05)
        return int(ctx.attemptNumber())

    old = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "200")
    # until the retry goes on, partition 0's puts can only be the first attempt's
    watch = TouchWhen(lambda: json.dumps("dev-7") in replicas[0].dump()["contents"], arrived)
    try:
        with watch:
            df = spark.range(n, numPartitions=2).select(
                F.concat(F.lit("dev-"), F.col("id")).alias("device"), F.col("id").alias("reading"),
                attempt("id").alias("attempt"))
            (df.write.format("broker_mqtt").option("broker", broker.url).option("namespace", namespace)
             .option("store", "sink").option("key", "device").mode("append").save())
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", old)
    assert watch.touched  # the retry went on after the first attempt's put, not at its deadline
    contents, stats = _contents(replicas)
    assert len(contents) == n
    assert contents[json.dumps("dev-7")] == {"reading": 7, "attempt": 0}
    first_attempt = [i for i in range(n) if contents[json.dumps(f"dev-{i}")]["attempt"] == 0]
    # partition 1 ran once; partition 0's first attempt wrote the rows before the failure, and the
    # retry's repeats of them were answered, not applied (they would carry attempt 1)
    assert any(i < FAIL_AT for i in first_attempt)
    assert all(contents[json.dumps(f"dev-{i}")]["attempt"] == 1 for i in range(FAIL_AT, n // 2))
    assert stats["records_applied"] == n  # one record per row: nothing applied twice


def test_store_sink_options_are_checked_on_the_driver(spark: Any, broker: EmbeddedBroker, namespace: str) -> None:
    df = spark.range(3).select(F.col("id").alias("device"))
    for opts, message in [({"store": "s"}, "needs option 'key'"),
                          ({"store": "s", "key": "nope"}, "not columns"),
                          ({"store": "s", "topic": "/x", "key": "device"}, "exactly one"),
                          ({"topic": "/x", "key": "device"}, "give option 'store'")]:
        writer = df.write.format("broker_mqtt").option("broker", broker.url).option("namespace", namespace)
        for k, v in opts.items():
            writer = writer.option(k, v)
        with pytest.raises(Exception, match=message):  # the driver's UsageError, wrapped by Spark
            writer.mode("append").save()
