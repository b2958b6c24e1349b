"""Errors of work queues. Every one is a :class:`~broker_mqtt.store.errors.StoreError` (a queue is an
elected store: its writes can also fail with :class:`~broker_mqtt.store.replication.NoMaster`)."""

from __future__ import annotations

from ..store.errors import StoreError

__all__ = ["QueueError", "NotHeld", "AlreadySettled", "UnknownReader"]


class QueueError(StoreError):
    """Base class of the queue's own errors."""


class NotHeld(QueueError):
    """Settling a message this consumer no longer holds: the master had released it (lease expired,
    or the consumer's endpoint was presumed gone) or it was settled already. Nothing changed; the
    message is (or was) delivered to another consumer: at-least-once."""


class AlreadySettled(QueueError):
    """The caller settled the same delivery twice (accept/release/reject once per delivery)."""


class UnknownReader(QueueError):
    """The queue has no log reader of that name: it was never registered (``register_reader``), or
    it was removed. Nothing changed."""
