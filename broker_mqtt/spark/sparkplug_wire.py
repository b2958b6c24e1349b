"""The Sparkplug B payload codec: Eclipse Tahu's ``sparkplug_b.proto`` on the protobuf wire, by hand.

Theory of operation. A protobuf message is a run of fields, each a varint key ``number << 3 |
wire type`` and a value: a varint (0), eight little-endian bytes (1), a length-prefixed run of
bytes (2) or four little-endian bytes (5); the deprecated groups (3 ... 4) are skipped like any
unknown field. :func:`_fields` walks one message and yields ``(number, wire type, value)``,
checking every length against the end of its buffer, so hostile bytes raise
:class:`~broker_mqtt.errors.DecodeError` (truncated or over-long varint, bad wire type, length
past the end, a known field on the wrong wire type, bad UTF-8, nesting deeper than
:data:`MAX_DEPTH`) and nothing else. A metric keeps the last value field of its ``oneof`` as a
:class:`RawValue`; :func:`metric_value` turns it into Python by datatype: the signed integers
come as two's complement in ``int_value``/``long_value`` and are signed at the datatype's width,
the Sparkplug 3.0 arrays are little-endian packed in ``bytes_value``, a DataSet becomes
``{"columns", "types", "rows"}`` and a Template ``{"version", "template_ref", "is_definition",
"metrics", "parameters"}`` (metrics as dicts). The encoder writes fields in number order and
raises :class:`~broker_mqtt.errors.UsageError` for a value its datatype cannot carry; DataSet and
Template values are decoded only (the bridge never sends them). No I/O and no clock here.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import DecodeError, UsageError

__all__ = ["DataType", "Metric", "Payload", "RawValue", "decode_payload", "encode_payload", "metric_value",
           "infer_datatype", "MAX_DEPTH"]

#: How deep templates may nest (a template's metric holding a template ...) before decoding fails.
MAX_DEPTH = 16
_U64 = (1 << 64) - 1
_U32 = (1 << 32) - 1
VARINT, FIXED64, LEN, SGROUP, EGROUP, FIXED32 = 0, 1, 2, 3, 4, 5


class DataType(enum.IntEnum):
    """Sparkplug B datatypes (``Metric.datatype``)."""

    Unknown = 0
    Int8 = 1
    Int16 = 2
    Int32 = 3
    Int64 = 4
    UInt8 = 5
    UInt16 = 6
    UInt32 = 7
    UInt64 = 8
    Float = 9
    Double = 10
    Boolean = 11
    String = 12
    DateTime = 13
    Text = 14
    UUID = 15
    DataSet = 16
    Bytes = 17
    File = 18
    Template = 19
    PropertySet = 20
    PropertySetList = 21
    Int8Array = 22
    Int16Array = 23
    Int32Array = 24
    Int64Array = 25
    UInt8Array = 26
    UInt16Array = 27
    UInt32Array = 28
    UInt64Array = 29
    FloatArray = 30
    DoubleArray = 31
    BooleanArray = 32
    StringArray = 33
    DateTimeArray = 34


_KNOWN = frozenset(int(dt) for dt in DataType)


@dataclass(frozen=True, slots=True)
class RawValue:
    """A metric's value field as it came: ``kind`` is ``int``, ``long``, ``float``, ``double``,
    ``bool``, ``string``, ``bytes``, ``dataset``, ``template`` or ``extension``."""

    kind: str
    value: Any


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric. ``value`` is the Python value by ``datatype`` (the raw field's value when the
    datatype is absent or unknown); ``raw`` keeps the field for a decoder that learns the datatype
    from a birth certificate. ``timestamp`` is in ms since the epoch."""

    name: str | None
    alias: int | None
    timestamp: int | None
    datatype: int | None
    value: Any
    is_null: bool = False
    is_historical: bool = False
    is_transient: bool = False
    raw: RawValue | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Payload:
    """A Sparkplug B payload; ``timestamp`` in ms since the epoch, ``seq`` 0..255."""

    timestamp: int | None
    metrics: tuple[Metric, ...]
    seq: int | None = None
    uuid: str | None = None
    body: bytes | None = None


# --- the wire -------------------------------------------------------------------------------------

def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise DecodeError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if result > _U64:
                raise DecodeError("varint exceeds 64 bits")
            return result, pos
        shift += 7
        if shift >= 70:
            raise DecodeError("over-long varint (more than 10 bytes)")


