"""The transport seam: what the endpoint needs from an MQTT 5 client, and nothing more.

Theory of operation. A :class:`Connector` knows where a broker is (address, TLS, credentials);
``connector.connect(options, on_confirmed, on_rejected)`` is an async context manager that opens
one MQTT 5 session connection and yields a :class:`Connection`. The endpoint opens one connection at
a time and opens a new one (same client id, ``clean_start=False``) when the previous one fails;
the *session* the broker keeps between them (subscriptions, QoS 1 messages queued for us, QoS 1
PUBLISHes of ours it did not acknowledge) is the broker's business, not the transport's: a
transport does not retry, redeliver or reconnect on its own.

While a connection is open:

* :meth:`Connection.publish` queues one PUBLISH without waiting and returns its packet id.
  PUBLISHes leave in call order while at most :data:`ORDERED_WINDOW` of them are unconfirmed (the
  aiomqtt transport: paho holds back QoS 1 PUBLISHes past 20 unconfirmed and lets QoS 0 ones
  overtake them; the endpoint keeps at most 16 in flight). The transport later calls ``on_confirmed(packet_id)`` once per
  PUBLISH: for QoS 1 when the PUBACK arrives, for QoS 0 when the packet was written. A PUBACK with
  a failure reason (>= 0x80) calls ``on_rejected(packet_id, reason)`` first, then
  ``on_confirmed(packet_id)`` (the broker has decided: it is not sent again). Confirmations may
  come out of order and may come *before* ``publish`` returns; callbacks run on the event loop's
  thread, must not block and must not raise.
* :meth:`Connection.messages` yields every PUBLISH the broker sends, in the order received, each
  with the identifiers of the subscriptions it matched (MQTT 5 Subscription Identifier; none when
  the broker does not support them, see :attr:`ConnAck.subscription_ids_available`).
* When the connection drops, every pending or later operation raises :class:`ConnectionClosed`
  (``messages()`` may instead just end); confirmations for PUBLISHes not yet confirmed never come.
  Leaving the ``connect`` context closes the connection (a normal DISCONNECT if it is still up,
  keeping the session) and cancels nothing of the caller's.
* A QoS 1 PUBLISH may be acknowledged to the broker when the transport receives it (paho does so),
  so the broker never sends it again: ``messages()`` yields every PUBLISH received, also after the
  connection dropped and after the caller left ``connect``, and raises (or ends) only after the
  last one.

Every failure of the network or the broker surfaces as :class:`ConnectionClosed` or one of its
subclasses (never a client library's own exception type); the message says what happened, in
the words of the layer that saw it. ``str(connector)`` names the broker in messages (never a password).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from ..errors import TransportError

#: unconfirmed PUBLISHes up to which every transport keeps call order (see the module docstring)
ORDERED_WINDOW = 16

__all__ = [
    "MAX_PACKET_DEFAULT",
    "ORDERED_WINDOW",
    "PERMANENT_REFUSALS",
    "Will",
    "ConnectOptions",
    "ConnAck",
    "Received",
    "Connection",
    "Connector",
    "ConnectionClosed",
    "ConnectRefused",
    "TLSVerificationFailed",
]

#: MQTT 5's largest packet, the limit when the broker announces none (CONNACK Maximum Packet Size)
MAX_PACKET_DEFAULT = 268_435_455

#: CONNACK reason codes that retrying does not fix: bad user name or password, not authorized,
#: banned, bad authentication method (MQTT 5), and MQTT 3.1.1's bad credentials / not authorized.
PERMANENT_REFUSALS = frozenset({0x84, 0x85, 0x86, 0x87, 0x8A, 0x8C, 4, 5})


@dataclass(frozen=True, slots=True)
class Will:
    """The last will: published by the broker when the connection drops without a DISCONNECT."""

    topic: str
    payload: bytes
    qos: int = 1
    retain: bool = False


@dataclass(frozen=True, slots=True)
class ConnectOptions:
    """What a CONNECT says (MQTT 5): the session's client id, whether to start it afresh, how long
    the broker keeps it after the connection drops (seconds), the keepalive and the will."""

    client_id: str
    clean_start: bool = False
    session_expiry: int = 0
    keepalive: int = 60
    will: Will | None = None


@dataclass(frozen=True, slots=True)
class ConnAck:
    """What the broker's CONNACK said, as far as the endpoint cares."""

    #: the largest packet the broker accepts (Maximum Packet Size; MQTT's limit when absent)
    max_packet: int = MAX_PACKET_DEFAULT
    #: whether the broker sends Subscription Identifiers on PUBLISHes (absent means yes)
    subscription_ids_available: bool = True


