"""The streaming source's receiver: a subscriber in a background thread, buffering rows for Spark.

Theory of operation. MQTT pushes; Spark pulls in micro-batches. The source's driver-side reader
(one long-lived Python process per query) starts one :class:`Receiver`: a daemon thread running
its own event loop with one :class:`~broker_mqtt.Endpoint` subscribed to the source's topic
prefixes. Every data message becomes a row ``(topic, sender, received, data-as-JSON)`` appended
to a buffer; the buffer's absolute position is the source's offset. Spark asks for the latest
offset, plans partitions over ``[start, end)`` (the rows travel inside the partitions) and
commits ``end``, which frees the rows before it. Once ``max_buffered`` rows are held, the
receiver stops reading (MQTT flow control then holds further messages at the broker).
With ``payload`` json or raw the endpoint subscribes plain MQTT filters instead and buffers each
PUBLISH as it came (:data:`~.plain_rows.Received`; the executors shape it into a row); with
``payload=sparkplug`` it decodes each PUBLISH in arrival order into one row per metric, and a
payload that does not decode is counted and logged, never a reason to stop.
No pyspark here.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import uuid
from typing import Any

import anyio
import anyio.to_thread

from ..endpoint.endpoint import Endpoint
from ..errors import DecodeError
from .document import to_json
from .options import SourceOptions
from .plain_rows import sparkplug_row
from .sparkplug import DataType, MetricRow, SparkplugDecoder, command_payload, command_topic

__all__ = ["Receiver", "Row"]

log = logging.getLogger("broker_mqtt.spark")

#: seconds between two rebirth requests to one Sparkplug B edge node
REBIRTH_INTERVAL = 30.0

#: a buffered row: (topic, sender, received, data) for node messages, a Received PUBLISH for json
#: and raw, a finished row for sparkplug
Row = tuple[Any, ...]


class Receiver:
    """Buffered rows between absolute offsets ``base`` and ``base + len(rows)``; thread-safe."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.run_id = uuid.uuid4().hex
        self._rows: list[Row] = []
        self._base = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.malformed = 0  #: payloads that did not decode (sparkplug), skipped
        self.rebirths = 0  #: Sparkplug B rebirth requests sent (NCMD Node Control/Rebirth)
        self._asked: dict[tuple[str, str], float] = {}  # (group, edge node) -> when a rebirth was asked
        self._thread = threading.Thread(target=self._run, name="broker-mqtt-spark-source", daemon=True)

    def start(self, timeout: float) -> None:
        """Start the thread; return once the subscription is active; raise what it failed with."""
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"the streaming source did not subscribe within {timeout}s")
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(10)

    def wait_for(self, seconds: float) -> None:
        """Go on receiving for ``seconds``, or until the buffer is full (a batch read); raise what
        the receiver failed with."""
        deadline = time.monotonic() + seconds
        with self._cond:
            while self._error is None and len(self._rows) < self.options.max_buffered:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.1))
        if self._error is not None:
            raise self._error

    @property
    def end(self) -> int:
        with self._cond:
            if self._error is not None and not self._stop.is_set():
                raise self._error
            return self._base + len(self._rows)

    def slice(self, start: int, end: int) -> list[Row]:
        """The rows at offsets ``[start, end)`` still held (those before ``base`` are gone)."""
        with self._cond:
            lo = max(start - self._base, 0)
            hi = max(end - self._base, 0)
            return self._rows[lo:hi]

    def commit(self, end: int) -> None:
        """Forget the rows before ``end``."""
        with self._cond:
            drop = min(max(end - self._base, 0), len(self._rows))
            if drop:
                del self._rows[:drop]
                self._base += drop
                self._cond.notify_all()

    def _append(self, row: Row) -> bool:
        """Append ``row``; wait while the buffer is full. False once stopping."""
        with self._cond:
            while len(self._rows) >= self.options.max_buffered and not self._stop.is_set():
                self._cond.wait(0.5)
            self._rows.append(row)
            return not self._stop.is_set()

    def _run(self) -> None:
        try:
            anyio.run(self._main, backend="asyncio")
        except BaseException as exc:  # reported to Spark through the next latestOffset
            self._error = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        conn = self.options.connection
        async with Endpoint(conn.broker, name=f"{conn.name}-{self.run_id[:8]}", namespace=conn.namespace,
                            tls=conn.tls, qos=conn.qos, connect_timeout=conn.connect_timeout) as ep:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watch_stop, tg.cancel_scope)
                if self.options.payload == "node":
                    await self._node_messages(ep)
                else:
                    await self._plain_messages(ep)
                tg.cancel_scope.cancel()

    async def _node_messages(self, ep: Endpoint) -> None:
        now, utc = dt.datetime.now, dt.UTC
        async with ep.subscribe(*self.options.topics) as sub:
            self._ready.set()
            async for msg in sub:
                if not await self._put((msg.topic, str(msg.sender), now(utc), to_json(msg.data))):
                    return

    async def _plain_messages(self, ep: Endpoint) -> None:
        now, utc = dt.datetime.now, dt.UTC
        decoder = SparkplugDecoder() if self.options.payload == "sparkplug" else None
        async with ep.subscribe_raw(*(p.mqtt_filter for p in self.options.patterns)) as sub:
            self._ready.set()
            async for msg in sub:
                received = now(utc)
                if decoder is None:
                    if not await self._put((msg.topic, msg.payload, msg.qos, msg.retain, received)):
                        return
                    continue
                try:
                    metrics = decoder.receive(msg.topic, msg.payload)
                except DecodeError as exc:
                    self.malformed += 1
                    if self.malformed <= 10 or self.malformed % 1000 == 0:
                        log.warning("broker_mqtt source: skipped a Sparkplug B message on %r (%d so far): %s",
                                    msg.topic, self.malformed, exc)
                    continue
                if self.options.rebirth and metrics:
                    await self._ask_rebirth(ep, metrics[0])
                for metric in metrics:
                    if not await self._put(sparkplug_row(metric, received)):
                        return

    async def _ask_rebirth(self, ep: Endpoint, row: MetricRow) -> None:
        """Ask an edge node whose births this source has not seen (data with unknown aliases, or
        from a node never born here) to send them again, as a Sparkplug B host application does:
        an NCMD ``Node Control/Rebirth``, at most once per ``REBIRTH_INTERVAL`` per node."""
        if row.message_type not in ("NDATA", "DDATA", "DBIRTH") or row.group == "":
            return
        if row.online is not None and row.metric is not None:
            return
        key = (row.group, row.edge_node)
        now = time.monotonic()
        if now - self._asked.get(key, -REBIRTH_INTERVAL) < REBIRTH_INTERVAL:
            return
        self._asked[key] = now
        self.rebirths += 1
        payload = command_payload([("Node Control/Rebirth", True, DataType.Boolean)], int(time.time() * 1000))
        await ep.publish_raw(command_topic(row.group, row.edge_node, None), payload, qos=0)

    async def _put(self, row: Row) -> bool:
        """Buffer ``row``, waiting (in a thread) while the buffer is full; False once stopping."""
        if self._has_room():
            return self._append(row)
        return await anyio.to_thread.run_sync(self._append, row, abandon_on_cancel=True)

    def _has_room(self) -> bool:
        return len(self._rows) < self.options.max_buffered

    async def _watch_stop(self, scope: Any) -> None:
        await anyio.to_thread.run_sync(self._stop.wait, abandon_on_cancel=True)
        scope.cancel()
