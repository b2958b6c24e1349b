"""A reliable, ordered channel from one producer to many consumers, sans-io.

Theory of operation (Zeek Broker's ``broker::detail::channel``; wire format in ``docs/stores.md`` § 1):

* A :class:`Producer` numbers every payload it is given (``produce``) with consecutive sequence
  numbers starting at 1 and broadcasts it as an :class:`Event`. It keeps the events that not every
  consumer has acknowledged yet in a buffer of at most ``ChannelConfig.buffer_size`` events; when
  the buffer overflows the oldest event is evicted even if unacknowledged.
* A consumer joins through a :class:`Handshake` (unicast, repeated every heartbeat interval until
  the consumer acknowledges it) carrying the first sequence number the consumer will receive. The
  rendezvous (how the producer learns the consumer's id) is up to the caller: ``add_consumer``.
* A :class:`Consumer` delivers payloads exactly once and in sequence order. It buffers events that
  arrive early, sends a :class:`Nack` naming the missing sequence numbers as soon as it notices a
  gap (and again every ack interval while the gap persists), and sends a :class:`CumulativeAck`
  every ack interval even when nothing happens: that is its liveness signal.
* The producer answers a NACK by unicasting the requested events again; if one was already
  evicted it sends :class:`RetransmitFailed` and the consumer reports :class:`EventsLost` (a gap
  the application must repair, e.g. by resynchronising) and skips ahead.
* Consecutive events may travel as one :class:`EventBatch` (``Producer.to_send(batch=n)``: many
  small events in one message); a consumer treats it exactly like its events arriving one after
  another.
* When the producer has broadcast nothing for a heartbeat interval it broadcasts a
  :class:`Heartbeat` carrying its last sequence number, so consumers also notice lost tail events.
* A consumer silent for ``connection_timeout`` heartbeat intervals is dropped
  (:class:`ConsumerLost`); a producer silent as long is declared dead by its consumers
  (:class:`ProducerLost`).

Time is an input: every method takes ``now`` (seconds, any monotonic origin) and both objects
expose ``next_deadline``; the caller calls ``tick(now)`` when it passes. Nothing here does I/O.
Outgoing messages accumulate until drained with ``to_send()``; the caller flushes after each call.

A restarted producer must use a new producer id (e.g. with an incarnation suffix): sequence
numbers restart at 1 and consumers bound to the old id ignore it.

Modules, one idea each: :mod:`.errors`, :mod:`.config` (:class:`ChannelConfig`), :mod:`.messages`
(the wire messages and :func:`decode_message`), :mod:`.producer` and :mod:`.consumer` (the two state
machines and the events they report). Import the names from this package:
``from broker_mqtt import channel as ch`` or ``from broker_mqtt.channel import Producer``.
"""

from __future__ import annotations

from .config import ChannelConfig
from .consumer import (
    Connected,
    Consumer,
    ConsumerEvent,
    ConsumerState,
    Delivered,
    EventsLost,
    ProducerLost,
)
from .errors import ChannelDecodeError, ChannelError, ChannelProtocolError, ChannelUsageError
from .messages import (
    ConsumerMessage,
    CumulativeAck,
    Event,
    EventBatch,
    Handshake,
    Heartbeat,
    Message,
    MessageKind,
    Nack,
    Outgoing,
    ProducerMessage,
    RetransmitFailed,
    decode_message,
)
from .producer import (
    ConsumerLost,
    HandshakeCompleted,
    LossReason,
    PathState,
    Producer,
    ProducerEvent,
    UnknownConsumer,
)

__all__ = [
    "ChannelConfig",
    "ChannelError",
    "ChannelDecodeError",
    "ChannelProtocolError",
    "ChannelUsageError",
    "MessageKind",
    "Handshake",
    "Event",
    "EventBatch",
    "RetransmitFailed",
    "Heartbeat",
    "CumulativeAck",
    "Nack",
    "ProducerMessage",
    "ConsumerMessage",
    "Message",
    "decode_message",
    "Outgoing",
    "HandshakeCompleted",
    "ConsumerLost",
    "UnknownConsumer",
    "ProducerEvent",
    "Connected",
    "Delivered",
    "EventsLost",
    "ProducerLost",
    "ConsumerEvent",
    "LossReason",
    "PathState",
    "ConsumerState",
    "Producer",
    "Consumer",
]
