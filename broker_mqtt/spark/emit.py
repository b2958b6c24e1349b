"""The executor side of the sink: one partition's record batches out through one Endpoint.

Theory of operation. Each Spark task runs :func:`emit_partition` in its Python worker: it opens
its own :class:`~broker_mqtt.Endpoint` (nothing from the driver but the picklable
:class:`SinkOptions`). A worker thread advances Spark's iterator (it blocks on the JVM) and
encodes each Arrow record batch column by column into one CBOR payload per row, the row id
``[job, batch, partition, row]`` included (:class:`~.columnar.PayloadEncoder`); meanwhile the
event loop keeps sending. The payloads go to :meth:`Endpoint.publish_encoded`, one call per
batch and topic: the messages are exactly those ``publish(topic, row)`` would send. The
endpoint's outbox coalesces them into large PUBLISHes and bounds what is queued or
unacknowledged (``maxPendingMessages``): ``publish_encoded`` waits when the bound is reached. The
task succeeds only once the broker acknowledged every message (``flush``); otherwise it raises,
Spark retries it, and receivers drop the repeats by row id (rowid.py). No pyspark here.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain

import anyio
import anyio.to_thread
import pyarrow as pa

from ..endpoint.endpoint import Endpoint
from ..errors import TopicError, TransportError
from .columnar import PayloadEncoder
from .options import SinkOptions

__all__ = ["emit_partition", "flush_or_fail", "task_endpoint"]


def emit_partition(options: SinkOptions, batches: Iterator[pa.RecordBatch], *, job: str, batch_id: int,
                   partition: int) -> int:
    """Publish every row of ``batches``; return the number of rows. Blocks until acknowledged.

    Raises :class:`TopicError` for a batch with a row whose topic is null or invalid (the rows
    of that batch are not published), :class:`TransportError` subclasses when the broker is
    unreachable or does not acknowledge within ``flushTimeout``. Rows published before a
    failure stay published (at-least-once: the retry sends them again with the same row ids).
    """
    it = iter(batches)
    first = next(it, None)
    while first is not None and first.num_rows == 0:
        first = next(it, None)
    if first is None:
        return 0  # an empty partition opens no connection
    encoding = _Encoding(options, chain([first], it), job=job, batch_id=batch_id, partition=partition)
    count: int = anyio.run(_emit, options, encoding, backend="asyncio")
    return count


class _Encoding:
    """Pulls record batches and encodes them; :meth:`next` runs in a worker thread."""

    def __init__(self, options: SinkOptions, batches: Iterator[pa.RecordBatch], *, job: str, batch_id: int,
                 partition: int) -> None:
        self.options = options
        self.batches = batches
        self.job, self.batch_id, self.partition = job, batch_id, partition
        self.rows = 0  # index of the next row in the partition
        self._encoder: PayloadEncoder | None = None

    def next(self) -> list[tuple[str, list[bytes]]] | None:
        """The next non-empty batch as ``(topic, payloads)`` groups in row order per topic; None at the end."""
        batch = next(self.batches, None)
        while batch is not None and batch.num_rows == 0:
            batch = next(self.batches, None)
        if batch is None:
            return None
        options = self.options
        encoder = self._encoder
        if encoder is None or not batch.schema.equals(encoder.schema):
            encoder = self._encoder = PayloadEncoder(
                batch.schema, topic_column=options.topic_column, keep_topic_column=options.keep_topic_column,
                decimals=options.decimals, id_key=options.id_key, job=self.job, batch_id=self.batch_id,
                partition=self.partition)
        payloads: list[bytes] = encoder.payloads(batch, self.rows).to_pylist()
        topics = encoder.topics(batch)
        first_row, self.rows = self.rows, self.rows + batch.num_rows
        if topics is None:
            assert options.topic is not None
            return [(options.topic, payloads)]
        groups: dict[str, list[bytes]] = {}
        for k, (topic, payload) in enumerate(zip(topics, payloads, strict=True)):
            if not isinstance(topic, str):
                raise TopicError(f"row {first_row + k} of partition {self.partition} has no topic "
                                 f"in column {options.topic_column!r}")
            group = groups.get(topic)
            if group is None:
                group = groups[topic] = []
            group.append(payload)
        return list(groups.items())


def task_endpoint(options: SinkOptions, name: str) -> Endpoint:
    """The endpoint one write task publishes through (each task its own: it works on a cluster)."""
    conn = options.connection
    return Endpoint(
        conn.broker,
        name=name,
        namespace=conn.namespace,
        tls=conn.tls,
        qos=conn.qos,
        connect_timeout=conn.connect_timeout,
        close_timeout=options.flush_timeout,
        max_batch_bytes=options.batch_bytes,
        max_pending_messages=options.max_pending,
    )


async def flush_or_fail(ep: Endpoint, options: SinkOptions, partition: int) -> None:
    """Return once the broker acknowledged everything the task sent; :class:`TransportError` (the
    task fails, Spark retries it) when it did not within ``flushTimeout``."""
    if not await ep.flush(options.flush_timeout):
        raise TransportError(f"partition {partition}: the broker did not acknowledge "
                             f"{ep.statistics().pending} messages within {options.flush_timeout}s")


async def _emit(options: SinkOptions, encoding: _Encoding) -> int:
    name = f"{options.connection.name}-{encoding.job[:8]}-{encoding.batch_id}-{encoding.partition}"
    async with task_endpoint(options, name) as ep:
        while (groups := await anyio.to_thread.run_sync(encoding.next)) is not None:
            for topic, payloads in groups:
                await ep.publish_encoded(topic, payloads)
        await flush_or_fail(ep, options, encoding.partition)
    return encoding.rows
