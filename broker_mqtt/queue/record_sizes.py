"""How many bytes a work queue's log records take: the budget each record keeps to (sans-io).

A record travels in one MQTT message, so it must fit the broker's maximum packet: every queue
command keeps its record within :data:`RECORD_BYTES` (an acquire within half of it, as its record
carries each message twice), by the bounds below, which are computed without encoding (the
message's data by :func:`~broker_mqtt.wire.codec.size_bound`). Publishing refuses a message that
could not be delivered alone (:func:`largest_acquire` past what the broker carries).
"""

from __future__ import annotations

from typing import Any

from ..wire.codec import size_bound

__all__ = ["RECORD_BYTES", "MAX_ERASES", "MAX_OWNER", "PUBLISHED_OVERHEAD", "ACQUIRED_OVERHEAD", "SETTLED_OVERHEAD",
           "ERASED_COST", "published_cost", "acquired_cost", "largest_acquire", "settled_cost"]

#: bytes of messages one record of the queue carries at most, one message always: a record larger
#: than the broker's maximum packet could not travel. An acquire hands over what fits (by
#: :func:`acquired_cost`: its record carries each message twice, as its new state and in the answer),
#: a release of an owner's messages takes back what fits, and a consumer's settlements go in writes
#: that fit (:func:`settled_cost`). Publishing refuses a message that would not fit alone
#: (:class:`~.errors.MessageTooLarge`). 64 KiB fits every broker this project knows of.
RECORD_BYTES = 64 * 1024
MAX_ERASES = RECORD_BYTES // 16  #: erases of a record that erases messages (16 bytes each at most)
MAX_OWNER = 200  #: ASCII characters of a consumer's owner id (theirs are 41): a record carries it per message


#: bytes a message adds to records beyond its data (keys, state, owner, counts, ids; the answer's
#: text for a settlement refused, or a dead message's reason, less MAX_REASON): upper bounds
PUBLISHED_OVERHEAD = 84
ACQUIRED_OVERHEAD = 122
SETTLED_OVERHEAD = 212
ERASED_COST = 24  # an accepted message's erase, and its answer


def published_cost(size: int) -> int:
    """A bound of the bytes that publishing a message whose encoding is at most ``size`` bytes adds
    to the publish's record."""
    return size + PUBLISHED_OVERHEAD


def acquired_cost(data: Any, owner: str, *, size: int | None = None) -> int:
    """A bound of the bytes that acquiring a message of ``data`` adds to an acquire's record (and
    takes from its RECORD_BYTES // 2); ``size``: ``size_bound(data)``, if known already."""
    return 2 * (size_bound(data) if size is None else size) + len(owner) + ACQUIRED_OVERHEAD


def largest_acquire(size: int) -> int:
    """A bound of the bytes of an acquire's record whose last message's encoding is at most ``size``
    bytes (those before it take less than RECORD_BYTES // 2): what the broker must carry for that
    message to be delivered."""
    return RECORD_BYTES // 2 + 2 * size + MAX_OWNER + ACQUIRED_OVERHEAD


def settled_cost(data: Any, reason: str | None, *, size: int | None = None) -> int:
    """A bound of the bytes that settling or releasing a message of ``data`` adds to a record;
    ``size``: ``size_bound(data)``, if known already."""
    return (size_bound(data) if size is None else size) + (0 if reason is None else 4 * len(reason)) \
        + SETTLED_OVERHEAD
