"""The store sink: one partition's rows into an elected store, each row one ``put`` (docs/spark.md).

Theory of operation. With ``.option("store", "config").option("key", "device")`` the sink writes
every row as ``put(key, value)`` into the elected store ``config``: the key is the row's ``device``
column (several comma-separated key columns make a list key), the value the map of the other
columns, mapped to the data model like emitted messages. Each Spark task opens its own endpoint and
a :class:`~broker_mqtt.store.StoreWriter` (no replica on the executor) whose writer id names what
the task writes: ``spark:<job>:<batch>:<partition>``, the row ids' first three parts. The rows of a
partition are written in order, numbered 1, 2, ...; a re-run task (a failure, a retry, a replayed
micro-batch) writes the same rows under the same writer id and numbers, and the store's master
answers those repeats without applying them again: every row is applied exactly once.

The task succeeds once the master has acknowledged every put as durable (per the store's
durability); a put the master refuses, or no master within ``flushTimeout``, fails the task
(Spark retries it). No pyspark here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pyarrow as pa

from ..endpoint.endpoint import Endpoint
from ..errors import TransportError
from ..store.writer import StoreWriter
from .convert import RowConverter
from .options import SinkOptions

__all__ = ["store_partition", "writer_id"]


def writer_id(job: str, batch_id: int, partition: int) -> str:
    """The store writer id of one task's rows: the same for every attempt of that task."""
    return f"spark:{job}:{batch_id}:{partition}"


def store_partition(options: SinkOptions, batches: Iterator[pa.RecordBatch], *, job: str, batch_id: int,
                    partition: int) -> int:
    """Put every row of ``batches`` into ``options.store``; return the number of rows.

    Blocks until every put is acknowledged. Raises the store's error for a refused put and
    :class:`TransportError` when the broker or the store's master does not answer in time.
    """
    return int(anyio.run(_store, options, batches, writer_id(job, batch_id, partition), backend="asyncio"))


def _rows(options: SinkOptions, batch: pa.RecordBatch, converter: RowConverter) -> Iterator[tuple[Any, Any]]:
    assert options.key is not None
    columns = converter.values(batch)
    names = converter.names
    key_index = [names.index(k) for k in options.key]
    value_index = [i for i in range(len(names)) if i not in key_index]
    for r in range(batch.num_rows):
        keys = [columns[i][r] for i in key_index]
        key = keys[0] if len(keys) == 1 else keys
        yield key, {names[i]: columns[i][r] for i in value_index}


async def _store(options: SinkOptions, batches: Iterator[pa.RecordBatch], writer: str) -> int:
    assert options.store is not None
    conn = options.connection
    count = 0
    converter: RowConverter | None = None
    async with Endpoint(conn.broker, namespace=conn.namespace, name=conn.name, tls=conn.tls,
                        connect_timeout=conn.connect_timeout, qos=1) as ep:
        async with StoreWriter(ep, options.store, writer, write_timeout=options.flush_timeout,
                               max_pending=options.max_pending) as w:
            if not await w.await_master(options.flush_timeout):
                raise TransportError(f"no master of store {options.store!r} answered within "
                                     f"{options.flush_timeout} s")
            while True:
                batch = await anyio.to_thread.run_sync(next, batches, None)
                if batch is None:
                    break
                if converter is None:
                    converter = RowConverter(batch.schema, topic_column=None, keep_topic_column=False,
                                             decimals=options.decimals)
                for key, value in _rows(options, batch, converter):
                    await w.put_nowait(key, value)
                    count += 1
            await w.drain()
    return count
