"""The bridge on a Spark standalone cluster: a master and a worker started from pyspark's own
spark-class (tests/spark/cluster.py), a driver in a child process (tests/spark/cluster_job.py), tasks
in the worker's executor. Batch sink, store sink and streaming source, against a real mosquitto.

One cluster and one Spark application for the module: the executor stays up between the tests.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from broker_mqtt import EmbeddedBroker
from broker_mqtt.spark import ROW_ID_KEY, Deduplicator, row_id

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "store"))
from elected_procs import ElectedProc, elected_replicas  # noqa: E402

from .cluster import ClusterDriver, SparkCluster  # noqa: E402
from .test_spark_source import _publish_when_source_listens  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    c = SparkCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def driver(cluster: SparkCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterDriver]:
    d = ClusterDriver(cluster, tmp_path_factory.mktemp("spark-driver"))
    try:
        yield d
    finally:
        d.close()


def _on_executors(result: dict[str, Any]) -> None:
    assert result["executors"], "the tasks ran in an executor of the worker, not in the driver"


def test_the_driver_runs_on_the_cluster(cluster: SparkCluster, driver: ClusterDriver) -> None:
    assert driver.ready["master"] == cluster.url
    state = cluster.state()
    assert state is not None
    assert [app["name"] for app in state["activeapps"]] == ["broker-mqtt-cluster-test"]


def test_batch_sink_every_row_once(driver: ClusterDriver, broker: EmbeddedBroker, namespace: str,
                                   collector: Any) -> None:
    n = 20_000
    sub = collector(broker.url, namespace, "/sensors")
    result = driver.run("emit", "written", broker=broker.url, namespace=namespace, topic="/sensors/agg",
                        rows=n, partitions=4)
    _on_executors(result)
    # every row id seen (repeats of a retried task count towards the messages, not towards n)
    messages = sub.wait_until(
        lambda ms: len({(r.partition, r.row) for m in ms if (r := row_id(m.data))}) >= n, 120)
    dedup = Deduplicator()
    unique = [m for m in messages if dedup.is_new(m.data)]
    assert len(unique) == n
    assert sorted(m.data["id"] for m in unique) == list(range(n))
    assert {m.topic for m in unique} == {"/sensors/agg"}
    assert set(unique[0].data) == {"id", "device", "value", ROW_ID_KEY}
    ids = [row_id(m.data) for m in unique]
    assert len({i.job for i in ids if i}) == 1
    assert {i.partition for i in ids if i} == {0, 1, 2, 3}


@pytest.fixture
def replicas(broker: EmbeddedBroker, namespace: str) -> Iterator[list[ElectedProc]]:
    with elected_replicas(broker.url, namespace, "cluster-sink") as nodes:
        yield nodes


def test_store_sink_fills_every_replica(driver: ClusterDriver, broker: EmbeddedBroker, namespace: str,
                                        replicas: list[ElectedProc]) -> None:
    n = 1000
    result = driver.run("store", "written", broker=broker.url, namespace=namespace, store="cluster-sink",
                        rows=n, partitions=2)
    _on_executors(result)
    # save() returned once the master applied every put; the other replica follows a little later
    deadline = time.monotonic() + 60
    while True:
        dumps = [r.dump() for r in replicas]
        if all(len(d["contents"]) >= n for d in dumps) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    expected = {json.dumps(f"dev-{i}"): {"reading": i} for i in range(n)}
    for d in dumps:
        assert {json.dumps(json.loads(k)): v for k, v in d["contents"].items()} == expected
    assert [d["stats"]["records_applied"] for d in dumps] == [n, n]


def test_streaming_source_delivers_every_message(driver: ClusterDriver, broker: EmbeddedBroker, namespace: str,
                                                 tmp_path: Path) -> None:
    n = 40
    driver.request("read", broker=broker.url, namespace=namespace, topics="/sensors", count=n,
                   checkpoint=str(tmp_path / "ckpt"), timeout=120)
    driver.expect("started")
    anyio.run(_publish_when_source_listens, broker.url, namespace, n)
    result = driver.expect("read")
    _on_executors(result)
    rows = sorted(result["rows"], key=lambda r: r["data"]["n"])
    assert [r["data"]["n"] for r in rows] == list(range(n))
    assert [r["topic"] for r in rows] == [f"/sensors/{i % 2}" for i in range(n)]
    assert rows[3]["data"]["temp"] == 23.5 and rows[0]["data"]["port"] == "443/tcp"
    assert len({r["sender"] for r in rows}) == 1
