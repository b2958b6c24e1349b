"""Replicated work queues over elected stores (``docs/queues.md``).

- :mod:`.model`: how messages live in the replicated state; the master's index (sans-io);
- :mod:`.commands`: publish, acquire, settle, release-owner and renew, computed by the master (sans-io);
- :mod:`.batching`: group commit of concurrent operations (anyio);
- :mod:`.attached`: the anyio layer: the handle and its service (``attach_queue(ep, name)``);
- :mod:`.consumer`: consumers and their deliveries (anyio);
- :mod:`.log`: log readers, with their own persistent read pointer (anyio).
"""

from .attached import DeadLetter, QueueStats, WorkQueue, attach_queue
from .commands import (
    Acquire,
    CommitReader,
    Forget,
    Publish,
    RegisterReader,
    ReleaseOwner,
    RemoveReader,
    Renew,
    Settle,
)
from .consumer import Consumer, Delivery
from .errors import AlreadySettled, NotHeld, QueueError, UnknownReader
from .log import LogEntry, LogReader
from .model import MessageRecord, MessageState, QueueIndex

__all__ = [
    "Acquire", "AlreadySettled", "CommitReader", "Consumer", "DeadLetter", "Delivery", "Forget", "LogEntry", "LogReader",
    "MessageRecord", "MessageState", "NotHeld", "Publish", "QueueError", "QueueIndex", "QueueStats",
    "RegisterReader", "ReleaseOwner", "RemoveReader", "Renew", "Settle", "UnknownReader", "WorkQueue",
    "attach_queue",
]
