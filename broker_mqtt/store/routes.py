"""Which topic each elected-store message travels on (``docs/elected-stores.md`` § 8).

Three broker topics per elected store ``name`` (node messages of kind COMMAND):

* ``/$store/<name>/e``: replication. Every message a replica sends is broadcast here, and every
  replica subscribes; writes of replica-less writers are sent here too (the master reads them).
* ``/$store/<name>/em``: the master's announcements for writers without a replica: the master's
  ``active`` and its heartbeats, a copy of what it broadcasts on ``e``. A writer learns the master
  from them without receiving the replication log.
* ``/$store/<name>/ea``: answers (``wack``) to a writer without a replica, sent to its endpoint
  only (MQTT unicast); a ``wack`` that names the writer's endpoint (its sixth element) goes there.

``em`` and ``ea`` are not below ``e``: a subscription to ``e`` (prefix semantics by level) does not
receive them. A ``wack`` for a replica's own writes stays on ``e``, in order after the log records
it answers, so that a replica that gets its answer already holds the data it wrote.
"""

from __future__ import annotations

import uuid
from typing import Any

__all__ = ["replication_topic", "master_topic", "answers_topic", "routes"]


def replication_topic(name: str) -> str:
    return f"/$store/{name}/e"


def master_topic(name: str) -> str:
    return f"/$store/{name}/em"


def answers_topic(name: str) -> str:
    return f"/$store/{name}/ea"


def routes(name: str, msg: list[Any]) -> list[tuple[str, uuid.UUID | None]]:
    """Where ``msg`` (a replica's outgoing message) goes: ``(topic, endpoint)`` pairs, ``None`` for a
    broadcast. A ``wack`` whose endpoint is not a UUID in hex is broadcast on ``e`` instead."""
    kind = msg[0]
    if kind == "wack" and len(msg) > 5:
        try:
            return [(answers_topic(name), uuid.UUID(hex=msg[5]))]
        except (TypeError, ValueError, AttributeError):
            return [(replication_topic(name), None)]
    if kind == "active" or (kind == "hb" and msg[3] == "master"):
        return [(replication_topic(name), None), (master_topic(name), None)]
    return [(replication_topic(name), None)]
