"""Sparkplug B payload messages (a subset of ``sparkplug_b.proto``), built at run time.

The message classes come from a ``FileDescriptorProto`` assembled here, so no generated
``_pb2`` module and no ``protoc`` are needed, only Google's protobuf runtime (the ``dev`` extra).

- ``Payload``: ``timestamp`` (1, uint64), ``metrics`` (2, repeated Metric), ``seq`` (3, uint64),
  ``uuid`` (4, string), ``body`` (5, bytes);
- ``Metric`` (``Payload.Metric``): ``name`` (1), ``alias`` (2, uint64), ``timestamp`` (3),
  ``datatype`` (4, uint32), ``is_historical``/``is_transient``/``is_null`` (5-7, bool),
  ``int_value`` (10, uint32), ``long_value`` (11, uint64), ``float_value`` (12),
  ``double_value`` (13), ``boolean_value`` (14), ``string_value`` (15), ``bytes_value`` (16);
  the value fields are one ``oneof value`` as in the specification.

Datatypes: :data:`INT32`, :data:`INT64`, :data:`DOUBLE`, :data:`BOOLEAN`, :data:`STRING`.
:func:`metric` builds a metric with the value in the field its datatype names.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = ["BOOLEAN", "DOUBLE", "INT32", "INT64", "STRING", "Metric", "Payload", "get_value", "metric", "set_value"]

INT32, INT64, DOUBLE, BOOLEAN, STRING = 3, 4, 10, 11, 12

_F = descriptor_pb2.FieldDescriptorProto
_PACKAGE = "org.eclipse.tahu.protobuf"


def _field(msg: Any, name: str, number: int, ftype: int, *, repeated: bool = False,
           type_name: str = "", oneof: int | None = None) -> None:
    f = msg.field.add()
    f.name, f.number, f.type = name, number, ftype
    f.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    if type_name:
        f.type_name = type_name
    if oneof is not None:
        f.oneof_index = oneof


def _file() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(name="broker_mqtt_tests/sparkplug_b.proto", package=_PACKAGE,
                                            syntax="proto2")
    payload = fd.message_type.add(name="Payload")
    met = payload.nested_type.add(name="Metric")
    _field(met, "name", 1, _F.TYPE_STRING)
    _field(met, "alias", 2, _F.TYPE_UINT64)
    _field(met, "timestamp", 3, _F.TYPE_UINT64)
    _field(met, "datatype", 4, _F.TYPE_UINT32)
    _field(met, "is_historical", 5, _F.TYPE_BOOL)
    _field(met, "is_transient", 6, _F.TYPE_BOOL)
    _field(met, "is_null", 7, _F.TYPE_BOOL)
    met.oneof_decl.add(name="value")
    for name, number, ftype in (("int_value", 10, _F.TYPE_UINT32), ("long_value", 11, _F.TYPE_UINT64),
                                ("float_value", 12, _F.TYPE_FLOAT), ("double_value", 13, _F.TYPE_DOUBLE),
                                ("boolean_value", 14, _F.TYPE_BOOL), ("string_value", 15, _F.TYPE_STRING),
                                ("bytes_value", 16, _F.TYPE_BYTES)):
        _field(met, name, number, ftype, oneof=0)
    _field(payload, "timestamp", 1, _F.TYPE_UINT64)
    _field(payload, "metrics", 2, _F.TYPE_MESSAGE, repeated=True, type_name=f".{_PACKAGE}.Payload.Metric")
    _field(payload, "seq", 3, _F.TYPE_UINT64)
    _field(payload, "uuid", 4, _F.TYPE_STRING)
    _field(payload, "body", 5, _F.TYPE_BYTES)
    return fd


def _classes() -> tuple[Any, Any]:
    pool = descriptor_pool.DescriptorPool()  # a private pool: never clashes with a generated module
    pool.Add(_file())
    payload = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.Payload"))
    return payload, payload.Metric


Payload, Metric = _classes()

_VALUE_FIELD = {INT32: "int_value", INT64: "long_value", DOUBLE: "double_value", BOOLEAN: "boolean_value",
                STRING: "string_value"}


def metric(*, name: str | None = None, alias: int | None = None, datatype: int | None = None,
           value: Any = None, timestamp: int | None = None) -> Any:
    """A ``Payload.Metric`` with only the fields given set; ``value`` goes into the field of
    ``datatype``. A DDATA metric by alias (no name, no datatype) is ``metric(alias=a)`` followed by
    :func:`set_value`."""
    m = Metric()
    if name is not None:
        m.name = name
    if alias is not None:
        m.alias = alias
    if timestamp is not None:
        m.timestamp = timestamp
    if datatype is not None:
        m.datatype = datatype
        if value is not None:
            set_value(m, datatype, value)
    return m


def set_value(m: Any, datatype: int, value: Any) -> None:
    """Put ``value`` into the field of ``datatype`` (an Int32 is stored as uint32, two's complement)."""
    field = _VALUE_FIELD[datatype]
    if datatype == INT32:
        value &= 0xFFFFFFFF
    elif datatype == INT64:
        value &= 0xFFFFFFFFFFFFFFFF
    setattr(m, field, value)


def get_value(m: Any, datatype: int) -> Any:
    """The value of a metric read as ``datatype`` (signed for the integer types); None if none is set."""
    if m.is_null or m.WhichOneof("value") is None:
        return None
    value = getattr(m, _VALUE_FIELD[datatype])
    if datatype == INT32 and value >= 1 << 31:
        value -= 1 << 32
    elif datatype == INT64 and value >= 1 << 63:
        value -= 1 << 64
    return value
