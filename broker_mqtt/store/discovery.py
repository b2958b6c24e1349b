"""Master discovery messages of attached stores, and the one decode of any message on a store topic.

Discovery (``docs/stores.md`` § 6): ``["store_query", <asker id>]`` asks who is master (a
:class:`Query`); ``["store_master", <master id>]`` answers it or announces a master (a
:class:`MasterIs`). Ids are node ids (``<endpoint uuid hex>.<incarnation>``, at least 32
characters). :func:`decode_store_message` tells these apart from channel messages
(:mod:`broker_mqtt.channel.channel`) and store control messages (:func:`.decode_control`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import channel as ch
from ..errors import peer_repr
from .commands import AttachClone, decode_control
from .errors import StoreDecodeError

__all__ = ["Query", "MasterIs", "decode_store_message", "claimed_node"]

_CHANNEL_KINDS = frozenset(k.value for k in ch.MessageKind)


@dataclass(frozen=True, slots=True)
class Query:
    """``asker`` looks for the master of the store."""

    asker: str

    def to_wire(self) -> list[Any]:
        return ["store_query", self.asker]


@dataclass(frozen=True, slots=True)
class MasterIs:
    """``master`` is a master of the store (an answer to a :class:`Query`, or an announcement)."""

    master: str

    def to_wire(self) -> list[Any]:
        return ["store_master", self.master]


def decode_store_message(wire: Any) -> Any:
    """Any store message: channel, attach_clone, or discovery; raise StoreDecodeError/ChannelDecodeError."""
    if isinstance(wire, list) and wire:
        head = wire[0]
        if isinstance(head, str) and head in _CHANNEL_KINDS:  # (a list or map head is unhashable)
            return ch.decode_message(wire)
        if head in ("store_query", "store_master"):
            if len(wire) != 2 or not isinstance(wire[1], str) or len(wire[1]) < 32:
                raise StoreDecodeError(f"malformed {head}: {peer_repr(wire, 200)}")
            return Query(wire[1]) if head == "store_query" else MasterIs(wire[1])
    return decode_control(wire)


def claimed_node(msg: Any) -> str | None:
    """The node id a decoded store message speaks for (the producer of channel traffic, the consumer
    of its acknowledgements, the asker, the master, the attaching clone); its first 32 characters
    are its endpoint's id in hex, which the topic the message came on must name. None for a
    message that names none."""
    match msg:
        case ch.Event(producer=node) | ch.EventBatch(producer=node) | ch.Handshake(producer=node) \
                | ch.Heartbeat(producer=node) | ch.RetransmitFailed(producer=node):
            return node
        case ch.CumulativeAck(consumer=node) | ch.Nack(consumer=node):
            return node
        case Query(asker=node) | MasterIs(master=node) | AttachClone(clone=node):
            return node
    return None