def _skip_group(data: bytes, pos: int, end: int, number: int, depth: int) -> int:
    if depth > MAX_DEPTH:
        raise DecodeError("groups nested too deeply")
    while True:
        key, pos = _varint(data, pos, end)
        wire, inner = key & 7, key >> 3
        if wire == EGROUP:
            if inner != number:
                raise DecodeError(f"group {number} closed by end-group {inner}")
            return pos
        pos = _skip(data, pos, end, inner, wire, depth + 1)[0]


def _skip(data: bytes, pos: int, end: int, number: int, wire: int, depth: int) -> tuple[int, Any]:
    """The position after one field's value, and the value (int, or bytes for the others)."""
    if number == 0:
        raise DecodeError("field number 0")
    if wire == VARINT:
        return _varint(data, pos, end)[::-1]
    if wire in (FIXED64, FIXED32):
        size = 8 if wire == FIXED64 else 4
        if pos + size > end:
            raise DecodeError(f"field {number}: fixed{size * 8} value past the end")
        return pos + size, data[pos:pos + size]
    if wire == LEN:
        length, pos = _varint(data, pos, end)
        if length > end - pos:
            raise DecodeError(f"field {number}: length {length} past the end ({end - pos} bytes left)")
        return pos + length, data[pos:pos + length]
    if wire == SGROUP:
        return _skip_group(data, pos, end, number, depth), None
    raise DecodeError(f"field {number}: bad wire type {wire}")


def _fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos, end)
        number, wire = key >> 3, key & 7
        pos, value = _skip(data, pos, end, number, wire, 0)
        if wire != SGROUP:
            yield number, wire, value


def _expect(message: str, number: int, wire: int, expected: int) -> None:
    if wire != expected:
        raise DecodeError(f"{message} field {number} has wire type {wire}, expected {expected}")


def _text(value: bytes, what: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"{what} is not UTF-8: {exc.reason}") from None


def _fixed(value: bytes, wire: int) -> float:
    return float(struct.unpack("<f" if wire == FIXED32 else "<d", value)[0])


#: value field number -> (kind, wire type), for Metric (10..19), DataSetValue (1..7) and
#: Parameter / PropertyValue-like (3..9) messages
_METRIC_VALUES = {10: ("int", VARINT), 11: ("long", VARINT), 12: ("float", FIXED32), 13: ("double", FIXED64),
                  14: ("bool", VARINT), 15: ("string", LEN), 16: ("bytes", LEN), 17: ("dataset", LEN),
                  18: ("template", LEN), 19: ("extension", LEN)}
_DATASET_VALUES = {1: ("int", VARINT), 2: ("long", VARINT), 3: ("float", FIXED32), 4: ("double", FIXED64),
                   5: ("bool", VARINT), 6: ("string", LEN), 7: ("extension", LEN)}
_PARAMETER_VALUES = {n + 2: kw for n, kw in _DATASET_VALUES.items()}


def _raw(message: str, number: int, wire: int, value: Any, kinds: dict[int, tuple[str, int]]) -> RawValue:
    kind, expected = kinds[number]
    _expect(message, number, wire, expected)
    if kind == "int":
        value &= _U32
    elif kind == "bool":
        value = bool(value)
    elif kind in ("float", "double"):
        value = _fixed(value, wire)
    elif kind == "string":
        value = _text(value, f"{message} string value")
    return RawValue(kind, value)


# --- values by datatype ---------------------------------------------------------------------------

_SIGNED = {DataType.Int8: 8, DataType.Int16: 16, DataType.Int32: 32, DataType.Int64: 64}
_UNSIGNED = {DataType.UInt8: 8, DataType.UInt16: 16, DataType.UInt32: 32, DataType.UInt64: 64,
             DataType.DateTime: 64}
_ARRAYS = {DataType.Int8Array: "b", DataType.Int16Array: "h", DataType.Int32Array: "i", DataType.Int64Array: "q",
           DataType.UInt8Array: "B", DataType.UInt16Array: "H", DataType.UInt32Array: "I",
           DataType.UInt64Array: "Q", DataType.FloatArray: "f", DataType.DoubleArray: "d",
           DataType.DateTimeArray: "Q"}
_STRINGS = (DataType.String, DataType.Text, DataType.UUID)
_BYTES = (DataType.Bytes, DataType.File)


