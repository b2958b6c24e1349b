"""Data-model values as JSON text: the ``data`` column of the streaming source.

Spark parses JSON with ``from_json``/``get_json_object``; the data model has more types than
JSON, so some are written as strings (docs/spark.md, "Reading"): bytes as base64, timestamps
as RFC 3339 in UTC, timespans as seconds (a number), ports as ``"443/tcp"``, enum values as
their name, addresses and subnets as text, counts as numbers, sets as arrays, and map keys that
are not strings as their JSON text, an integer of more than 14,000 bits (too long for decimal
text) as its hex string, a timestamp that UTC cannot hold with its own offset. No pyspark here.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
from typing import Any

from ..wire.data import Count, EnumValue, Port

__all__ = ["to_json", "to_jsonable"]

_UTC = dt.UTC
_MAX_INT_BITS = 14_000  # < 4300 decimal digits (sys.get_int_max_str_digits's default)


def to_jsonable(value: Any) -> Any:
    """``value`` with every data-model type replaced by a JSON-representable one."""
    if value is None or isinstance(value, bool | float | str):
        return value
    if isinstance(value, int):  # beyond Python's 4300-digit limit an int has no decimal text: hex
        return value if value.bit_length() <= _MAX_INT_BITS else hex(value)
    if isinstance(value, dict):
        return {_key(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, set | frozenset):
        items = [to_jsonable(v) for v in value]
        try:
            items.sort()
        except TypeError:
            items.sort(key=repr)
        return items
    if isinstance(value, dt.datetime):
        try:
            return value.astimezone(_UTC).isoformat().replace("+00:00", "Z")
        except OverflowError:  # within a day of year 1 or 9999: not representable in UTC
            return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Count):
        return value.value
    if isinstance(value, Port):
        return f"{value.number}/{value.protocol.name.lower()}"
    if isinstance(value, EnumValue):
        return value.name
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address | ipaddress.IPv4Network
                  | ipaddress.IPv6Network | ipaddress.IPv4Interface | ipaddress.IPv6Interface):
        return str(value)
    return str(value)


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    converted = to_jsonable(key)
    return converted if isinstance(converted, str) else json.dumps(converted, separators=(",", ":"))


def to_json(value: Any) -> str:
    """Compact JSON text of a data-model value (NaN and infinities as ``NaN``/``Infinity``,
    which Spark's JSON reader accepts by default)."""
    return json.dumps(to_jsonable(value), separators=(",", ":"), ensure_ascii=False)
