"""The streaming source's receiver: a subscriber in a background thread, buffering rows for Spark.

Theory of operation. MQTT pushes; Spark pulls in micro-batches. The source's driver-side reader
(one long-lived Python process per query) starts one :class:`Receiver`: a daemon thread running
its own event loop with one :class:`~broker_mqtt.Endpoint` subscribed to the source's topic
prefixes. Every data message becomes a row ``(topic, sender, received, data-as-JSON)`` appended
to a buffer; the buffer's absolute position is the source's offset. Spark asks for the latest
offset, plans partitions over ``[start, end)`` (the rows travel inside the partitions) and
commits ``end``, which frees the rows before it. Once ``max_buffered`` rows are held, the
receiver stops reading (MQTT flow control then holds further messages at the broker).
No pyspark here.
"""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from typing import Any

import anyio
import anyio.to_thread

from ..endpoint.endpoint import Endpoint
from .document import to_json
from .options import SourceOptions

__all__ = ["Receiver", "Row"]

Row = tuple[str, str, dt.datetime, str]


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
            async with ep.subscribe(*self.options.topics) as sub, anyio.create_task_group() as tg:
                tg.start_soon(self._watch_stop, tg.cancel_scope)
                self._ready.set()
                now = dt.datetime.now
                utc = dt.UTC
                async for msg in sub:
                    row = (msg.topic, str(msg.sender), now(utc), to_json(msg.data))
                    if not self._has_room():
                        if not await anyio.to_thread.run_sync(self._append, row, abandon_on_cancel=True):
                            break
                    else:
                        self._append(row)
                tg.cancel_scope.cancel()

    def _has_room(self) -> bool:
        return len(self._rows) < self.options.max_buffered

    async def _watch_stop(self, scope: Any) -> None:
        await anyio.to_thread.run_sync(self._stop.wait, abandon_on_cancel=True)
        scope.cancel()