def metric_value(datatype: int | None, raw: RawValue | None, depth: int = 0) -> Any:
    """The Python value of ``raw`` read as ``datatype``; the raw value when the datatype is absent
    or unknown; DecodeError when the field cannot carry the datatype."""
    if raw is None:
        return None
    if datatype is None or datatype not in _KNOWN:
        return raw.value
    dt = DataType(datatype)

    def wrong() -> DecodeError:
        return DecodeError(f"a {dt.name} value cannot be carried in a {raw.kind} field")

    if dt in _SIGNED or dt in _UNSIGNED:
        if raw.kind not in ("int", "long"):
            raise wrong()
        width = _SIGNED.get(dt) or _UNSIGNED[dt]
        value = raw.value & ((1 << width) - 1)
        return value - (1 << width) if dt in _SIGNED and value >> (width - 1) else value
    if dt in (DataType.Float, DataType.Double):
        if raw.kind not in ("float", "double"):
            raise wrong()
        return raw.value
    kinds = {DataType.Boolean: "bool", DataType.DataSet: "dataset", DataType.Template: "template"}
    kinds.update(dict.fromkeys(_STRINGS, "string"))
    kinds.update(dict.fromkeys((*_BYTES, *_ARRAYS, DataType.BooleanArray, DataType.StringArray), "bytes"))
    if dt not in kinds:
        return raw.value
    if raw.kind != kinds[dt]:
        raise wrong()
    if dt in _ARRAYS:
        code = _ARRAYS[dt]
        size = struct.calcsize("<" + code)
        if len(raw.value) % size:
            raise DecodeError(f"{dt.name} of {len(raw.value)} bytes is not a multiple of {size}")
        return list(struct.unpack(f"<{len(raw.value) // size}{code}", raw.value))
    if dt == DataType.BooleanArray:
        return _bool_array(raw.value)
    if dt == DataType.StringArray:
        if raw.value and not raw.value.endswith(b"\x00"):
            raise DecodeError("StringArray does not end with a NUL")
        return [_text(part, "StringArray element") for part in raw.value.split(b"\x00")[:-1]]
    if dt == DataType.DataSet:
        return _dataset(raw.value)
    if dt == DataType.Template:
        return _template(raw.value, depth + 1)
    return raw.value


