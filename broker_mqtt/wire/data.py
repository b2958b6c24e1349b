"""Helper types for the Zeek Broker data-model values that Python has no native type for.

Every Broker value is represented by an ordinary Python object; only three Broker types need
a helper class, defined here.  :mod:`broker_mqtt.wire.codec` encodes and decodes exactly this set:

=============  ==================================================  ===============================
Broker type    Python type                                         CBOR wire form
=============  ==================================================  ===============================
none           ``None``                                            simple value null
boolean        ``bool``                                            simple values false/true
count          :class:`Count` (``.value``: int, 0 ≤ v < 2**64)     tag 55810 + unsigned int
integer        ``int``                                             major type 0/1 (bignum 2/3)
real           ``float``                                           float16/32/64
string         ``str``                                             text string
bytes          ``bytes``                                           byte string
address        ``ipaddress.IPv4Address`` / ``IPv6Address``         tag 52 / 54 (RFC 9164)
subnet         ``ipaddress.IPv4Network`` / ``IPv6Network``         tag 52 / 54, prefix form
port           :class:`Port` (number + :class:`PortProtocol`)      tag 55811 + [number, proto]
timestamp      timezone-aware ``datetime.datetime``                tag 0 (RFC 3339 text)
timespan       ``datetime.timedelta``                              tag 55812 + int microseconds
enum value     :class:`EnumValue`                                  tag 55813 + text string
set            ``set`` / ``frozenset``                             tag 258 + array
table          ``dict``                                            map
vector         ``list`` (and ``tuple`` on encode)                  array
=============  ==================================================  ===============================

Decoding gives ``list`` for arrays in value position and ``tuple`` where the array is a dict
key or set member (it must be hashable there); sets nested in sets or used as keys decode as
``frozenset``.  ``docs/data-model.md`` has the exact wire layout of the project tags.

:class:`Count` is deliberately *not* an ``int`` subclass: cbor2 6.x encodes every ``int``
subclass natively as a plain integer without consulting the ``default`` hook, and its only
per-type override (``encoders=``) slows the encoding of *every* value 1.4-2.4x.  A wrapper
keeps ``count`` distinct from ``integer`` on the wire at no cost to plain values.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Count", "EnumValue", "Port", "PortProtocol"]

_COUNT_LIMIT = 1 << 64


@dataclass(frozen=True, slots=True, order=True)
class Count:
    """A Broker ``count``: an unsigned 64-bit integer, distinct from ``int`` (Broker ``integer``).

    ``int(c)`` and ``operator.index(c)`` give the value.  ``Count(3) != 3`` by design: the two
    are different Broker types and may both be keys of one table.

    :raises ValueError: if ``value`` is negative or not below 2**64.
    :raises TypeError: if ``value`` is not an ``int`` (``bool`` is refused too).
    """

    value: int

    def __post_init__(self) -> None:
        if type(self.value) is not int:
            if not isinstance(self.value, int) or isinstance(self.value, bool):
                raise TypeError(f"Count value must be an int, got {type(self.value).__name__}")
            object.__setattr__(self, "value", int(self.value))
        if not 0 <= self.value < _COUNT_LIMIT:
            raise ValueError(f"Count value must be in 0..2**64-1, got {self.value}")

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"Count({self.value})"


class PortProtocol(enum.Enum):
    """Transport protocol of a :class:`Port`; the values are Broker's wire codes."""

    UNKNOWN = 0
    TCP = 1
    UDP = 2
    ICMP = 3


@dataclass(frozen=True, slots=True)
class Port:
    """A Broker ``port``: a 16-bit number and a transport protocol, e.g. ``Port(80, TCP)``.

    :raises ValueError: if ``number`` is outside 0..65535.
    :raises TypeError: if ``number`` is not an ``int`` or ``protocol`` not a :class:`PortProtocol`.
    """

    number: int
    protocol: PortProtocol

    def __post_init__(self) -> None:
        if not isinstance(self.number, int) or isinstance(self.number, bool):
            raise TypeError(f"Port number must be an int, got {type(self.number).__name__}")
        if not 0 <= self.number <= 0xFFFF:
            raise ValueError(f"Port number must be in 0..65535, got {self.number}")
        if not isinstance(self.protocol, PortProtocol):
            raise TypeError(f"Port protocol must be a PortProtocol, got {self.protocol!r}")

    def __str__(self) -> str:
        return f"{self.number}/{self.protocol.name.lower()}"


@dataclass(frozen=True, slots=True)
class EnumValue:
    """A Zeek enum value, identified by its (possibly namespaced) name, e.g. ``Conn::LOG``.

    :raises TypeError: if ``name`` is not a ``str``.
    :raises ValueError: if ``name`` is empty.
    """

    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"EnumValue name must be a str, got {type(self.name).__name__}")
        if not self.name:
            raise ValueError("EnumValue name must not be empty")
