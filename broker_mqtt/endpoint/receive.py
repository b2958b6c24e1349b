"""Receiving: which local subscriber gets what from each PUBLISH the broker sends.

A PUBLISH carries the identifiers of the subscriptions it matched (dispatch.py). Fixed ids mark
presence (1: handed to the :class:`~broker_mqtt.endpoint.presence.PeerTable`) and this endpoint's
unicast topic (2); every other id is one of the :class:`SubscriptionTable`'s filters, whose
subscribers get the PUBLISH: raw subscribers as one :class:`RawMessage`, data subscribers as the
node messages of the PUBLISH that are of their kind, in one list per PUBLISH (the hand-over to a
subscriber's stream is paid once per PUBLISH, not once per message; a full stream makes the receiver
wait, so nothing is dropped, while the connections' streams are read on: :meth:`Receiver.run_streams`).
Node messages addressed to other endpoints are skipped; our own messages coming back (a broker that
ignores No Local) are dropped by sender id, since local subscribers got them when they were sent. A
node message whose topic does not match the MQTT topic it came on is malformed: reported, counted and
skipped.

With a :class:`~broker_mqtt.wire.signing.Verifier` (the endpoint was given a trust store), every
PUBLISH on the layout's topics must be sealed by the key of the client its topic names, with a
counter above the last one accepted from it on that topic: anything else (unsigned, unknown signer,
bad signature, a replay) is dropped whole, counted (``bad_signatures``) and reported
(:attr:`ErrorCode.BAD_SIGNATURE`). Only an empty presence payload (a clear, or a last will, which
cannot carry a fresh signature) is taken unsigned: see docs/security.md.

A broker that sends no subscription identifiers (the first such PUBLISH makes the endpoint warn) is
served by matching topics against the filters instead (:meth:`Receiver._dispatch_by_topic`).

Numbered PUBLISHes (a sequence header, broker_mqtt/wire/sequence.py) of data and unicast pass a
:class:`~broker_mqtt.endpoint.sequence.SequenceTracker` per subscription they came through: a gap
is reported once as :class:`MessagesMissed` and counted (``missed``), a repeat is dropped and
counted (``duplicates``), numbers reported missing that come after all are delivered (``late``).
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import anyio
from anyio.abc import TaskGroup

from ..errors import UsageError
from ..transport.base import ConnectionClosed, Received
from ..wire.identity import endpoint_id
from ..wire.message import Kind, decode_sequenced
from ..wire.signing import Rejection, SignatureError, Verifier
from ..wire.topics import TopicLayout, mqtt_filter_matches, validate_topic
from .dispatch import Filter, SubscriptionTable
from .events import ErrorCode, ErrorEvent, Message, MessagesMissed, StatusEvent
from .send import Signal
from .sequence import IN_ORDER, SequenceTracker, Verdict
from .statistics import EndpointStatistics
from .subscription import RawMessage, _Stream

__all__ = ["Incoming", "Receiver", "PRESENCE_SID", "UNICAST_SID", "KEYS_SID"]

log = logging.getLogger("broker_mqtt")

PRESENCE_SID = 1  #: subscription identifier of the presence filter
UNICAST_SID = 2  #: subscription identifier of this endpoint's unicast topic
KEYS_SID = 3  #: subscription identifier of the key records (``<ns>/k/+``; endpoint/keys.py)
DRAIN_BURST = 64  #: PUBLISHes dispatched from memory between two checkpoints (the MQTT transport's READ_BURST)


class Incoming:
    """One connection's stream of PUBLISHes, queued at the :class:`Receiver`: ``ended`` is set once
    the stream has ended (the connection is gone; ``reason``: why) and all of it was either
    dispatched or read into :attr:`received` to be dispatched (see :meth:`Receiver.run_streams`)."""

    __slots__ = ("_messages", "reader", "received", "ended", "reason")

    def __init__(self, messages: AsyncIterator[Received]) -> None:
        self._messages: AsyncIterator[Received] | None = messages  # (None once read to its end)
        self.reader = False  # whether a task of its own reads it (into ``received``)
        self.received: deque[Received] = deque()  # read by that task, not yet dispatched
        self.ended = anyio.Event()
        self.reason = "connection closed"


class Receiver:
    """Dispatches received PUBLISHes of one endpoint to its subscribers (see the module docstring).

    ``on_presence(topic, payload)`` takes presence PUBLISHes; ``report`` takes status events.
    """

    def __init__(
        self,
        *,
        name: str,
        layout: TopicLayout,
        me: bytes,
        table: SubscriptionTable[_Stream],
        stats: EndpointStatistics,
        report: Callable[[StatusEvent], None],
        on_presence: Callable[[str, bytes], None],
    ) -> None:
        self._name = name
        self._layout = layout
        self._me = me
        self._data_head = layout.namespace + "/d/"
        self._unicast_head = layout.unicast_filter(me.hex())[:-1]  # ns/u/<me hex>/
        self._table = table
        self._stats = stats
        self._report = report
        self._on_presence = on_presence
        #: whether PUBLISHes carry subscription identifiers (from the CONNACK; False once one came without)
        self.sub_ids_available = True
        #: checks the seals of what arrives on the layout's topics (None: signatures not required)
        self.verifier: Verifier | None = None
        #: takes key records (``topic``, ``payload``), when the endpoint learns keys from them
        self.on_key_record: Callable[[str, bytes], None] | None = None
        #: this endpoint's presence topic, and who takes what others write there (``payload``, unsealed;
        #: None: a payload that failed its check): the endpoint restores its own retained hello
        self.own_presence: str | None = None
        self.on_own_presence: Callable[[bytes | None], None] | None = None
        self._keys_head = layout.namespace + "/k/"
        self.sequences = SequenceTracker()
        self._incoming: deque[Incoming] = deque()  # the connections' streams, oldest first (run_streams)
        self._readers: TaskGroup | None = None  # run_streams's: the tasks that read streams apart
        self._waiting = 0  # dispatches waiting for a full subscriber
        self._in_next: Incoming | None = None  # the stream run_streams waits for the next PUBLISH of
        self._read_more = Signal()  # a stream was queued, read further, or ended

    def receive(self, messages: AsyncIterator[Received]) -> Incoming:
        """Queue one connection's stream of PUBLISHes, to be dispatched by :meth:`run_streams` after
        every stream queued before; queue it as soon as the connection is open."""
        incoming = Incoming(messages)
        self._incoming.append(incoming)
        if self._waiting:  # (see run_streams)
            self._read_apart(incoming)
        self._read_more.notify()
        return incoming

    async def run_streams(self) -> None:
        """Dispatch the queued streams (:meth:`receive`) one after the other, for as long as the
        endpoint lives.

        This task outlives the connections: a transport acknowledges a QoS 1 PUBLISH when it
        receives it (paho sends PUBACK on receipt), so the broker never sends it again, and one
        dropped with its connection would be lost. Every PUBLISH a lost connection received goes to
        the subscribers, before any of the next connection's, so per publisher and topic they come
        in order.

        A stream is read and dispatched in this task, one PUBLISH after the other, until a full
        subscriber makes it wait. From then on every queued stream is read by a task of its own
        (into ``Incoming.received``, in memory, as it would have waited in the transport), so that
        the end of a stream (the connection is gone: ``Incoming.ended``) is seen at once, also by
        an endpoint with nothing to send: it reconnects without waiting for the subscriber (whose
        session could expire meanwhile), and the lost connection's transport objects are freed.
        What was read so is dispatched in bursts of :data:`DRAIN_BURST`, other tasks running
        between them; once nothing waits, the stream being dispatched is read here again."""
        async with anyio.create_task_group() as tg:
            self._readers = tg
            try:
                await self._dispatch_streams()
            finally:
                self._readers = None
                self._incoming.clear()  # (the endpoint closes: its last connection is not kept)

    def _read_apart(self, incoming: Incoming) -> None:
        if (not incoming.reader and incoming._messages is not None and self._readers is not None
                and incoming is not self._in_next):  # (a dispatch() called from elsewhere than run_streams)
            incoming.reader = True
            self._readers.start_soon(self._read, incoming)

    async def _read(self, incoming: Incoming) -> None:
        """Move ``incoming``'s PUBLISHes to its ``received`` as they arrive, until its stream ends,
        or until no dispatch waits and it is the stream being dispatched: run_streams reads it
        again then (one hop less per PUBLISH)."""
        messages, received, read = incoming._messages, incoming.received, self._read_more
        assert messages is not None
        try:
            async for message in messages:
                received.append(message)
                read.notify()
                queue = self._incoming
                if not self._waiting and queue and queue[0] is incoming:
                    incoming.reader = False  # handed back
                    return
        except (ConnectionClosed, OSError) as exc:
            incoming.reason = str(exc) or type(exc).__name__
        finally:
            if incoming.reader:
                incoming._messages = None
                incoming.ended.set()
                read.notify()

    async def _dispatch_streams(self) -> None:
        queue, read = self._incoming, self._read_more
        while True:
            if not queue:
                await read.wait()
                continue
            head = queue[0]
            received = head.received
            burst = 0
            while received:  # what a reader task read (first: it came before what is read here)
                await self._dispatch_safely(received.popleft())
                burst += 1
                if burst == DRAIN_BURST:  # other tasks run between bursts, as between the transport's reads
                    burst = 0
                    await anyio.lowlevel.checkpoint()
            if head.ended.is_set():
                queue.popleft()
                continue
            if head.reader:
                await read.wait()
                continue
            try:  # read here, until a full subscriber has a task read it apart
                while not head.reader:  # (no reference to the stream kept while dispatching: it holds
                    self._in_next = head  # its connection, to be freed once read apart to its end)
                    message = await head._messages.__anext__()  # type: ignore[union-attr]
                    self._in_next = None
                    await self._dispatch_safely(message)
            except StopAsyncIteration:
                pass
            except (ConnectionClosed, OSError) as exc:
                head.reason = str(exc) or type(exc).__name__
            self._in_next = None
            if not head.reader:  # (it ended here)
                head._messages = None
                head.ended.set()

    async def _dispatch_safely(self, message: Received) -> None:
        try:
            await self.dispatch(message)
        except Exception as exc:  # a bug must not kill the receive loop; report it loudly
            log.exception("%s: error handling a message on %s", self._name, message.topic)
            self._report(ErrorEvent(ErrorCode.MALFORMED_MESSAGE, repr(exc), topic=str(message.topic)))

    async def _wait_for(self, sub: _Stream, batch: list[Any]) -> None:
        """Hand ``batch`` to ``sub``, which is full: wait for room, with every queued stream read on
        meanwhile (run_streams)."""
        for incoming in self._incoming:
            self._read_apart(incoming)
        self._waiting += 1
        try:
            await sub._deliver(batch)
        finally:
            self._waiting -= 1

    async def dispatch(self, message: Received) -> None:
        """Hand one PUBLISH to the subscribers it is for; waits while one of them is full."""
        self._stats.publishes_received += 1
        topic = message.topic
        payload = message.payload
        sub_ids = message.subscription_ids
        if not sub_ids:
            if self.sub_ids_available:
                log.warning("%s: broker sends no subscription identifiers; matching topics instead", self._name)
                self.sub_ids_available = False
            await self._dispatch_by_topic(topic, payload, message.retain, message.qos)
            return
        stream = (sub_ids, message.qos)
        if PRESENCE_SID in sub_ids:
            self._presence_in(topic, payload, message.retain)
        if KEYS_SID in sub_ids and self.on_key_record is not None:
            self.on_key_record(topic, payload)
        if UNICAST_SID in sub_ids:
            opened = self._opened(topic, payload, self._unicast_head, message.retain)
            if opened is not None:
                await self._on_node_messages(topic, opened, None, (UNICAST_SID, message.qos))
        filters = self._table.targets(sub_ids)
        if not filters:
            return
        if filters[0].levels is None:
            item = RawMessage(topic, payload, message.retain, message.qos)
            for f in filters:
                for sub in f.subscribers:
                    if not sub._deliver_nowait([item]):
                        await self._wait_for(sub, [item])
            return
        opened = self._opened(topic, payload, self._data_head, message.retain)
        if opened is not None:
            await self._on_node_messages(topic, opened, filters, stream)

    def _opened(self, topic: str, payload: bytes, head: str, retain: bool) -> bytes | None:
        """``payload`` with its seal checked and removed (as is without a verifier); None: dropped.
        ``head`` is the topic family's head (``ns/d/``, ``ns/u/<me>/``, or "" for presence)."""
        verifier = self.verifier
        if verifier is None:
            return payload
        if head:
            split = self._layout.split_sender(topic, head)
            sender = split[0] if split is not None else None
        else:
            sender = self._layout.presence_client(topic)
        try:
            if sender is None:
                raise SignatureError(Rejection.SENDER_MISMATCH, "the topic names no sender")
            return verifier.open(topic, payload, sender=sender, retained=retain)
        except SignatureError as exc:
            self._stats.bad_signatures += 1
            self._report(ErrorEvent(ErrorCode.BAD_SIGNATURE, str(exc), topic=topic))
            return None

    def _presence_in(self, topic: str, payload: bytes, retain: bool) -> None:
        if topic == self.own_presence and self.on_own_presence is not None:
            self.on_own_presence(self._opened(topic, payload, "", retain) if payload else payload)
            return
        if payload:  # a clear (or a last will) carries no signature
            opened = self._opened(topic, payload, "", retain)
            if opened is None:
                return
            payload = opened
        self._on_presence(topic, payload)

    async def _dispatch_by_topic(self, topic: str, payload: bytes, retain: bool, qos: int) -> None:
        if self._layout.presence_client(topic) is not None:
            self._presence_in(topic, payload, retain)
        elif topic.startswith(self._keys_head) and self.on_key_record is not None:
            self.on_key_record(topic, payload)
        elif topic.startswith(self._unicast_head):
            opened = self._opened(topic, payload, self._unicast_head, retain)
            if opened is not None:
                await self._on_node_messages(topic, opened, None, (UNICAST_SID, qos))
        elif topic.startswith(self._data_head):
            split = self._layout.split_sender(topic, self._data_head)
            levels = tuple(split[1].split("/")) if split is not None else ()
            opened = self._opened(topic, payload, self._data_head, retain)
            if opened is not None:
                await self._on_node_messages(topic, opened, self._table.match(levels), ("by topic", qos))
        else:
            item = RawMessage(topic, payload, retain, qos)
            for f in self._table.by_filter.values():
                if f.levels is None and mqtt_filter_matches(f.mqtt_filter, topic):
                    for sub in f.subscribers:
                        if not sub._deliver_nowait([item]):
                            await self._wait_for(sub, [item])

    async def _on_node_messages(self, topic: str, payload: bytes, filters: list[Filter[_Stream]] | None,
                                stream: object = None) -> None:
        """Deliver the node messages of one PUBLISH; ``filters`` None means unicast (match by topic)."""
        await self._hand_over(self.route(topic, payload, filters, stream))

    def route(
        self, topic: str, payload: bytes, filters: list[Filter[_Stream]] | None, stream: object = None
    ) -> Iterable[tuple[_Stream, list[Message]]]:
        """The node messages of one PUBLISH, per subscriber (sans-io; empty lists included).
        ``stream`` names the way it came (subscription ids and QoS) for the sequence check;
        None: no check."""
        header, messages, error = decode_sequenced(payload)
        if error is not None:
            self._stats.malformed += 1
            self._report(ErrorEvent(ErrorCode.MALFORMED_MESSAGE, str(error), topic=topic))
        if not messages:
            return ()
        split = self._layout.split_sender(topic, self._data_head if filters is not None else self._unicast_head)
        sender_id = endpoint_id(split[0]) if split is not None else None
        if split is None or sender_id is None:
            self._stats.malformed += 1
            self._report(ErrorEvent(ErrorCode.MALFORMED_MESSAGE, "node messages on an MQTT topic that names "
                                    "no sender", topic=topic))
            return ()
        expected = split[1]
        expected_slash = "/" + expected
        sender_bytes = sender_id.bytes
        if header is not None and stream is not None:
            verdict = self.sequences.check((stream, topic), header[0], header[1], len(messages))
            if verdict is not IN_ORDER:
                self._judged(verdict, sender_id, messages[0].topic if messages else expected)
                if verdict.skip:
                    messages = messages[verdict.skip:]
                    if not messages:
                        return ()
        if filters is None:
            # Unicast: the MQTT topic names the broker topic, so every message matches the same subscribers.
            try:
                filters = self._table.match(validate_topic(expected))
            except UsageError:
                self._stats.malformed += 1
                return ()
        flat: list[tuple[_Stream, Kind, list[Message]]] = [
            (sub, sub.kind, []) for f in filters for sub in f.subscribers  # type: ignore[attr-defined]  # node filters hold Subscriptions, which have .kind
        ]
        me = self._me
        received = forged = 0
        for kind, sender, receivers, _ttl, node_topic, packed in messages:
            if receivers is not None and me not in receivers:
                continue
            if node_topic != expected and node_topic != expected_slash:
                self._stats.malformed += 1
                self._report(
                    ErrorEvent(ErrorCode.MALFORMED_MESSAGE, f"node message topic {node_topic!r} "
                               f"does not match its MQTT topic {topic!r}", topic=topic)
                )
                continue
            if sender != sender_bytes:
                forged += 1
                continue
            received += 1
            if sender == me:
                # Our own message came back (No Local ignored, or an old subscription's window):
                # local subscribers already got it when it was sent.
                continue
            msg: Message | None = Message(node_topic, sender, packed)
            for _sub, sub_kind, batch in flat:
                if sub_kind is kind:
                    # each subscriber its own Message: its data decoded for it alone, so that one
                    # changing what it received changes nothing another one sees
                    batch.append(msg if msg is not None else Message(node_topic, sender, packed))
                    msg = None
        self._stats.received += received
        if forged:
            self._stats.forged += forged
            self._report(ErrorEvent(ErrorCode.FORGED_MESSAGE, f"{forged} node message(s) claim a sender other "
                                    f"than {split[0]!r}, whose topic they came on", topic=topic))
        return [(sub, batch) for sub, _kind, batch in flat]

    def _judged(self, verdict: Verdict, sender: uuid.UUID, topic: str) -> None:
        stats = self._stats
        if verdict.missed:
            stats.missed += verdict.missed
            self._report(MessagesMissed(sender, topic, verdict.missed))
        stats.duplicates += verdict.repeated
        stats.late += verdict.late

    async def _hand_over(self, batches: Iterable[tuple[_Stream, list[Message]]]) -> None:
        stats = self._stats
        for sub, batch in batches:
            if batch:
                stats.delivered += len(batch)
                if not sub._deliver_nowait(batch):
                    await self._wait_for(sub, batch)

