"""The MQTT transport: the actor protocol over a broker_mqtt Endpoint, unwrapped.

Each protocol message travels as a bare CBOR map, one per PUBLISH, at QoS 1 on the actor's MQTT
topic, with no node-message envelope, so any other implementation of the asyncactor protocol on
the same topic interoperates. The endpoint's raw subscription has its own MQTT subscription
identifier, which is how our own messages come back exactly once (docs/wire-format.md §5).

Payloads that are not a CBOR map are counted in :attr:`MQTTTransport.malformed` and skipped.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ..endpoint.endpoint import Endpoint
from ..errors import TopicError
from ..wire import codec

__all__ = ["MQTTTransport"]

log = logging.getLogger("broker_mqtt.election.transport")


class MQTTTransport:
    """A :class:`~asyncactor.transport.Transport` on MQTT topic ``topic`` of ``endpoint``."""

    def __init__(self, endpoint: Endpoint, topic: str) -> None:
        if not topic or "+" in topic or "#" in topic or topic.startswith("$"):
            raise TopicError(f"actor topic {topic!r} must be a plain MQTT topic (no wildcards, no '$')")
        self.endpoint = endpoint
        self.topic = topic
        self.malformed = 0

    async def send(self, msg: dict[str, Any]) -> None:
        # urgent: a ping must not wait behind the endpoint's other traffic (a late re-ping loses the tag)
        await self.endpoint.publish_raw(self.topic, codec.encode(msg), qos=1, urgent=True)

    @asynccontextmanager
    async def monitor(self) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        async with self.endpoint.subscribe_raw(self.topic) as sub:

            async def messages() -> AsyncIterator[dict[str, Any]]:
                async for raw in sub:
                    try:
                        msg = codec.decode(raw.payload)
                    except codec.DecodeError as exc:
                        msg = exc
                    if not isinstance(msg, dict):
                        self.malformed += 1
                        log.warning("skipping a payload on %s that is not a CBOR map: %s", self.topic, msg)
                        continue
                    yield msg

            yield messages()
