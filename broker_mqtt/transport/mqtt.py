"""The real transport: :mod:`aiomqtt` (over paho-mqtt) behind :mod:`broker_mqtt.transport.base`.

Every aiomqtt and paho import of the endpoint lives here, and so does every use of aiomqtt's
private ``client._client`` (the paho client): aiomqtt does not expose what the endpoint needs, namely
CONNACK properties (Maximum Packet Size, Subscription Identifier Available), PUBACK reason codes,
a non-blocking publish that returns the packet id (aiomqtt's ``publish`` waits for each PUBACK),
and a DISCONNECT with Session Expiry 0. aiomqtt and paho errors (and OSError) become
:class:`~broker_mqtt.transport.base.ConnectionClosed` and its subclasses at this boundary.

Connections use MQTT 5 with TCP_NODELAY; a CONNECT that gets no CONNACK within 10 s fails. A
connection the broker closes before its CONNACK fails at once, with the error paho logged (aiomqtt
would wait out those 10 s and say only "timed out"): that is how a broker that requires client
certificates refuses a missing or untrusted one (a TLS alert such as ``certificate required`` or
``unknown ca``, raised as :class:`~broker_mqtt.transport.base.ConnectionClosed`).

Receiving cost. Each MQTT 5 PUBLISH received makes paho build a ``Properties`` object, whose
constructor rebuilds its three constant lookup tables (27 names, 27 identifiers) every time: ~10 µs
of the ~30 µs it takes to decode one property, about half of what an idle election member spent
(every member receives every other member's pings). Importing this module makes that constructor
share the tables of one template instance instead, and its name/identifier lookups use dicts
(:func:`_share_paho_property_tables`; same values and results, nothing in paho writes to the
tables, the packets on the wire are unchanged): 1.6 µs instead of ~17 µs per received property
set with one Subscription Identifier. paho also formats
a log line (with ``str(properties)``) for every packet while ``on_log`` is set: ours is only needed
until CONNACK and is removed then. Beyond that, the reader takes the usual PUBLISH (QoS 0 or 1)
from the bytes read itself (:mod:`.publish_packet`, ~3 µs) and queues it as a ``Received``, where
paho and aiomqtt spent ~30 µs on it; paho still reads every other packet, and every PUBLISH that
module leaves to it, as before. On the 2-core bench machine this took an elected-store write with
one in flight from p50 1.12 and 1.19 ms to 0.96 and 0.96 ms (two paired runs of bench/elected_store.py).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, NoReturn

import aiomqtt
import anyio
import paho.mqtt.client as paho_client
from aiomqtt.exceptions import MqttConnectError
from paho.mqtt.client import MQTT_ERR_AGAIN, MQTT_ERR_CONN_LOST, MQTT_ERR_SUCCESS, MQTT_LOG_ERR
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from .base import (
    MAX_PACKET_DEFAULT,
    ConnAck,
    ConnectionClosed,
    ConnectOptions,
    ConnectRefused,
    Received,
    TLSVerificationFailed,
)
from .broker_url import BrokerURL, TLSOptions
from .publish_packet import take_publish

__all__ = ["MQTTConnector", "MQTTConnection"]

log = logging.getLogger("broker_mqtt")

#: packets read per wake-up of the event loop at most (then other tasks get their turn)
READ_BURST = 64
#: bytes read from the socket at once (paho then takes its packets from them)
RECV_SIZE = 65536
#: paho's clock for its keepalive (``_last_bytes_received``): a PUBLISH read here is bytes received
_paho_time: Callable[[], float] = getattr(paho_client, "time_func", time.monotonic)


def _share_paho_property_tables() -> bool:
    """Make ``paho.mqtt.properties.Properties(packet_type)`` reuse one set of its constant lookup
    tables (``types``, ``names``, ``properties``) instead of rebuilding them per object (module
    docstring), and look names and identifiers up in dicts made from them where paho loops over all 27
    (``getIdentFromName``, ``getNameFromIdent``, ``clear``, which ``unpack`` calls first). Returns False,
    changing nothing, if paho's Properties does not look as expected."""
    init: Any = Properties.__init__
    if getattr(init, "_broker_mqtt_shared", False):
        return True
    template = Properties(PacketTypes.PUBLISH)
    tables = {name: template.__dict__.get(name) for name in ("types", "names", "properties")}
    if not (isinstance(tables["types"], list) and isinstance(tables["names"], dict)
            and isinstance(tables["properties"], dict) and set(template.__dict__) == {"packetType", *tables}):
        return False
    by_name: dict[str, int] = {name.replace(" ", ""): ident for name, ident in tables["names"].items()}
    by_ident: dict[int, str] = {ident: name for name, ident in tables["names"].items()}

    def __init__(self: Properties, packetType: int) -> None:  # noqa: N803 - paho's parameter name
        d = self.__dict__
        d["packetType"] = packetType
        d.update(tables)

    def getIdentFromName(self: Properties, compressedName: str) -> int:  # noqa: N802, N803 - paho's names
        return by_name.get(compressedName, -1)  # the loop it replaces: the first name matching, else -1

    def getNameFromIdent(self: Properties, identifier: int) -> str | None:  # noqa: N802 - paho's name
        return by_ident.get(identifier)  # the loop it replaces: the (one) name with that identifier

    def clear(self: Properties) -> None:  # what unpack() calls first: drop every property set
        d = self.__dict__
        for name in by_name:
            d.pop(name, None)

    __init__._broker_mqtt_shared = True  # type: ignore[attr-defined]
    Properties.__init__ = __init__  # type: ignore[method-assign]
    Properties.getIdentFromName = getIdentFromName  # type: ignore[method-assign]
    Properties.getNameFromIdent = getNameFromIdent  # type: ignore[method-assign]
    Properties.clear = clear  # type: ignore[method-assign]
    return True


