"""Which topic each elected-store message travels on (``docs/elected-stores.md`` § 8).

Four broker topics per elected store ``name`` (node messages of kind COMMAND):

* ``/$store/<name>/e``: replication. Every message a replica sends is broadcast here (but writes,
  below), and every replica subscribes.
* ``/$store/<name>/ew``: writes (``write``; ``writes``, several of one writer), of replicas and of
  writers without a replica alike, and the replicas' acknowledgements (``ack``), sent to the endpoint
  of the master they are meant for only (MQTT unicast). A write names that master: its last element is
  the master's epoch ``(term, master node id)``, and node ids begin with their endpoint's UUID in hex;
  an ``ack`` names it by its epoch, its second element (only that epoch's master counts acks: on ``e``
  every replica would receive every other's ack for each log batch, and drop it). Every replica
  subscribes (any candidate may become master; a replica that is not that master ignores the
  message, as it would on ``e``). One whose epoch does not name an endpoint (no master known) is
  broadcast on ``e`` instead, as all of them once were.
* ``/$store/<name>/em``: the master's announcements for writers without a replica: the master's
  ``active`` and its heartbeats, a copy of what it broadcasts on ``e``. A writer learns the master
  from them without receiving the replication log.
* ``/$store/<name>/ea``: answers (``wack``) to a writer without a replica, sent to its endpoint
  only (MQTT unicast); a ``wack`` that names the writer's endpoint (its sixth element) goes there.

``ew``, ``em`` and ``ea`` are not below ``e``: a subscription to ``e`` (prefix semantics by level)
does not receive them. A ``wack`` for a replica's own writes stays on ``e``, in order after the log
records it answers, so that a replica that gets its answer already holds the data it wrote. Writes
need no order with the rest: the master applies each writer's writes in ``n`` order whatever order
they arrive in, ignores those meant for another epoch, and their writer re-sends the unanswered ones.
"""

from __future__ import annotations

import functools
import uuid
from typing import Any

__all__ = ["replication_topic", "writes_topic", "master_topic", "answers_topic", "routes"]


def replication_topic(name: str) -> str:
    return f"/$store/{name}/e"


def writes_topic(name: str) -> str:
    return f"/$store/{name}/ew"


def master_topic(name: str) -> str:
    return f"/$store/{name}/em"


def answers_topic(name: str) -> str:
    return f"/$store/{name}/ea"


@functools.lru_cache(maxsize=1024)
def _node_endpoint(node: str) -> uuid.UUID | None:
    """The endpoint of node id ``<endpoint uuid hex>.<random>``; None if it does not name one."""
    head, dot, _ = node.partition(".")
    if not dot or len(head) != 32:
        return None
    try:
        return uuid.UUID(hex=head)
    except ValueError:
        return None


def _write_target(epoch: Any) -> uuid.UUID | None:
    """The endpoint of the master a write is meant for (its epoch ``[term, master node id]``)."""
    if isinstance(epoch, (list, tuple)) and len(epoch) == 2 and isinstance(epoch[1], str):
        return _node_endpoint(epoch[1])
    return None


#: where the epoch of the intended master is, in the messages that only that master uses
_EPOCH_AT = {"write": 5, "writes": 4, "ack": 1}


def routes(name: str, msg: list[Any]) -> list[tuple[str, uuid.UUID | None]]:
    """Where ``msg`` (a replica's or a writer's outgoing message) goes: ``(topic, endpoint)`` pairs,
    ``None`` for a broadcast. A ``wack`` whose endpoint is not a UUID in hex, and a ``write``,
    ``writes`` or ``ack`` whose epoch names no master's endpoint, are broadcast on ``e`` instead."""
    kind = msg[0]
    at = _EPOCH_AT.get(kind) if isinstance(kind, str) else None
    if at is not None:  # for the master of the epoch they carry, which alone uses them
        target = _write_target(msg[at]) if len(msg) > at else None
        if target is not None:
            return [(writes_topic(name), target)]
        return [(replication_topic(name), None)]
    if kind == "wack" and len(msg) > 5:
        try:
            return [(answers_topic(name), uuid.UUID(hex=msg[5]))]
        except (TypeError, ValueError, AttributeError):
            return [(replication_topic(name), None)]
    if kind == "active" or (kind == "hb" and msg[3] == "master"):
        return [(replication_topic(name), None), (master_topic(name), None)]
    return [(replication_topic(name), None)]
