"""Replicated work queues over elected stores (``docs/queues.md``).

- :mod:`.model`: how messages live in the replicated state; the master's index (sans-io);
- :mod:`.commands`: publish, acquire, settle, release-owner and renew, computed by the master (sans-io);
- :mod:`.record_sizes`: the bytes each of the queue's log records may take, and their bounds (sans-io);
- :mod:`.batching`: group commit of concurrent operations (anyio);
- :mod:`.publishing`: a handle's publishes, checked and written in records the broker carries (anyio);
- :mod:`.attached`: the anyio layer: the handle and its service (``attach_queue(ep, name)``);
- :mod:`.consumer`: consumers and their deliveries (anyio);
- :mod:`.log`: log readers, with their own persistent read pointer (anyio).

This package exports the user API; the commands and the master's index stay in their modules.
"""

from .attached import DeadLetter, QueueStatistics, WorkQueue, attach_queue
from .consumer import Consumer, Delivery
from .errors import AlreadySettled, MessageTooLarge, NotHeld, QueueError, UnknownReader
from .log import LogEntry, LogReader
from .model import MessageState

__all__ = [
    "attach_queue", "WorkQueue", "Consumer", "Delivery", "DeadLetter", "LogReader", "LogEntry", "MessageState",
    "QueueStatistics", "QueueError", "AlreadySettled", "NotHeld", "UnknownReader", "MessageTooLarge",
]