_share_paho_property_tables()


def _closed(exc: BaseException) -> ConnectionClosed:
    """Our exception for an aiomqtt/paho/socket failure, with the same message."""
    if isinstance(exc, MqttConnectError):
        rc = exc.rc
        code = rc if isinstance(rc, int) or rc is None else rc.value  # paho: int (MQTT 3) or ReasonCode (5)
        return ConnectRefused(str(exc), code or 0)
    if "CERTIFICATE_VERIFY_FAILED" in str(exc):
        return TLSVerificationFailed(str(exc))
    return ConnectionClosed(str(exc))


def _raise_closed(exc: BaseException) -> NoReturn:
    raise _closed(exc) from exc


class MQTTConnector:
    """Connects to the broker at ``url`` (with ``tls`` when given) through aiomqtt."""

    def __init__(self, url: BrokerURL, tls: TLSOptions | None = None) -> None:
        self.url = url
        self.tls = tls

    def __str__(self) -> str:
        return str(self.url)  # never shows the password

    @asynccontextmanager
    async def connect(
        self,
        options: ConnectOptions,
        on_confirmed: Callable[[int], None],
        on_rejected: Callable[[int, str], None],
    ) -> AsyncIterator[MQTTConnection]:
        url, tls, will = self.url, self.tls, options.will
        connect_props = Properties(PacketTypes.CONNECT)
        connect_props.SessionExpiryInterval = options.session_expiry
        client = aiomqtt.Client(
            url.host,
            url.port,
            username=url.username,
            password=url.password,
            identifier=options.client_id,
            protocol=aiomqtt.ProtocolVersion.V5,
            will=aiomqtt.Will(will.topic, will.payload, qos=will.qos, retain=will.retain) if will else None,
            clean_start=options.clean_start,
            keepalive=options.keepalive,
            properties=connect_props,
            tls_context=tls.context() if tls else None,
            tls_insecure=(not tls.verify) if tls else None,
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
            timeout=10,
        )
        # Private access (see the module docstring): aiomqtt drops CONNACK properties and PUBACK
        # reason codes, so we wrap the paho callbacks aiomqtt installed.
        paho = client._client
        # paho types its callback slots as Optional; aiomqtt has set both.
        on_connect: Any = paho.on_connect
        on_publish: Any = paho.on_publish
        connack: list[ConnAck] = []

        def _on_connect(c: Any, userdata: Any, flags: Any, reason: Any, props: Any = None) -> None:
            connack[:] = [ConnAck(
                max_packet=getattr(props, "MaximumPacketSize", MAX_PACKET_DEFAULT),
                subscription_ids_available=bool(getattr(props, "SubscriptionIdentifierAvailable", 1)),
            )]
            on_connect(c, userdata, flags, reason, props)

        def _on_publish(c: Any, userdata: Any, mid: int, reason: Any, props: Any) -> None:
            if reason is not None and getattr(reason, "is_failure", False):
                on_rejected(mid, str(reason))
            on_publish(c, userdata, mid, reason, props)
            on_confirmed(mid)

        # A connection lost before CONNACK: aiomqtt ignores it (and times out); we stop waiting.
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()
        errors: list[str] = []  # what paho logged as errors before CONNACK (the reason, if any)
        on_disconnect: Any = paho.on_disconnect
        waiting = anyio.CancelScope()

        def _on_log(c: Any, userdata: Any, level: int, buf: str) -> None:
            if level == MQTT_LOG_ERR and not connack:
                errors.append(buf)

        def _on_disconnect(c: Any, userdata: Any, *args: Any) -> None:
            if not connack:
                loop.call_soon_threadsafe(waiting.cancel)  # paho may call this from a worker thread
            on_disconnect(c, userdata, *args)

        def broken(exc: Exception) -> None:  # a broken connection: aiomqtt's own handling
            if not client._disconnected.done():
                client._disconnected.set_exception(exc)

        def watch(sock: Any, add: Callable[[int, Callable[[], None]], Any], callback: Callable[[], None]) -> None:
            """``add(fd, callback)`` (the loop's add_reader or add_writer) on the loop's thread: at once when
            called there (no wake-up through the self-pipe), else soon (paho connects from a worker
            thread). aiomqtt's own did it from paho's thread unchecked: when the socket closed before
            it ran (a TLS alert at connect), the loop raised on a dead fd."""
            def register() -> None:
                fd = sock.fileno()
                if fd > -1:
                    add(fd, callback)

            if threading.get_ident() == loop_thread:
                register()
            else:
                loop.call_soon_threadsafe(register)

        def _on_socket_register_write(c: Any, userdata: Any, sock: Any) -> None:
            # paho calls this when it queues a packet while none is waiting to be written (until it
            # unregisters). On the loop's thread the packets are written on the loop's next turn,
            # with every packet queued until then, and the selector is asked only when the socket is
            # full: each packet cost two epoll_ctl calls and a poll for a writable socket before.
            def write() -> None:
                try:
                    c.loop_write()
                except Exception as exc:
                    broken(exc)

            def write_soon() -> None:
                write()
                if c.want_write() and c._sock is sock:  # the socket took part of it: the rest when it has room
                    fd = sock.fileno()
                    if fd > -1:
                        loop.add_writer(fd, write)

            if threading.get_ident() == loop_thread:
                loop.call_soon(write_soon)
            else:
                watch(sock, loop.add_writer, write)  # paho connects from a worker thread

        def _on_socket_open(c: Any, userdata: Any, sock: Any) -> None:
            # Replaces aiomqtt's reader, which reads as many packets per wake-up as paho has QoS 1
            # messages in flight (often one) and lets paho make three recv() calls per packet: under
            # a flood each packet cost a turn of the event loop and three system calls. This one
            # reads up to READ_BURST packets per wake-up, from a buffer filled 64 KiB at a time.
            packet_read = getattr(c, "_packet_read", None)  # paho 2.x; else fall back to loop_read
            incoming: asyncio.Queue[Any] = client._queue  # aiomqtt's queue of messages received (private: see _Messages)
            sock_recv = getattr(c, "_sock_recv", None)
            buffered: list[Any] = [b"", 0]  # bytes read from the socket, and how far paho took them

            def fill() -> bytes:
                """The next bytes from the socket, now the buffer (b"": the peer closed); raises
                BlockingIOError when there is nothing."""
                assert sock_recv is not None
                chunk: bytes = sock_recv(RECV_SIZE)
                buffered[:] = [chunk, 0]
                return chunk

            def recv(bufsize: int) -> bytes:
                data, pos = buffered
                if pos >= len(data):
                    data, pos = fill(), 0
                    if not data:
                        return data  # the peer closed
                out = data[pos:pos + bufsize]
                buffered[1] = pos + len(out)
                return bytes(out)

            if packet_read is not None and sock_recv is not None:
                c._sock_recv = recv

            # paho 2.x's parts that reading a PUBLISH here takes the place of (else paho reads them all)
            fast = packet_read is not None and sock_recv is not None and all(
                hasattr(c, name) for name in ("_in_packet", "_send_puback", "_msgtime_mutex", "_last_bytes_received",
                                     "_easy_log", "_loop_rc_handle"))

            # The packet ids of QoS 1 PUBLISHes read here and not yet acknowledged. Their PUBACKs go
            # two turns of the loop later, once the tasks the messages woke (the receiver, then the
            # subscriber) have run: sent at once, each PUBACK's send() came before the subscriber's
            # turn, in the way of its answer (a store's ack: ~40 µs of a 1 ms write). Nothing is
            # weaker for it: a message not acknowledged when the connection ends comes again. They
            # go before paho reads a packet itself (it acknowledges a PUBLISH it reads at once):
            # PUBACKs leave in the order their PUBLISHes came (MQTT 5 [MQTT-4.6.0-2]).
            acks: list[int] = []

            def send_acks() -> bool:
                """Send the PUBACKs due; False if the connection failed meanwhile."""
                ids = acks[:]
                acks.clear()
                if c._sock is not sock:
                    return False  # that connection is gone; the broker sends them again
                try:
                    for packet_id in ids:
                        rc = c._send_puback(packet_id)
                        if rc > 0:  # as paho handles it
                            c._loop_rc_handle(rc)
                            return False
                except Exception as exc:
                    broken(exc)
                    return False
                return True

            def read() -> None:
                try:
                    if packet_read is None:
                        c.loop_read()
                        return
                    for _ in range(READ_BURST):
                        if c._sock is None:
                            return
                        if fast and c._in_packet["command"] == 0:
                            # paho is between packets: take a PUBLISH it would only pass on (publish_packet)
                            data, pos = buffered
                            if pos >= len(data):
                                try:
                                    data, pos = fill(), 0
                                except BlockingIOError:
                                    return
                                except OSError as exc:  # logged as paho does: _on_log takes a TLS alert from it
                                    c._easy_log(MQTT_LOG_ERR, "failed to receive on socket: %s", exc)
                                    data = b""
                                if not data:  # the peer closed, or the socket failed: as paho reports it
                                    c._loop_rc_handle(MQTT_ERR_CONN_LOST)
                                    return
                            got = take_publish(data, pos)
                            if got is not None:
                                buffered[1] = got.end
                                with c._msgtime_mutex:  # paho's keepalive: bytes came in
                                    c._last_bytes_received = _paho_time()
                                incoming.put_nowait(got.received)
                                if got.received.qos:  # after the message is queued (see acks)
                                    if not acks:
                                        loop.call_soon(loop.call_soon, send_acks)
                                    acks.append(got.packet_id)
                                continue
                        if acks and not send_acks():  # (before any PUBACK of paho's: in order)
                            return
                        rc = packet_read()
                        if rc == MQTT_ERR_AGAIN:
                            pending = getattr(c._sock, "pending", None)  # TLS: bytes decoded, not read
                            if pending is None or pending() <= 0:
                                return
                        elif rc > 0:
                            c._loop_rc_handle(rc)
                            return
                    if buffered[1] < len(buffered[0]):
                        loop.call_soon(read)  # bytes in the buffer wake no selector: come back for them
                except Exception as exc:
                    broken(exc)

            def add_reader(fd: int, callback: Callable[[], None]) -> None:
                loop.add_reader(fd, callback)
                # aiomqtt's on_socket_open, replaced here, also starts its misc loop: paho's loop_misc()
                # every second sends PINGREQ and drops a connection whose PINGRESP does not come back
                # (a hung broker, a half-open connection). aiomqtt's on_socket_close cancels it.
                client._misc_task = loop.create_task(client._misc_loop())

            watch(sock, add_reader, read)

        raised: BaseException | None = None
        paho.on_socket_open = _on_socket_open
        paho.on_connect, paho.on_publish = _on_connect, _on_publish
        paho.on_log, paho.on_disconnect = _on_log, _on_disconnect
        paho.on_socket_register_write = _on_socket_register_write
        try:
            async with AsyncExitStack() as stack:
                # aiomqtt sets the connection's loss as this future's exception; when the loss comes
                # before our reader exists or after it stopped, nobody awaits it: retrieved when set,
                # so that asyncio logs no "Future exception was never retrieved" (a test runner fails on it)
                lost = client._disconnected
                lost.add_done_callback(_retrieve)
                # after the client's exit: when its DISCONNECT could not leave (it waits 10 s, then
                # raises), aiomqtt leaves the future unset, and our reader would wait for ever
                stack.callback(broken, ConnectionResetError("the connection was closed"))
                with waiting:
                    await stack.enter_async_context(client)
                if waiting.cancelled_caught:
                    raise _lost_before_connack(errors)
                if client._disconnected is not lost:
                    # aiomqtt replaces the future when the loss came with CONNACK (in the same read):
                    # the new one would never be set, so it is set now, as the loss it stands for
                    client._disconnected.add_done_callback(_retrieve)
                    broken(ConnectionResetError("the connection was lost as it was made"))
                # Only errors before CONNACK matter to us; without an on_log paho formats no log line
                # per packet (its logger still gets them, cheaply, when that level is enabled).
                paho.on_log = None
                try:
                    yield MQTTConnection(client, connack[0] if connack else ConnAck())
                except BaseException as exc:
                    raised = exc  # the caller's own error (a TimeoutError is an OSError too): not ours
                    raise
        except (aiomqtt.MqttError, OSError) as exc:
            if exc is raised:
                raise
            _raise_closed(exc)


