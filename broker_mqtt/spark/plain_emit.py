"""The executor side of the sink for plain MQTT topics: rows out as JSON, raw bytes or Sparkplug B commands.

Theory of operation. Ordinary devices read one document per PUBLISH on their own topic, so each
row becomes one PUBLISH (no node-message envelope, no coalescing) through the task's own
:class:`~broker_mqtt.Endpoint` (:meth:`~broker_mqtt.Endpoint.publish_raw`). A worker thread pulls
each Arrow record batch from Spark and encodes it while the event loop sends the previous one:
``payload=json`` writes the row's columns as a JSON object (the topic's columns left out unless
``keepTopicColumn``) to the topic the template builds from the row (``site1/{device}/cmd``);
``payload=raw`` sends the ``payloadColumn`` (binary, or a string as UTF-8) as is;
``payload=sparkplug`` gathers consecutive rows for the same edge node and device into one NCMD or
DCMD payload (columns ``group``, ``edge_node``, ``device``, ``metric``, ``value``, and an optional
``datatype`` naming a Sparkplug B data type). A row that cannot be sent (a null or malformed topic
level, a null payload, a value Sparkplug cannot carry) fails the task before any row of its batch
is published. The task returns once the broker acknowledged every PUBLISH (QoS 1) and fails
otherwise; Spark's retry then sends the partition again (at least once; a device that must not
act twice needs an id in the command, e.g. the aggregate's window). No pyspark here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import chain
from typing import Any

import anyio
import anyio.to_thread
import pyarrow as pa

from ..errors import TopicError, UsageError
from .emit import flush_or_fail, task_endpoint
from .json_rows import json_payload
from .options import SinkOptions
from .sparkplug import DataType, command_payload, command_topic
from .topic_pattern import level_text

__all__ = ["emit_plain_partition"]

Publish = tuple[str, bytes]


def emit_plain_partition(options: SinkOptions, batches: Iterator[pa.RecordBatch], *, job: str, batch_id: int,
                         partition: int) -> int:
    """Publish every row of ``batches`` as a plain PUBLISH; return the number of rows. Blocks until
    acknowledged; raises :class:`TopicError` or :class:`UsageError` for a row that cannot be sent and
    :class:`TransportError` when the broker is unreachable or does not acknowledge in time."""
    it = iter(batches)
    first = next(it, None)
    while first is not None and first.num_rows == 0:
        first = next(it, None)
    if first is None:
        return 0  # an empty partition opens no connection
    encoding = _Encoding(options, chain([first], it), partition=partition)
    name = f"{options.connection.name}-{job[:8]}-{batch_id}-{partition}"
    count: int = anyio.run(_emit, options, encoding, name, backend="asyncio")
    return count


class _Encoding:
    """Pulls record batches and turns them into PUBLISHes; :meth:`next` runs in a worker thread."""

    def __init__(self, options: SinkOptions, batches: Iterator[pa.RecordBatch], *, partition: int) -> None:
        self.options = options
        self.batches = batches
        self.partition = partition
        self.rows = 0

    def next(self) -> list[Publish] | None:
        batch = next(self.batches, None)
        while batch is not None and batch.num_rows == 0:
            batch = next(self.batches, None)
        if batch is None:
            return None
        rows = batch.to_pylist()
        first, self.rows = self.rows, self.rows + len(rows)
        try:
            if self.options.payload == "sparkplug":
                return _sparkplug(rows)
            return [self._publish(row) for row in rows]
        except (TopicError, UsageError) as exc:
            raise type(exc)(f"partition {self.partition}, rows {first}..{self.rows - 1}: {exc}") from None

    def _publish(self, row: dict[str, Any]) -> Publish:
        options = self.options
        if options.template is not None:
            topic = options.template.format(row)
            used: tuple[str, ...] = options.template.columns
        else:
            assert options.topic_column is not None
            value = row.get(options.topic_column)
            if not isinstance(value, str) or not value or "+" in value or "#" in value or "\0" in value:
                raise TopicError(f"column {options.topic_column!r} holds {value!r}, not a topic to publish on")
            topic = value
            used = (options.topic_column,)
        if options.payload == "raw":
            data = row.get(options.payload_column)
            if isinstance(data, str):
                return topic, data.encode("utf-8")
            if not isinstance(data, bytes | bytearray):
                raise UsageError(f"column {options.payload_column!r} holds {type(data).__name__}, "
                                 "not bytes or a string")
            return topic, bytes(data)
        if not options.keep_topic_column:
            row = {k: v for k, v in row.items() if k not in used}
        return topic, json_payload(row)


def _sparkplug(rows: list[dict[str, Any]]) -> list[Publish]:
    """Consecutive rows for the same edge node and device: one command payload."""
    out: list[Publish] = []
    target: tuple[str, str, str | None] | None = None
    metrics: list[tuple[str, Any, DataType | None]] = []
    now = int(time.time() * 1000)
    for row in rows:
        device = row.get("device")
        key = (level_text("group", row.get("group")), level_text("edge_node", row.get("edge_node")),
               None if device is None else level_text("device", device))
        if key != target and metrics:
            assert target is not None
            out.append((command_topic(*target), command_payload(metrics, now)))
            metrics = []
        target = key
        name = row.get("metric")
        if not isinstance(name, str) or not name:
            raise UsageError(f"column 'metric' holds {name!r}: a Sparkplug B command names its metric")
        metrics.append((name, row.get("value"), _datatype(row.get("datatype"))))
    if metrics:
        assert target is not None
        out.append((command_topic(*target), command_payload(metrics, now)))
    return out


def _datatype(name: Any) -> DataType | None:
    if name is None:
        return None
    try:
        return DataType[str(name)]
    except KeyError:
        raise UsageError(f"column 'datatype' holds {name!r}, not a Sparkplug B data type "
                         f"({', '.join(t.name for t in DataType)})") from None


async def _emit(options: SinkOptions, encoding: _Encoding, name: str) -> int:
    async with task_endpoint(options, name) as ep:
        while (publishes := await anyio.to_thread.run_sync(encoding.next)) is not None:
            for topic, payload in publishes:
                await ep.publish_raw(topic, payload, qos=options.connection.qos, retain=options.retain)
        await flush_or_fail(ep, options, encoding.partition)
    return encoding.rows