@dataclass(frozen=True, slots=True)
class Received:
    """One PUBLISH from the broker. ``subscription_ids`` are those of the subscriptions it matched
    (one copy per matching subscription is the broker's choice; mosquitto sends one per id);
    empty when the broker sends none."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    subscription_ids: tuple[int, ...] = ()


class ConnectionClosed(TransportError):
    """The connection to the broker dropped, or could not be opened; opening another may work."""


class ConnectRefused(ConnectionClosed):
    """The broker answered CONNECT with a failure reason code (``reason_code``)."""

    def __init__(self, message: str, reason_code: int) -> None:
        super().__init__(message)
        self.reason_code = reason_code

    @property
    def permanent(self) -> bool:
        """Retrying will not help (credentials, authorization, a ban): see PERMANENT_REFUSALS."""
        return self.reason_code in PERMANENT_REFUSALS


class TLSVerificationFailed(ConnectionClosed):
    """The broker's TLS certificate did not verify (wrong CA, wrong host name, expired...)."""


class Connection(Protocol):
    """One open connection of an MQTT 5 session; see the module docstring for the contract."""

    @property
    def connack(self) -> ConnAck:
        """The CONNACK this connection was accepted with."""
        ...

    def publish(self, topic: str, payload: bytes, qos: int, retain: bool) -> int:
        """Queue one PUBLISH; never blocks. Returns its packet id, which ``on_confirmed`` gets later
        (ids are unique among the unconfirmed PUBLISHes of this connection; QoS 0 ones too).
        PUBLISHes leave in call order. Raises :class:`ConnectionClosed` if the connection is gone
        (the PUBLISH was not queued)."""
        ...

    async def subscribe(self, mqtt_filter: str, *, sub_id: int, no_local: bool, qos: int = 1) -> None:
        """Subscribe ``mqtt_filter`` with Subscription Identifier ``sub_id`` and No Local
        ``no_local``, returning once the broker acknowledged (SUBACK). Subscribing a filter again
        replaces its subscription. Raises :class:`ConnectionClosed`."""
        ...

    async def unsubscribe(self, mqtt_filter: str) -> None:
        """Unsubscribe ``mqtt_filter``, returning once the broker acknowledged (UNSUBACK).
        Raises :class:`ConnectionClosed`."""
        ...

    def messages(self) -> AsyncIterator[Received]:
        """The PUBLISHes the broker sends, in order; iterate it from one task at a time (the
        endpoint hands it between its tasks: hold no cancel scope or task group across a yield).
        When the connection drops it raises :class:`ConnectionClosed` (or ends), after every
        PUBLISH received before, which stay readable after ``connect`` was left."""
        ...

    async def disconnect_ending_session(self) -> None:
        """Send DISCONNECT with Session Expiry 0: the broker forgets the session (subscriptions,
        queued messages) and publishes no will. Best effort: never raises; if it cannot be sent
        the session expires on its own. Returns once the packet had its chance to leave."""
        ...


class Connector(Protocol):
    """Where a broker is and how to reach it (address, TLS, credentials)."""

    def connect(
        self,
        options: ConnectOptions,
        on_confirmed: Callable[[int], None],
        on_rejected: Callable[[int, str], None],
    ) -> AbstractAsyncContextManager[Connection]:
        """Open a connection: ``async with connector.connect(...) as connection``. Entering
        returns once the broker accepted (CONNACK); it raises :class:`ConnectRefused` when the
        broker refused, :class:`TLSVerificationFailed` when its certificate did not verify and
        :class:`ConnectionClosed` for anything else. ``on_confirmed``/``on_rejected`` receive the
        confirmations of this connection's PUBLISHes (see the module docstring)."""
        ...
