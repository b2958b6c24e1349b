"""What the source makes of plain MQTT PUBLISHes: its columns, and one row per message or metric.

Theory of operation. For ``payload`` json and raw the driver's receiver buffers each PUBLISH as
it came, a :data:`Received` tuple, and :class:`PlainRows` turns it into the source's row on the
executor that reads the partition (so parsing JSON is spread over the cluster, not done on the
driver): the topic, one column per ``{name}`` level of the topic patterns (the first pattern that
matches and names it; null otherwise), the payload (bytes; text; or the fields of ``jsonSchema``
and the corrupt-record column), then QoS, retain and the time received. Sparkplug B is decoded
on the driver, in arrival order, because a data message's metric names come from the births
before it (:mod:`.sparkplug`); :func:`sparkplug_row` gives each metric's row. The schemas are
written as DDL, which Spark parses itself. No pyspark here.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from .document import to_json
from .json_rows import JsonRowParser
from .options import SourceOptions
from .sparkplug import MetricRow
from .topic_pattern import TopicPattern, level_columns

__all__ = ["Received", "PlainRows", "SPARKPLUG_READ_COLUMNS", "plain_schema_ddl", "sparkplug_row"]

#: one PUBLISH as the receiver buffers it: topic, payload, QoS, retain, when it was received
Received = tuple[str, bytes, int, bool, dt.datetime]

_TAIL = "qos INT, retain BOOLEAN, received TIMESTAMP"

#: columns of ``payload=sparkplug``: one row per metric
SPARKPLUG_READ_COLUMNS = (
    "topic STRING, `group` STRING, message_type STRING, edge_node STRING, device STRING, online BOOLEAN, "
    "seq BIGINT, timestamp TIMESTAMP, metric STRING, alias BIGINT, datatype STRING, value STRING, "
    "long_value BIGINT, double_value DOUBLE, boolean_value BOOLEAN, string_value STRING, bytes_value BINARY, "
    "received TIMESTAMP"
)
_FIXED = frozenset({"topic", "payload", "qos", "retain", "received"})


def _quoted(name: str) -> str:
    return f"`{name}`"


def ddl_field_names(ddl: str) -> list[str]:
    """The top-level field names of a DDL list of fields (``a INT, `b c` STRUCT<x: INT>, d: STRING``),
    as far as the source needs them to find clashing columns (Spark parses the DDL itself)."""
    names: list[str] = []
    depth, quoted, start = 0, False, 0
    for i, ch in enumerate(ddl + ","):
        if ch == "`":
            quoted = not quoted
        elif quoted:
            continue
        elif ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            item = ddl[start:i].strip()
            start = i + 1
            if not item:
                continue
            if item.startswith("`"):
                end = item.find("`", 1)
                names.append(item[1:end] if end > 0 else item[1:])
            else:
                names.append(item.replace(":", " ").split()[0])
    return names


def plain_schema_ddl(options: SourceOptions) -> str:
    """The source's columns for ``options.payload`` json, raw or sparkplug, as DDL. Raises
    :class:`UsageError` when two columns would have one name (case-insensitively, as Spark resolves)."""
    if options.payload == "sparkplug":
        return SPARKPLUG_READ_COLUMNS
    levels = level_columns(options.patterns)
    clash = [n for n in levels if n.lower() in _FIXED or n.lower() == options.corrupt_column.lower()]
    if clash:
        raise UsageError(f"topic levels {clash} would clash with the source's own columns "
                         f"({', '.join(sorted(_FIXED))}, {options.corrupt_column}): name them differently")
    if options.json_schema is not None:
        fields = ddl_field_names(options.json_schema)
        taken = {n.lower(): f"topic level {{{n}}}" for n in levels}
        taken.update({n: "a column of the source" for n in (*_FIXED, options.corrupt_column.lower())})
        for name in fields:
            if name.lower() in taken:
                raise UsageError(
                    f"jsonSchema field {name!r} has the name of {taken[name.lower()]}: leave it out of "
                    f"jsonSchema (the topic gives it), or rename the level or field")
    columns = ["topic STRING", *(f"{_quoted(n)} STRING" for n in levels)]
    if options.payload == "raw":
        columns.append("payload BINARY")
    elif options.json_schema is None:
        columns.append("payload STRING")
    else:
        columns += [options.json_schema.strip().rstrip(","), f"{_quoted(options.corrupt_column)} STRING"]
    columns.append(_TAIL)
    return ", ".join(columns)


class PlainRows:
    """Turns :data:`Received` PUBLISHes into rows of ``payload`` json or raw; picklable."""

    def __init__(self, options: SourceOptions, json_schema: dict[str, Any] | None = None) -> None:
        """``json_schema``: the struct of ``jsonSchema``'s fields in Spark's JSON form (as parsed by
        Spark), for ``payload=json`` with a schema; :class:`UsageError` for types JSON cannot fill."""
        self.payload = options.payload
        self.columns = level_columns(options.patterns)
        index = {name: i for i, name in enumerate(self.columns)}
        self._patterns: list[tuple[TopicPattern, tuple[int, ...]]] = [
            (p, tuple(index[n] for n in p.names)) for p in options.patterns]
        self._parser = JsonRowParser(json_schema) if json_schema is not None else None

    def levels(self, topic: str) -> list[str | None]:
        """The level columns of ``topic``: each from the first pattern that matches and names it."""
        out: list[str | None] = [None] * len(self.columns)
        if not self.columns:
            return out
        for pattern, slots in self._patterns:
            values = pattern.values(topic)
            if values is None:
                continue
            for slot, value in zip(slots, values, strict=True):
                if out[slot] is None:
                    out[slot] = value
        return out

    def row(self, msg: Received) -> tuple[Any, ...]:
        topic, payload, qos, retain, received = msg
        row: list[Any] = [topic, *self.levels(topic)]
        if self._parser is not None:
            values, corrupt = self._parser.parse(payload)
            row += values
            row.append(corrupt)
        elif self.payload == "raw":
            row.append(payload)
        else:
            row.append(payload.decode("utf-8", "replace"))
        row += (qos, retain, received)
        return tuple(row)

    def rows(self, messages: Sequence[Received]) -> list[tuple[Any, ...]]:
        return [self.row(m) for m in messages]


_INT64 = (-(2**63), 2**63 - 1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _moment(ms: int | None) -> dt.datetime | None:
    if ms is None:
        return None
    try:
        return _EPOCH + dt.timedelta(milliseconds=ms)
    except OverflowError:
        return None


def sparkplug_row(metric: MetricRow, received: dt.datetime) -> tuple[Any, ...]:
    """One Sparkplug B metric as a row of :data:`SPARKPLUG_READ_COLUMNS`: the value as JSON text and
    in the one typed column that holds its kind (integers beyond 64 bits only as text)."""
    value = metric.value
    long_value = double_value = boolean_value = string_value = bytes_value = None
    if isinstance(value, bool):
        boolean_value = value
    elif isinstance(value, int):
        long_value = value if _INT64[0] <= value <= _INT64[1] else None
    elif isinstance(value, float):
        double_value = value
    elif isinstance(value, str):
        string_value = value
    elif isinstance(value, bytes | bytearray):
        bytes_value = bytes(value)
    return (
        metric.topic, metric.group, metric.message_type, metric.edge_node, metric.device, metric.online,
        metric.seq, _moment(metric.timestamp), metric.metric, metric.alias, metric.datatype,
        None if value is None else to_json(value), long_value, double_value, boolean_value, string_value,
        bytes_value, received,
    )