_NOT_AUTHORIZED = 0x87


def _loss(lost: asyncio.Future[None]) -> BaseException:
    """What the connection's disconnect future says of its loss."""
    cause = lost.exception() if lost.done() and not lost.cancelled() else None
    return cause or aiomqtt.MqttError("the connection was lost before the broker answered")


def _retrieve(future: asyncio.Future[None]) -> None:
    """Mark ``future``'s exception as retrieved (it is still there for whoever reads it)."""
    if not future.cancelled():
        future.exception()


def _lost_before_connack(errors: list[str]) -> ConnectionClosed:
    reason = "; ".join(errors) or "no error reported"
    message = f"the broker closed the connection before CONNACK ({reason})"
    if "ALERT" in reason:  # e.g. [SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED], [SSL: TLSV1_ALERT_UNKNOWN_CA]
        message += ": the broker refused the TLS handshake, usually our client certificate (missing, or " \
                   "not signed by a CA it trusts): check TLSOptions.cert_file and key_file"
        return ConnectRefused(message, _NOT_AUTHORIZED)  # permanent: retrying the same certificate will not help
    return ConnectionClosed(message)


class MQTTConnection:
    """An open aiomqtt connection (see :class:`~broker_mqtt.transport.base.Connection`)."""

    __slots__ = ("_client", "_paho", "connack")

    def __init__(self, client: aiomqtt.Client, connack: ConnAck) -> None:
        self._client = client
        self._paho = client._client  # private: non-blocking publish with packet ids (module docstring)
        self.connack = connack

    def publish(self, topic: str, payload: bytes, qos: int, retain: bool) -> int:
        # paho's publish() only queues the packet, synchronously and in call order.
        info = self._paho.publish(topic, payload, qos, retain)
        if info.rc != MQTT_ERR_SUCCESS:
            _raise_closed(aiomqtt.MqttCodeError(info.rc, "could not publish"))
        return info.mid

    async def subscribe(self, mqtt_filter: str, *, sub_id: int, no_local: bool, qos: int = 1) -> None:
        props = Properties(PacketTypes.SUBSCRIBE)
        props.SubscriptionIdentifier = sub_id
        await self._until_lost(self._client.subscribe(
            mqtt_filter, options=SubscribeOptions(qos=qos, noLocal=no_local), properties=props))

    async def unsubscribe(self, mqtt_filter: str) -> None:
        await self._until_lost(self._client.unsubscribe(mqtt_filter))

    async def _until_lost(self, call: Coroutine[Any, Any, Any]) -> None:
        """Run ``call`` (aiomqtt waiting for the broker's SUBACK or UNSUBACK) until it returns, or
        raise ConnectionClosed as soon as the connection is lost: aiomqtt alone waits out its
        timeout (10 s) after the connection is gone, and an endpoint that reconnects subscribes
        every filter before it sends anything."""
        lost = self._client._disconnected
        if lost.done():  # gone already: nothing is sent (paho may still hold the socket)
            call.close()
            _raise_closed(_loss(lost))
        task = asyncio.ensure_future(call)
        task.add_done_callback(_retrieve)  # (its failure is read below, unless we stopped waiting)
        try:
            await asyncio.wait((task, lost), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not task.done():
                task.cancel()
        try:
            if task.done() and not task.cancelled():
                task.result()
                return
        except (aiomqtt.MqttError, OSError) as exc:
            _raise_closed(exc)
        _raise_closed(_loss(lost))

    def messages(self) -> _Messages:
        return _Messages(self._client)

    async def disconnect_ending_session(self) -> None:
        props = Properties(PacketTypes.DISCONNECT)
        props.SessionExpiryInterval = 0
        try:
            self._paho.disconnect(properties=props)  # private: aiomqtt cannot send these properties
        except Exception:  # noqa: BLE001 - best effort; the session then expires on its own
            log.debug("could not send DISCONNECT with session expiry 0", exc_info=True)
        await anyio.sleep(0.01)


class _Messages:
    """aiomqtt's queue of messages received, yielding :class:`Received` and raising ConnectionClosed
    once the connection is gone and what came before is taken.

    Read from aiomqtt's queue directly (private: its ``_queue``): aiomqtt's own iterator starts a task
    and an ``asyncio.wait`` for each message, which under a flood cost more than the message's own
    handling, and three turns of the event loop for each message at low load. The queue holds
    aiomqtt's messages (from paho) and :class:`Received` (PUBLISHes the reader took from paho's
    bytes itself, :mod:`.publish_packet`), in the order they were read; when the connection goes, a
    marker is queued after them, and from that marker on it raises."""

    __slots__ = ("_queue", "_disconnected", "_taken", "_gone")

    def __init__(self, client: aiomqtt.Client) -> None:
        queue: asyncio.Queue[Any] = client._queue  # Received too (docstring)
        self._queue = queue
        self._disconnected: asyncio.Future[None] = client._disconnected
        self._taken = 0  # messages taken at once since the last turn of the event loop
        self._gone = False

        def gone(future: asyncio.Future[None]) -> None:
            _retrieve(future)  # read or not, it logs no "exception was never retrieved"
            queue.put_nowait(_GONE)

        self._disconnected.add_done_callback(gone)

    def __aiter__(self) -> _Messages:
        return self

    async def __anext__(self) -> Received:
        queue = self._queue
        if self._gone:
            self._raise_gone()
        if queue.qsize() and self._taken < READ_BURST:
            self._taken += 1
            message = queue.get_nowait()
        else:
            self._taken = 0
            if queue.qsize():
                await asyncio.sleep(0)  # READ_BURST taken at once: the other tasks' turn (get() would not yield)
            message = await queue.get()
        if message is _GONE:
            self._gone = True
            self._raise_gone()
        if type(message) is Received:
            return message
        payload = message.payload
        if not isinstance(payload, bytes):
            payload = bytes(payload) if isinstance(payload, bytearray) else b""
        props = message.properties
        sub_ids = getattr(props, "SubscriptionIdentifier", None) if props is not None else None
        return Received(message.topic.value, payload, message.qos, message.retain, tuple(sub_ids) if sub_ids else ())

    def _raise_gone(self) -> NoReturn:
        gone = aiomqtt.MqttError("Disconnected during message iteration")  # aiomqtt's words
        if not self._disconnected.cancelled():
            gone.__cause__ = self._disconnected.exception()
        _raise_closed(gone)


_GONE = object()  # queued after the last message of a connection (_Messages)
