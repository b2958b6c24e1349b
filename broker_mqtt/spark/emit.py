"""The executor side of the sink: one partition's record batches out through one Endpoint.

Theory of operation. Each Spark task runs :func:`emit_partition` in its Python worker: it opens
its own :class:`~broker_mqtt.Endpoint` (nothing from the driver but the picklable
:class:`SinkOptions`), turns each Arrow record batch into data-model maps
(:class:`RowConverter`), adds the row id ``[job, batch, partition, row]`` under the reserved key
and publishes every row as one ordinary data message. The endpoint's outbox coalesces
consecutive messages into large PUBLISHes and bounds what is queued or unacknowledged
(``maxPendingMessages``): ``publish`` waits when the bound is reached. Spark's iterator blocks
on the JVM, so it is advanced in a worker thread while the event loop keeps sending. The task
succeeds only once the broker acknowledged every message (``flush``); otherwise it raises, Spark
retries it, and receivers drop the repeats by row id (rowid.py). No pyspark here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pyarrow as pa  # type: ignore[import-untyped]  # reason: pyarrow ships no type information

from ..endpoint import Endpoint
from ..errors import TopicError, TransportError
from .convert import RowConverter
from .options import SinkOptions

__all__ = ["emit_partition"]

_YIELD_EVERY = 1024  # rows between checkpoints, so the sender runs while we encode


def emit_partition(options: SinkOptions, batches: Iterator[pa.RecordBatch], *, job: str, batch_id: int,
                   partition: int) -> int:
    """Publish every row of ``batches``; return the number of rows. Blocks until acknowledged.

    Raises :class:`TopicError` for a row whose topic is null or invalid, :class:`TransportError`
    subclasses when the broker is unreachable or does not acknowledge within ``flushTimeout``.
    Rows published before a failure stay published (at-least-once: the retry sends them again
    with the same row ids).
    """
    it = iter(batches)
    first = next(it, None)
    while first is not None and first.num_rows == 0:
        first = next(it, None)
    if first is None:
        return 0  # an empty partition opens no connection
    count: int = anyio.run(_emit, options, first, it, job, batch_id, partition, backend="asyncio")
    return count


async def _emit(options: SinkOptions, first: pa.RecordBatch, it: Iterator[pa.RecordBatch], job: str,
                batch_id: int, partition: int) -> int:
    conn = options.connection
    endpoint = Endpoint(
        conn.broker,
        name=f"{conn.name}-{job[:8]}-{batch_id}-{partition}",
        namespace=conn.namespace,
        tls=conn.tls,
        qos=conn.qos,
        connect_timeout=conn.connect_timeout,
        close_timeout=options.flush_timeout,
        max_batch_bytes=options.batch_bytes,
        max_pending_messages=options.max_pending,
    )
    converter: RowConverter | None = None
    index = 0
    async with endpoint as ep:
        publish = ep.publish
        batch: pa.RecordBatch | None = first
        while batch is not None:
            n = batch.num_rows
            if n:
                if converter is None or not batch.schema.equals(converter.schema):
                    converter = RowConverter(batch.schema, topic_column=options.topic_column,
                                             keep_topic_column=options.keep_topic_column,
                                             decimals=options.decimals)
                columns = converter.values(batch)
                names = converter.names
                if options.id_key:
                    names = [*names, options.id_key]
                    columns.append([[job, batch_id, partition, i] for i in range(index, index + n)])
                topics: list[Any] | None = converter.topics(batch)
                if topics is None:
                    topic = options.topic
                    assert topic is not None
                    for k, values in enumerate(zip(*columns, strict=True)):
                        await publish(topic, dict(zip(names, values, strict=True)))
                        if k % _YIELD_EVERY == _YIELD_EVERY - 1:
                            await anyio.lowlevel.checkpoint()
                else:
                    for k, (topic, values) in enumerate(zip(topics, zip(*columns, strict=True), strict=True)):
                        if not isinstance(topic, str):
                            raise TopicError(f"row {index + k} of partition {partition} has no topic "
                                             f"in column {options.topic_column!r}")
                        await publish(topic, dict(zip(names, values, strict=True)))
                        if k % _YIELD_EVERY == _YIELD_EVERY - 1:
                            await anyio.lowlevel.checkpoint()
                index += n
            batch = await anyio.to_thread.run_sync(next, it, None)
        if not await ep.flush(options.flush_timeout):
            raise TransportError(
                f"partition {partition}: the broker did not acknowledge {ep.statistics().pending} "
                f"messages within {options.flush_timeout}s"
            )
    return index
