"""The Python Data Source ``broker_mqtt`` (pyspark.sql.datasource): batch and streaming sink,
streaming source. The only module of the package that imports pyspark.

Theory of operation. Spark creates the writer on the driver (in a Python planner process),
pickles it and runs its ``write`` in every task's Python worker; ``commit``/``abort`` run in yet
another Python process on the driver. So a writer carries only :class:`SinkOptions` and, for
batch writes, the job id it drew when created (the same pickled id reaches every task and every
retry). Streaming writers take the query id and micro-batch id from the task's local properties
(``sql.streaming.queryId``, ``streaming.sql.batchId``), which Spark sets for every micro-batch
and keeps across query restarts from a checkpoint. The work itself is in emit.py (sink) and
receive.py (source); docs/spark.md is the user's guide.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from ..errors import UsageError
from .emit import emit_partition
from .options import SinkOptions, SourceOptions
from .plain_rows import PlainRows, plain_schema_ddl
from .receive import Receiver, Row
from .topic_pattern import level_columns

__all__ = ["BrokerMQTTDataSource", "READ_SCHEMA", "EmitCommitMessage", "register"]

log = logging.getLogger("broker_mqtt.spark")

#: Columns of ``spark.readStream.format("broker_mqtt")``.
READ_SCHEMA = StructType([
    StructField("topic", StringType(), nullable=False),
    StructField("sender", StringType(), nullable=False),
    StructField("received", TimestampType(), nullable=False),
    StructField("data", StringType(), nullable=True),
])

_QUERY_ID_KEY = "sql.streaming.queryId"
_BATCH_ID_KEY = "streaming.sql.batchId"


def register(spark: SparkSession) -> None:
    """Register the data source with ``spark`` as format ``broker_mqtt`` (idempotent)."""
    spark.dataSource.register(BrokerMQTTDataSource)


@dataclass(frozen=True)
class EmitCommitMessage(WriterCommitMessage):
    """What one task reports to the driver: which partition of which batch emitted how many rows."""

    job: str
    batch: int
    partition: int
    attempt: int
    rows: int


class BrokerMQTTDataSource(DataSource):
    """``format("broker_mqtt")``: write DataFrames as data messages; read topics as a stream."""

    @classmethod
    def name(cls) -> str:
        return "broker_mqtt"

    def schema(self) -> StructType | str:
        options = SourceOptions.parse(self.options)
        return READ_SCHEMA if options.payload == "node" else plain_schema_ddl(options)

    def writer(self, schema: StructType, overwrite: bool) -> _BatchWriter:
        return _BatchWriter(SinkOptions.parse(self.options, _column_names(schema)))

    def streamWriter(self, schema: StructType, overwrite: bool) -> _StreamWriter:
        return _StreamWriter(SinkOptions.parse(self.options, _column_names(schema)))

    def streamReader(self, schema: StructType) -> _StreamReader:
        options = SourceOptions.parse(self.options)
        return _StreamReader(options, _shaper(options, schema))

    def reader(self, schema: StructType) -> _BatchReader:
        options = SourceOptions.parse(self.options)
        return _BatchReader(options, _shaper(options, schema))


def _shaper(options: SourceOptions, schema: StructType) -> PlainRows | None:
    """What turns buffered PUBLISHes into rows on the executors (None: the buffer holds rows)."""
    names = _column_names(schema)
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise UsageError(f"the source would have columns {repeated} twice: rename the jsonSchema fields "
                         "or topic levels that clash")
    if options.payload not in ("json", "raw"):
        return None
    json_schema = None
    if options.json_schema is not None:
        levels = len(level_columns(options.patterns))
        fields = schema.fields[1 + levels:len(schema.fields) - 4]  # ... fields, corrupt record, qos, retain, received
        json_schema = {"type": "struct", "fields": [f.jsonValue() for f in fields]}
    return PlainRows(options, json_schema)


def _column_names(schema: StructType) -> list[str]:
    return [f.name for f in schema.fields]


def _sink(options: SinkOptions) -> Any:
    """The executor-side function: publish rows, or put them into a store."""
    if options.payload != "node":
        from .plain_emit import emit_plain_partition

        return emit_plain_partition
    if options.store is not None:
        from .store_sink import store_partition

        return store_partition
    return emit_partition


def _task() -> TaskContext:
    ctx = TaskContext.get()
    if ctx is None:
        raise UsageError("the broker_mqtt writer runs inside Spark tasks only")
    return ctx


class _BatchWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.job = uuid.uuid4().hex  # drawn once on the driver; pickled into every task

    def write(self, iterator: Iterator[pa.RecordBatch]) -> EmitCommitMessage:
        ctx = _task()
        rows = _sink(self.options)(self.options, iterator, job=self.job, batch_id=0, partition=ctx.partitionId())
        return EmitCommitMessage(self.job, 0, ctx.partitionId(), ctx.attemptNumber(), rows)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.rows for m in messages if isinstance(m, EmitCommitMessage))
        log.info("broker_mqtt: job %s emitted %d rows", self.job, total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # Nothing to undo: what was published stays published; receivers de-duplicate the retry.
        log.warning("broker_mqtt: job %s aborted; rows already emitted stay delivered", self.job)


class _StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> EmitCommitMessage:
        ctx = _task()
        query = ctx.getLocalProperty(_QUERY_ID_KEY)
        batch = ctx.getLocalProperty(_BATCH_ID_KEY)
        if query is None or batch is None:
            raise UsageError("the broker_mqtt stream writer found no streaming query or batch id "
                             "in the task's properties (only micro-batch queries are supported)")
        job = uuid.UUID(query).hex
        rows = _sink(self.options)(self.options, iterator, job=job, batch_id=int(batch), partition=ctx.partitionId())
        return EmitCommitMessage(job, int(batch), ctx.partitionId(), ctx.attemptNumber(), rows)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        total = sum(m.rows for m in messages if isinstance(m, EmitCommitMessage))
        log.info("broker_mqtt: micro-batch %d emitted %d rows", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        log.warning("broker_mqtt: micro-batch %d aborted; rows already emitted stay delivered", batchId)


class _RowsPartition(InputPartition):
    """A slice of the receiver's buffer; the rows themselves travel to the executor, and with them
    what shapes buffered PUBLISHes into rows there (None: the buffer holds rows already)."""

    def __init__(self, rows: list[Row], shaper: PlainRows | None) -> None:
        super().__init__(None)
        self.rows = rows
        self.shaper = shaper


def _split(rows: list[Row], partitions: int, shaper: PlainRows | None) -> list[InputPartition]:
    if not rows:
        return []
    n = min(partitions, len(rows))
    size = -(-len(rows) // n)
    return [_RowsPartition(rows[i:i + size], shaper) for i in range(0, len(rows), size)]


def _read(partition: InputPartition) -> Iterator[tuple[Any, ...]]:
    assert isinstance(partition, _RowsPartition)
    shaper = partition.shaper
    if shaper is None:
        return iter(partition.rows)
    return map(shaper.row, partition.rows)  # json/raw buffers hold Received tuples


class _BatchReader(DataSourceReader):
    """``spark.read``: what arrives within ``readSeconds`` of subscribing (retained messages first)."""

    def __init__(self, options: SourceOptions, shaper: PlainRows | None) -> None:
        self.options = options
        self.shaper = shaper

    def partitions(self) -> Sequence[InputPartition]:
        receiver = Receiver(self.options)
        receiver.start(self.options.connection.connect_timeout + 5)
        try:
            receiver.wait_for(self.options.read_seconds)
            rows = receiver.slice(0, receiver.end)
        finally:
            receiver.stop()
        return _split(rows, self.options.partitions, self.shaper)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        return _read(partition)


class _StreamReader(DataSourceStreamReader):
    """Offsets are ``{"run": <receiver id>, "offset": n}``: n counts rows since the receiver started.

    A restarted query (new driver process) gets a new receiver; offsets of an earlier run name
    rows that are gone (MQTT keeps no history), so a batch planned across runs starts at the
    new receiver's first row and a batch wholly of an earlier run is empty.
    """

    def __init__(self, options: SourceOptions, shaper: PlainRows | None = None) -> None:
        self.options = options
        self.shaper = shaper
        self._receiver: Receiver | None = None  # only in the driver's long-lived reader process

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "shaper": self.shaper, "_receiver": None}

    def _started(self) -> Receiver:
        if self._receiver is None:
            receiver = Receiver(self.options)
            receiver.start(self.options.connection.connect_timeout + 5)
            self._receiver = receiver
        return self._receiver

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        receiver = self._started()
        return {"run": receiver.run_id, "offset": 0}

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:  # noqa: N802
        receiver = self._started()
        end = receiver.end
        max_rows = getattr(limit, "max_rows", None)
        if max_rows is not None:
            begin = self._local(start, receiver)
            end = min(end, begin + int(max_rows))
        return {"run": receiver.run_id, "offset": end}

    def _local(self, offset: dict[str, Any], receiver: Receiver) -> int:
        return int(offset.get("offset", 0)) if offset.get("run") == receiver.run_id else 0

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        receiver = self._started()
        if end.get("run") != receiver.run_id:
            return []
        rows = receiver.slice(self._local(start, receiver), int(end["offset"]))
        return _split(rows, self.options.partitions, self.shaper)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        return _read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        receiver = self._receiver
        if receiver is not None and end.get("run") == receiver.run_id:
            receiver.commit(int(end["offset"]))

    def stop(self) -> None:
        if self._receiver is not None:
            self._receiver.stop()
            self._receiver = None