def _bool_array(data: bytes) -> list[bool]:
    if len(data) < 4:
        raise DecodeError("BooleanArray shorter than its 4-byte count")
    count = int.from_bytes(data[:4], "little")
    if len(data) != 4 + (count + 7) // 8:
        raise DecodeError(f"BooleanArray of {count} values has {len(data) - 4} bytes of bits")
    return [bool(data[4 + i // 8] >> (7 - i % 8) & 1) for i in range(count)]


def _dataset(data: bytes) -> dict[str, Any]:
    columns: list[str] = []
    types: list[int] = []
    rows: list[bytes] = []
    for number, wire, value in _fields(data):
        if number == 2:
            _expect("DataSet", number, wire, LEN)
            columns.append(_text(value, "DataSet column"))
        elif number == 3:
            types.extend(_uint32s("DataSet", number, wire, value))
        elif number == 4:
            _expect("DataSet", number, wire, LEN)
            rows.append(value)
    decoded = []
    for row in rows:
        elements: list[Any] = []
        for number, wire, value in _fields(row):
            if number == 1:
                _expect("DataSet row", number, wire, LEN)
                raw = None
                for inner, inner_wire, inner_value in _fields(value):
                    if inner in _DATASET_VALUES:
                        raw = _raw("DataSet value", inner, inner_wire, inner_value, _DATASET_VALUES)
                column = len(elements)
                elements.append(metric_value(types[column] if column < len(types) else None, raw))
        decoded.append(elements)
    names = [DataType(t).name if t in _KNOWN else t for t in types]
    return {"columns": columns, "types": names, "rows": decoded}


def _uint32s(message: str, number: int, wire: int, value: Any) -> list[int]:
    """A repeated uint32, packed (LEN) or not (VARINT)."""
    if wire == VARINT:
        return [value & _U32]
    _expect(message, number, wire, LEN)
    out, pos = [], 0
    while pos < len(value):
        item, pos = _varint(value, pos, len(value))
        out.append(item & _U32)
    return out


def _template(data: bytes, depth: int) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise DecodeError(f"templates nested deeper than {MAX_DEPTH}")
    out: dict[str, Any] = {"version": None, "template_ref": None, "is_definition": False,
                           "metrics": [], "parameters": []}
    for number, wire, value in _fields(data):
        if number in (1, 4):
            _expect("Template", number, wire, LEN)
            out["version" if number == 1 else "template_ref"] = _text(value, "Template string")
        elif number == 2:
            _expect("Template", number, wire, LEN)
            m = _decode_metric(value, depth)
            out["metrics"].append({"name": m.name, "alias": m.alias, "timestamp": m.timestamp,
                                   "datatype": m.datatype, "value": m.value, "is_null": m.is_null})
        elif number == 3:
            _expect("Template", number, wire, LEN)
            out["parameters"].append(_parameter(value))
        elif number == 5:
            _expect("Template", number, wire, VARINT)
            out["is_definition"] = bool(value)
    return out


def _parameter(data: bytes) -> dict[str, Any]:
    name, datatype, raw = None, None, None
    for number, wire, value in _fields(data):
        if number == 1:
            _expect("Parameter", number, wire, LEN)
            name = _text(value, "Parameter name")
        elif number == 2:
            _expect("Parameter", number, wire, VARINT)
            datatype = value & _U32
        elif number in _PARAMETER_VALUES:
            raw = _raw("Parameter", number, wire, value, _PARAMETER_VALUES)
    return {"name": name, "type": datatype, "value": metric_value(datatype, raw)}


# --- Payload and Metric ---------------------------------------------------------------------------

def _decode_metric(data: bytes, depth: int = 0) -> Metric:
    name: str | None = None
    alias = timestamp = datatype = None
    flags = {5: False, 6: False, 7: False}
    raw: RawValue | None = None
    for number, wire, value in _fields(data):
        if number == 1:
            _expect("Metric", number, wire, LEN)
            name = _text(value, "metric name")
        elif number in (2, 3, 4):
            _expect("Metric", number, wire, VARINT)
            if number == 2:
                alias = value
            elif number == 3:
                timestamp = value
            else:
                datatype = value & _U32
        elif number in flags:
            _expect("Metric", number, wire, VARINT)
            flags[number] = bool(value)
        elif number in (8, 9):
            _expect("Metric", number, wire, LEN)  # metadata, properties: not used by the bridge
        elif number in _METRIC_VALUES:
            raw = _raw("Metric", number, wire, value, _METRIC_VALUES)
    is_null = flags[7]
    value = None if is_null else metric_value(datatype, raw, depth)
    return Metric(name, alias, timestamp, datatype, value, is_null=is_null, is_historical=flags[5],
                  is_transient=flags[6], raw=None if is_null else raw)


def decode_payload(data: bytes) -> Payload:
    """Decode a Sparkplug B protobuf payload; DecodeError (only) if the bytes are malformed."""
    data = bytes(data)
    timestamp = seq = None
    uuid: str | None = None
    body: bytes | None = None
    metrics: list[Metric] = []
    try:
        for number, wire, value in _fields(data):
            if number in (1, 3):
                _expect("Payload", number, wire, VARINT)
                if number == 1:
                    timestamp = value
                else:
                    seq = value
            elif number == 2:
                _expect("Payload", number, wire, LEN)
                metrics.append(_decode_metric(value))
            elif number == 4:
                _expect("Payload", number, wire, LEN)
                uuid = _text(value, "payload uuid")
            elif number == 5:
                _expect("Payload", number, wire, LEN)
                body = value
    except (struct.error, IndexError, ValueError) as exc:  # defensive: never let another type out
        if isinstance(exc, DecodeError):
            raise
        raise DecodeError(f"malformed Sparkplug payload: {exc}") from None
    return Payload(timestamp, tuple(metrics), seq, uuid, body)


def _put_varint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)


def _put(out: bytearray, number: int, wire: int, value: Any) -> None:
    _put_varint(out, number << 3 | wire)
    if wire == VARINT:
        _put_varint(out, value)
    elif wire == LEN:
        _put_varint(out, len(value))
        out += value
    else:
        out += value


def infer_datatype(value: Any) -> DataType:
    """bool -> Boolean, int -> Int64, float -> Double, str -> String, bytes -> Bytes; else UsageError."""
    for kind, dt in ((bool, DataType.Boolean), (int, DataType.Int64), (float, DataType.Double),
                     (str, DataType.String), ((bytes, bytearray), DataType.Bytes)):
        if isinstance(value, kind):
            return dt
    raise UsageError(f"cannot infer a Sparkplug datatype for a {type(value).__name__}; pass one")


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError(f"{text!r:.40} cannot be encoded as UTF-8: {exc.reason}") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _value_field(dt: DataType, value: Any) -> tuple[int, int, Any]:
    """(field number, wire type, encoded value) of ``value`` as ``dt``; UsageError if it does not fit."""
    def unfit(why: str = "") -> UsageError:
        return UsageError(f"{value!r:.60} does not fit Sparkplug {dt.name}{why}")

    if dt in _SIGNED or dt in _UNSIGNED:
        width = _SIGNED.get(dt) or _UNSIGNED[dt]
        low, high = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if dt in _SIGNED else (0, (1 << width) - 1)
        if not _is_int(value) or not low <= value <= high:
            raise unfit()
        return (11, VARINT, value & _U64) if width == 64 else (10, VARINT, value & _U32)
    if dt in (DataType.Float, DataType.Double):
        if not (_is_int(value) or isinstance(value, float)):
            raise unfit()
        try:
            return (12, FIXED32, struct.pack("<f", value)) if dt == DataType.Float else (
                13, FIXED64, struct.pack("<d", value))
        except (OverflowError, struct.error):
            raise unfit(" (out of range)") from None
    if dt == DataType.Boolean:
        if not isinstance(value, bool):
            raise unfit()
        return 14, VARINT, int(value)
    if dt in _STRINGS:
        if not isinstance(value, str):
            raise unfit()
        return 15, LEN, _utf8(value)
    if dt in _BYTES:
        if not isinstance(value, bytes | bytearray):
            raise unfit()
        return 16, LEN, bytes(value)
    return 16, LEN, _array_bytes(dt, value, unfit)


def _array_bytes(dt: DataType, value: Any, unfit: Any) -> bytes:
    if not isinstance(value, list | tuple):
        raise unfit()
    if dt in _ARRAYS:
        code = _ARRAYS[dt]
        if any(not (_is_int(v) or (code in "fd" and isinstance(v, float))) for v in value):
            raise unfit()
        try:
            return struct.pack(f"<{len(value)}{code}", *value)
        except (OverflowError, struct.error):
            raise unfit(" (out of range)") from None
    if dt == DataType.BooleanArray:
        if any(not isinstance(v, bool) for v in value) or len(value) > _U32:
            raise unfit()
        bits = bytearray((len(value) + 7) // 8)
        for i, v in enumerate(value):
            bits[i // 8] |= v << (7 - i % 8)
        return len(value).to_bytes(4, "little") + bytes(bits)
    if dt == DataType.StringArray:
        if any(not isinstance(v, str) or "\x00" in v for v in value):
            raise unfit()
        return b"".join(_utf8(v) + b"\x00" for v in value)
    raise UsageError(f"encoding a Sparkplug {dt.name} value is not supported")


def _encode_metric(metric: Metric) -> bytes:
    out = bytearray()
    if metric.name is not None:
        _put(out, 1, LEN, _utf8(metric.name))
    for number, value in ((2, metric.alias), (3, metric.timestamp), (4, metric.datatype)):
        if value is not None:
            if not _is_int(value) or not 0 <= value <= (_U32 if number == 4 else _U64):
                raise UsageError(f"metric {metric.name!r}: field {number} must be an unsigned int, not {value!r:.40}")
            _put(out, number, VARINT, value)
    for number, flag in ((5, metric.is_historical), (6, metric.is_transient), (7, metric.is_null)):
        if flag:
            _put(out, number, VARINT, 1)
    if not metric.is_null:
        if metric.value is None:
            raise UsageError(f"metric {metric.name!r}: value None without is_null")
        if metric.datatype is None:
            dt = infer_datatype(metric.value)
        elif metric.datatype in _KNOWN:
            dt = DataType(metric.datatype)
        else:
            raise UsageError(f"metric {metric.name!r}: unknown datatype {metric.datatype}")
        _put(out, *_value_field(dt, metric.value))
    return bytes(out)


def encode_payload(payload: Payload) -> bytes:
    """Encode a payload; UsageError for a field or value that does not fit its type."""
    out = bytearray()
    for number, value in ((1, payload.timestamp),):
        if value is not None:
            _put(out, number, VARINT, _checked_u64(value, "timestamp"))
    for metric in payload.metrics:
        _put(out, 2, LEN, _encode_metric(metric))
    if payload.seq is not None:
        _put(out, 3, VARINT, _checked_u64(payload.seq, "seq"))
    if payload.uuid is not None:
        _put(out, 4, LEN, _utf8(payload.uuid))
    if payload.body is not None:
        _put(out, 5, LEN, bytes(payload.body))
    return bytes(out)


def _checked_u64(value: Any, what: str) -> int:
    if not _is_int(value) or not 0 <= value <= _U64:
        raise UsageError(f"payload {what} must be an int in 0..2**64-1, not {value!r:.40}")
    return int(value)
