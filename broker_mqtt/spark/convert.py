"""Spark rows (as Arrow record batches) to data-model maps: the type mapping of docs/spark.md.

Theory of operation. The sink receives each partition as Arrow record batches (Spark's own
columnar hand-over to Python). For each Arrow schema we build, once, one converter per column:
``None`` for types that ``to_pylist`` already gives as data-model values (integers, floats,
booleans, strings, binary, durations), a function otherwise. A batch becomes Python values
column by column, then one dict per row: the *row path*. The sink itself encodes column-wise
(columnar.py), using :func:`value_converter` for the types it has no kernel for; its output is
pinned to the row path (:class:`RowConverter` + ``codec.encode``) byte for byte. The mapping:

=====================================  =============================================
Spark type                             data model (Python)
=====================================  =============================================
boolean, byte/short/int/long           bool, int (integer)
float, double                          float (real)
string                                 str
binary                                 bytes
timestamp (with time zone)             aware datetime in UTC (timestamp)
timestamp_ntz                          taken as UTC: aware datetime in UTC
date                                   str, ISO 8601 ``YYYY-MM-DD`` (no date type in the model)
day-time interval                      timedelta (timespan)
decimal                                str, exact (``decimals=float``: float)
array                                  list (vector)
map                                    dict (table)
struct                                 dict of its fields (table)
null (any type)                        None
=====================================  =============================================
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from ..errors import UsageError

__all__ = ["RowConverter", "value_converter"]

_UTC = dt.UTC
Converter = Callable[[Any], Any] | None


def value_converter(arrow_type: pa.DataType, *, decimals: str = "string") -> Converter:
    """A function mapping one ``to_pylist`` value of ``arrow_type`` to the data model (None: identity)."""
    t = pa.types
    if t.is_timestamp(arrow_type):
        if arrow_type.tz is None:
            return lambda v: None if v is None else v.replace(tzinfo=_UTC)
        return lambda v: None if v is None else v.astimezone(_UTC)
    if t.is_date(arrow_type):
        return lambda v: None if v is None else v.isoformat()
    if t.is_decimal(arrow_type):
        if decimals == "float":
            return lambda v: None if v is None else float(v)
        return lambda v: None if v is None else str(v)
    if t.is_map(arrow_type):
        kc = value_converter(arrow_type.key_type, decimals=decimals)
        vc = value_converter(arrow_type.item_type, decimals=decimals)
        kf = kc or _identity
        vf = vc or _identity
        return lambda v: None if v is None else {kf(k): vf(x) for k, x in v}
    if t.is_list(arrow_type) or t.is_large_list(arrow_type) or t.is_fixed_size_list(arrow_type):
        ec = value_converter(arrow_type.value_type, decimals=decimals)
        if ec is None:
            return None
        return lambda v: None if v is None else [ec(x) for x in v]
    if t.is_struct(arrow_type):
        fields = [(f.name, value_converter(f.type, decimals=decimals)) for f in arrow_type]
        convs = [(name, c) for name, c in fields if c is not None]
        if not convs:
            return None

        def struct(v: Any) -> Any:
            if v is None:
                return None
            for name, c in convs:
                v[name] = c(v[name])
            return v

        return struct
    if (t.is_integer(arrow_type) or t.is_floating(arrow_type) or t.is_boolean(arrow_type)
            or t.is_string(arrow_type) or t.is_large_string(arrow_type) or t.is_binary(arrow_type)
            or t.is_large_binary(arrow_type) or t.is_duration(arrow_type) or t.is_null(arrow_type)):
        return None
    raise UsageError(f"the Spark bridge cannot map Arrow type {arrow_type} to the data model")


def _identity(v: Any) -> Any:
    return v


class RowConverter:
    """Turns record batches of one schema into ``(topics, rows)``.

    ``topic_column`` names the column that gives each row's topic (None: no topic column);
    unless ``keep_topic_column``, that column is left out of the rows.
    """

    def __init__(self, schema: pa.Schema, *, topic_column: str | None, keep_topic_column: bool,
                 decimals: str) -> None:
        self.schema = schema
        self.topic_index = schema.get_field_index(topic_column) if topic_column is not None else -1
        if topic_column is not None and self.topic_index < 0:
            raise UsageError(f"topicColumn {topic_column!r} is not a column of {schema.names}")
        self.columns: list[tuple[int, str, Converter, pa.DataType | None]] = []
        for i, f in enumerate(schema):
            if i == self.topic_index and not keep_topic_column:
                continue
            if pa.types.is_timestamp(f.type) and f.type.tz is not None:
                # Arrow holds UTC instants: dropping the zone is free and gives UTC wall times,
                # which become aware datetimes twice as fast as converting zone-aware ones.
                naive = pa.timestamp(f.type.unit)
                self.columns.append((i, f.name, value_converter(naive, decimals=decimals), naive))
            else:
                self.columns.append((i, f.name, value_converter(f.type, decimals=decimals), None))
        self.names = [name for _, name, _, _ in self.columns]

    def topics(self, batch: pa.RecordBatch) -> list[str | None] | None:
        if self.topic_index < 0:
            return None
        topics: list[str | None] = batch.column(self.topic_index).to_pylist()
        return topics

    def values(self, batch: pa.RecordBatch) -> list[list[Any]]:
        """The batch column by column, each value mapped to the data model."""
        out = []
        for i, _name, conv, cast in self.columns:
            column = batch.column(i)
            values = (column if cast is None else column.cast(cast)).to_pylist()
            out.append(values if conv is None else [conv(v) for v in values])
        return out
