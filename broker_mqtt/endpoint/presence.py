"""Presence: who else is on the network, sans-io (docs/wire-format.md, presence).

Every endpoint keeps one retained message on its presence topic ``<ns>/p/<client id>``: a single control
node message ``{"op": "hello", "name": ..., "topics": [prefixes it subscribes to]}``, sent again
whenever its subscriptions change. Leaving, it publishes ``{"op": "bye"}`` (not retained) and then
clears the retained message with an empty payload; its last will clears it too when its connection
drops without a goodbye. So a peer is *added* by a hello, *removed* by a bye and *lost* when its
presence is cleared while it was still known.

:class:`PeerTable` takes each presence PUBLISH and returns a :class:`PresenceUpdate`: the status
events to report and whether waiters on the table should look again. It does no I/O; the endpoint
reports the events and wakes the waiters.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..wire import codec
from ..wire.identity import endpoint_id
from ..wire.message import Kind, NodeEncoder, decode_batch
from ..wire.topics import TopicLayout
from .dispatch import SubscriptionTable
from .events import ErrorCode, ErrorEvent, PeerAdded, PeerInfo, PeerLost, PeerRemoved, StatusEvent

__all__ = ["PeerTable", "PresenceUpdate", "presence_payload", "announced_prefixes"]


def presence_payload(encoder: NodeEncoder, op: str, name: str, topics: Iterable[str]) -> bytes:
    """The presence message ``op`` ("hello" or "bye") of the endpoint ``name`` subscribing ``topics``."""
    body = {"op": op, "name": name, "topics": list(topics)}
    return encoder.encode(Kind.CONTROL, "presence", codec.encode(body))


@dataclass(frozen=True, slots=True)
class PresenceUpdate:
    """What one presence PUBLISH changed."""

    events: tuple[StatusEvent, ...] = ()  #: to report, in order
    changed: bool = False  #: the table may have changed: wake whoever waits for a peer
    malformed: bool = False  #: an undecodable presence message (counted in statistics().malformed)
    forged: bool = False  #: a presence message of another endpoint than its topic's (statistics().forged)


_NOTHING = PresenceUpdate()


class PeerTable:
    """The peers an endpoint knows, from the presence PUBLISHes it receives (its own are ignored)."""

    def __init__(self, layout: TopicLayout, me: uuid.UUID) -> None:
        self._layout = layout
        self._me = me
        self._peers: dict[uuid.UUID, PeerInfo] = {}

    def __contains__(self, peer: uuid.UUID) -> bool:
        return peer in self._peers

    def peers(self) -> list[PeerInfo]:
        """The peers currently known (announced and not lost or removed)."""
        return list(self._peers.values())

    def receive(self, topic: str, payload: bytes) -> PresenceUpdate:
        """Take the PUBLISH ``payload`` received on presence topic ``topic``."""
        client = self._layout.presence_client(topic)
        if client is None:
            return _NOTHING
        peer_id = endpoint_id(client)
        if peer_id is None:
            return PresenceUpdate(
                (ErrorEvent(ErrorCode.MALFORMED_MESSAGE, "presence topic with a bad client id", topic=topic),)
            )
        if peer_id == self._me:
            return _NOTHING
        if not payload:
            info = self._peers.pop(peer_id, None)
            if info is None:
                return _NOTHING
            return PresenceUpdate((PeerLost(info),), changed=True)
        messages, error = decode_batch(payload)
        try:
            if error is not None or len(messages) != 1 or messages[0].kind is not Kind.CONTROL:
                raise codec.DecodeError(str(error) if error else "presence must be one control message")
            if messages[0].sender != peer_id.bytes:
                return PresenceUpdate((ErrorEvent(ErrorCode.FORGED_MESSAGE, "presence sender does not match "
                                                  "its topic", topic=topic),), forged=True)
            body = codec.decode(messages[0].payload)
            if not isinstance(body, dict) or body.get("op") not in ("hello", "bye"):
                raise codec.DecodeError("presence body must be a map with op hello or bye")
            name, topics = body.get("name", ""), body.get("topics", [])
            if not isinstance(name, str) or not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
                raise codec.DecodeError("presence name must be a string and topics a list of strings")
            info = PeerInfo(peer_id, name, tuple(topics))
        except codec.DecodeError as exc:
            event = ErrorEvent(ErrorCode.MALFORMED_MESSAGE, f"bad presence: {exc}", topic=topic)
            return PresenceUpdate((event,), malformed=True)
        events: tuple[StatusEvent, ...] = ()
        if body["op"] == "bye":
            known = self._peers.pop(peer_id, None)
            if known is not None:
                events = (PeerRemoved(known),)
        else:
            known = self._peers.get(peer_id)
            self._peers[peer_id] = info
            if known is None:
                events = (PeerAdded(info),)
        return PresenceUpdate(events, changed=True)


def announced_prefixes(table: SubscriptionTable[Any]) -> list[str]:
    """The topic prefixes an endpoint announces: those of its data filters, each once, in table order."""
    out: dict[str, None] = {}
    for f in table.by_filter.values():
        if f.levels is not None:
            out["/" + "/".join(f.levels)] = None
    return list(out)
