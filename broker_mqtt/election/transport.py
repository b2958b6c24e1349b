"""The MQTT transport: the actor protocol over a broker_mqtt Endpoint, unwrapped.

Each protocol message travels as a bare CBOR map, one per PUBLISH, at QoS 1 with no node-message
envelope. The endpoint's raw subscription has its own MQTT subscription identifier, which is how
our own messages come back exactly once (docs/wire-format.md §5).

Two layouts:

* **shared** (the default): every node publishes on the one MQTT topic ``topic``, so any other
  implementation of the asyncactor protocol on the same topic interoperates. Nothing proves who
  sent a message: anyone who may write the topic can bid, ping or claim the tag in any name
  (docs/security.md).
* **bound** (``bound=True``, what elected stores and queues use): each node publishes on
  ``<topic>/<its endpoint's client id>`` and listens on ``<topic>/+``. A broker ACL that lets a
  client write only below its own client id (and only members write below ``topic``) makes the
  sender certain; a message whose node (``init``, ``vers``, ``ping``) is not of the endpoint that
  topic level names (node names ``<endpoint id hex>`` or ``<endpoint id hex>.<anything>``) is
  dropped and counted in :attr:`MQTTTransport.forged`. When the endpoint has a trust store, every
  message must also be sealed by that client's key (``Endpoint.verify``): one that is not is dropped
  and counted in :attr:`MQTTTransport.forged` too.

Payloads that are not a CBOR map are counted in :attr:`MQTTTransport.malformed` and skipped.

While the endpoint is disconnected nothing is queued: a message sent then is dropped (counted in
:attr:`MQTTTransport.dropped_offline`), and :meth:`MQTTTransport.links` tells the actor, which bids
no more until the connection is back and then re-learns the group (docs/asyncactor.md §10). A node
cut off from the broker therefore never becomes "it" on its own, and its stale bid never reaches the
group after the reconnect, where it would have won against the holder's renewals it had missed.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ..endpoint.endpoint import Endpoint
from ..endpoint.events import ConnectionLost, ConnectionRestored
from ..errors import TopicError, peer_repr
from ..wire import codec
from ..wire.identity import endpoint_id, node_endpoint

__all__ = ["MQTTTransport"]

log = logging.getLogger("broker_mqtt.election.transport")


class MQTTTransport:
    """A :class:`~asyncactor.transport.Transport` on MQTT topic ``topic`` of ``endpoint`` (see the
    module docstring for ``bound``)."""

    def __init__(self, endpoint: Endpoint, topic: str, *, bound: bool = False) -> None:
        if not topic or "+" in topic or "#" in topic or topic.startswith("$"):
            raise TopicError(f"actor topic {topic!r} must be a plain MQTT topic (no wildcards, no '$')")
        self.endpoint = endpoint
        self.topic = topic
        self.bound = bound
        self._send_topic = f"{topic}/{endpoint.client_id}" if bound else topic
        self._filter = f"{topic}/+" if bound else topic
        self.malformed = 0
        self.forged = 0
        self.dropped_offline = 0  # messages not sent because the endpoint was disconnected

    async def send(self, msg: dict[str, Any]) -> None:
        if not self.endpoint.connected:
            # not queued for the reconnect: a ping from before a cut would reach the group late
            # and count as a bid on a view that is stale by then (the actor re-learns instead)
            self.dropped_offline += 1
            return
        # urgent: a ping must not wait behind the endpoint's other traffic (a late re-ping loses the tag)
        await self.endpoint.publish_raw(self._send_topic, codec.encode(msg), qos=1, urgent=True)

    @asynccontextmanager
    async def links(self) -> AsyncIterator[AsyncIterator[bool]]:
        """The endpoint's connection state, now and at each change (the actor's optional
        ``links()``: it bids only while connected, and re-learns the group after a reconnect)."""
        async with self.endpoint.status() as status:

            async def states() -> AsyncIterator[bool]:
                yield self.endpoint.connected
                async for event in status:
                    if isinstance(event, ConnectionLost):
                        yield False
                    elif isinstance(event, ConnectionRestored):
                        yield True

            yield states()

    def _is_forged(self, mqtt_topic: str, msg: dict[str, Any]) -> bool:
        """Whether a bound message's node is not of the endpoint its topic names."""
        sender = endpoint_id(mqtt_topic[len(self.topic) + 1:])
        if sender is None:
            return True
        node = msg.get("node")
        if node is None:  # "hist": a side's history, told by any member
            return msg.get("t") != "hist"
        return not isinstance(node, str) or node_endpoint(node) != sender.hex

    @asynccontextmanager
    async def monitor(self) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        async with self.endpoint.subscribe_raw(self._filter) as sub:

            async def messages() -> AsyncIterator[dict[str, Any]]:
                async for raw in sub:
                    payload = raw.payload
                    if self.bound:
                        try:
                            payload = self.endpoint.verify(raw.topic, payload, sender=raw.topic[len(self.topic) + 1:],
                                                           retained=raw.retain)
                        except codec.DecodeError as exc:  # a SignatureError
                            self.forged += 1
                            log.warning("dropping an election message on %s: %s", raw.topic, exc)
                            continue
                    try:
                        msg = codec.decode(payload)
                    except codec.DecodeError as exc:
                        msg = exc
                    if not isinstance(msg, dict):
                        self.malformed += 1
                        log.warning("skipping a payload on %s that is not a CBOR map: %s", raw.topic, peer_repr(msg))
                        continue
                    if self.bound and self._is_forged(raw.topic, msg):
                        self.forged += 1
                        log.warning("dropping an election message on %s whose node is not its sender's", raw.topic)
                        continue
                    yield msg

            yield messages()
