"""Errors of work queues. Every one is a :class:`~broker_mqtt.store.errors.StoreError` (a queue is an
elected store: its writes can also fail with :class:`~broker_mqtt.store.replication.NoMaster`)."""

from __future__ import annotations

from ..errors import PayloadTooLarge
from ..store.errors import StoreError

__all__ = ["QueueError", "NotHeld", "AlreadySettled", "UnknownReader", "MessageTooLarge"]


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


class MessageTooLarge(PayloadTooLarge):
    """A message too large for this queue's broker, refused when published (nothing was published):
    the record of the acquire that delivers it carries it twice (its new state and the answer),
    beside up to 32 KiB of messages before it, so a message must be under about half of the
    broker's maximum packet less 33 KiB (``docs/queues.md``, "Sizes"). ``size``: a bound of the
    message's encoding; ``limit``: the broker's maximum packet."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(size, limit)
        self.args = (f"a queue message of {size} bytes is too large for the broker's maximum packet of "
                     f"{limit} bytes: the record of the acquire that delivers it carries it twice, beside "
                     f"up to 32 KiB of other messages; split it, or raise max_packet_size on the broker",)
