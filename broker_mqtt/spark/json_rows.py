"""JSON payloads as rows of a user's schema, and rows as JSON payloads.

Theory of operation. A device's JSON document is parsed on the executor that reads its
partition, against the schema the user gave (``jsonSchema``), in the shape Spark's JSON reader
uses in its PERMISSIVE mode: a field that is missing or ``null`` is null; a field whose value does
not fit its type is null and the row's corrupt-record column holds the payload's text; a payload
that is not a JSON object (bad UTF-8, bad JSON, an array, a number) has every field null and its
text in that column. The schema arrives as Spark's own JSON form of a type
(``StructType.jsonValue()``), so this module needs no pyspark: each field's converter is built once
per schema. The other direction, :func:`json_payload`, writes a row's values as a compact JSON
object for the sink (timestamps RFC 3339 in UTC, bytes base64, decimals exact as strings).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import UsageError

__all__ = ["JsonRowParser", "json_payload"]

_UTC = dt.UTC
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=_UTC)
_INT_RANGES = {
    "byte": (-(2**7), 2**7 - 1),
    "short": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "long": (-(2**63), 2**63 - 1),
}
_DECIMAL = re.compile(r"decimal\((\d+),\s*(-?\d+)\)")


class _Mismatch(Exception):
    """A value does not fit its field's type (internal: the row's field becomes null)."""


Converter = Callable[[Any], Any]


def _string(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)  # Spark keeps the JSON text


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise _Mismatch(f"{value!r} is not a boolean")


def _integer(kind: str) -> Converter:
    low, high = _INT_RANGES[kind]

    def convert(value: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
            return value
        raise _Mismatch(f"{value!r} is not a {kind}")

    return convert


def _fractional(value: Any) -> float:
    if isinstance(value, float):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if value in ("NaN", "Infinity", "-Infinity", "+Infinity"):
        return float(value)
    raise _Mismatch(f"{value!r} is not a number")


def _decimal(precision: int, scale: int) -> Converter:
    quantum = decimal.Decimal(1).scaleb(-scale)

    def convert(value: Any) -> decimal.Decimal:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise _Mismatch(f"{value!r} is not a decimal")
        try:
            number = decimal.Decimal(str(value)).quantize(quantum, rounding=decimal.ROUND_HALF_UP)
        except decimal.InvalidOperation:
            raise _Mismatch(f"{value!r} is not a decimal") from None
        if not number.is_finite() or len(number.as_tuple().digits) > precision:
            raise _Mismatch(f"{value!r} does not fit decimal({precision},{scale})")
        return number

    return convert


def _timestamp(naive: bool) -> Converter:
    def convert(value: Any) -> dt.datetime:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise _Mismatch(f"{value!r} is not a timestamp")
            try:
                moment = _EPOCH + dt.timedelta(seconds=value)  # a number is seconds since the epoch
            except OverflowError:
                raise _Mismatch(f"{value!r} is out of the timestamp range") from None
        elif isinstance(value, str):
            try:
                moment = dt.datetime.fromisoformat(value)
            except ValueError:
                raise _Mismatch(f"{value!r} is not an ISO 8601 timestamp") from None
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=_UTC)  # no offset: taken as UTC
        else:
            raise _Mismatch(f"{value!r} is not a timestamp")
        try:
            moment = moment.astimezone(_UTC)
        except OverflowError:
            raise _Mismatch(f"{value!r} is out of the timestamp range") from None
        return moment.replace(tzinfo=None) if naive else moment

    return convert


def _date(value: Any) -> dt.date:
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            pass
    raise _Mismatch(f"{value!r} is not a date (YYYY-MM-DD)")


def _binary(value: Any) -> bytes:
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            pass
    raise _Mismatch(f"{value!r} is not base64")


def _array(element: Converter) -> Converter:
    def convert(value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise _Mismatch(f"{_short(value)} is not an array")
        return [None if v is None else element(v) for v in value]

    return convert


def _map(inner: Converter) -> Converter:
    def convert(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _Mismatch(f"{_short(value)} is not an object")
        return {k: None if v is None else inner(v) for k, v in value.items()}

    return convert


def _struct(fields: list[tuple[str, Converter]]) -> Converter:
    def convert(value: Any) -> tuple[Any, ...]:
        if not isinstance(value, dict):
            raise _Mismatch(f"{_short(value)} is not an object")
        out = []
        for name, field in fields:
            v = value.get(name)
            out.append(None if v is None else field(v))
        return tuple(out)

    return convert


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def converter(spark_type: Any) -> Converter:
    """The converter for one Spark type in its JSON form; :class:`UsageError` for types JSON cannot fill."""
    if isinstance(spark_type, str):
        simple: dict[str, Converter] = {
            "string": _string, "boolean": _boolean, "float": _fractional, "double": _fractional,
            "timestamp": _timestamp(False), "timestamp_ntz": _timestamp(True), "date": _date, "binary": _binary,
        }
        if spark_type in simple:
            return simple[spark_type]
        if spark_type in _INT_RANGES:
            return _integer(spark_type)
        m = _DECIMAL.fullmatch(spark_type)
        if m:
            return _decimal(int(m.group(1)), int(m.group(2)))
        if spark_type == "decimal":
            return _decimal(10, 0)
        raise UsageError(f"jsonSchema: type {spark_type!r} cannot be read from JSON here")
    if isinstance(spark_type, dict):
        kind = spark_type.get("type")
        if kind == "array":
            return _array(converter(spark_type["elementType"]))
        if kind == "map":
            if spark_type.get("keyType") != "string":
                raise UsageError("jsonSchema: a map read from JSON needs string keys")
            return _map(converter(spark_type["valueType"]))
        if kind == "struct":
            return _struct([(f["name"], converter(f["type"])) for f in spark_type["fields"]])
    raise UsageError(f"jsonSchema: type {spark_type!r} cannot be read from JSON here")


class JsonRowParser:
    """Parses payloads against a struct schema (Spark's JSON form); picklable, built on the driver."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = dict(schema)
        self.names = tuple(f["name"] for f in self.schema["fields"])
        converter(self.schema)  # fail on the driver, not in a task
        self._fields: list[tuple[str, Converter]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"schema": self.schema, "names": self.names, "_fields": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.schema, self.names, self._fields = state["schema"], state["names"], None

    def parse(self, payload: bytes) -> tuple[tuple[Any, ...], str | None]:
        """``(values of the schema's fields, corrupt record)``: the record is None when all fitted,
        else the payload's text (undecodable bytes replaced) and the fields that did not fit null."""
        fields = self._fields
        if fields is None:
            fields = self._fields = [(f["name"], converter(f["type"])) for f in self.schema["fields"]]
        try:
            document = json.loads(payload)
        except (ValueError, RecursionError):
            return (None,) * len(fields), payload.decode("utf-8", "replace")
        if not isinstance(document, dict):
            return (None,) * len(fields), payload.decode("utf-8", "replace")
        values = []
        corrupt = False
        for name, convert in fields:
            value = document.get(name)
            if value is not None:
                try:
                    value = convert(value)
                except (_Mismatch, RecursionError):
                    value, corrupt = None, True
            values.append(value)
        return tuple(values), payload.decode("utf-8", "replace") if corrupt else None


def _jsonable(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_UTC)
        return value.astimezone(_UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def json_payload(row: Mapping[str, Any]) -> bytes:
    """One row as a compact JSON object in UTF-8 (NaN and infinities as ``NaN``/``Infinity``)."""
    return json.dumps({k: _jsonable(v) for k, v in row.items()}, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8")
