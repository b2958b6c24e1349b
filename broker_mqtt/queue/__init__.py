"""Replicated work queues over elected stores (``docs/queues.md``).

- :mod:`.model`: how messages live in the replicated state; the master's index (sans-io);
- :mod:`.commands`: publish, acquire, settle, release-owner and renew, computed by the master (sans-io);
- :mod:`.batching`: group commit of concurrent operations (anyio);
- :mod:`.attached`: the anyio layer (``Endpoint.attach_queue``).
"""

from .attached import Consumer, DeadLetter, Delivery, QueueStats, WorkQueue, attach_queue
from .commands import Acquire, Publish, ReleaseOwner, Renew, Settle
from .errors import AlreadySettled, NotHeld, QueueError
from .model import MessageRecord, MessageState, QueueIndex

__all__ = [
    "Acquire", "AlreadySettled", "Consumer", "DeadLetter", "Delivery", "MessageRecord", "MessageState",
    "NotHeld", "Publish", "QueueError", "QueueIndex", "QueueStats", "ReleaseOwner", "Renew", "Settle",
    "WorkQueue", "attach_queue",
]
