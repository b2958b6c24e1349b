"""The outgoing queue: coalesces node messages into PUBLISH packets, bounded, sans-io.

Messages for the same MQTT topic and QoS are appended to one open *batch* (their bytes simply
concatenate into a CBOR sequence) until it reaches ``max_batch_bytes``; the sender takes batches
one at a time. While the sender waits for the broker, new messages pile into the open batches,
so the batch size adapts to load: a lone message leaves at once, a flood leaves in large
PUBLISHes. Order is kept per (topic, QoS), which is all MQTT orders anyway.

Bounds (``max_pending_bytes``, ``max_pending_messages``) cover everything accepted and not yet
confirmed by the broker, the batch in flight included. The I/O layer decides what "full" means
for the caller: wait while connected, fail with PublishQueueFull while disconnected.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

__all__ = ["Batch", "Outbox"]


@dataclass(slots=True, eq=False)
class Batch:
    topic: str
    qos: int
    retain: bool = False
    data: bytearray = field(default_factory=bytearray)
    count: int = 0


class Outbox:
    def __init__(
        self,
        *,
        max_batch_bytes: int = 256 * 1024,
        max_pending_bytes: int = 64 * 1024 * 1024,
        max_pending_messages: int = 200_000,
    ) -> None:
        self.max_batch_bytes = max_batch_bytes
        self.max_pending_bytes = max_pending_bytes
        self.max_pending_messages = max_pending_messages
        self.pending_bytes = 0
        self.pending_messages = 0
        self._open: dict[tuple[str, int], Batch] = {}
        self._sealed: deque[Batch] = deque()

    @property
    def full(self) -> bool:
        return self.pending_bytes >= self.max_pending_bytes or self.pending_messages >= self.max_pending_messages

    def __bool__(self) -> bool:
        return bool(self._sealed or self._open)

    def add(self, topic: str, qos: int, data: bytes, *, retain: bool = False, coalesce: bool = True) -> None:
        """Queue ``data`` (one node message, or one raw payload when ``coalesce`` is false)."""
        if coalesce and not retain:
            key = (topic, qos)
            batch = self._open.get(key)
            if batch is not None and len(batch.data) + len(data) > self.max_batch_bytes:
                self._sealed.append(self._open.pop(key))
                batch = None
            if batch is None:
                batch = self._open[key] = Batch(topic, qos)
        else:
            # Keep per-topic order: whatever is open for this topic goes first.
            opened = self._open.pop((topic, qos), None)
            if opened is not None:
                self._sealed.append(opened)
            batch = Batch(topic, qos, retain)
            self._sealed.append(batch)
        batch.data += data
        batch.count += 1
        self.pending_bytes += len(data)
        self.pending_messages += 1

    def take(self) -> Batch | None:
        """The next batch to send (oldest first), or None. Call :meth:`done` or :meth:`retry` after."""
        if self._sealed:
            return self._sealed.popleft()
        if self._open:
            key = next(iter(self._open))
            return self._open.pop(key)
        return None

    def done(self, batch: Batch) -> None:
        """The broker took ``batch`` (or it was given up): release its share of the bounds."""
        self.pending_bytes -= len(batch.data)
        self.pending_messages -= batch.count

    def retry(self, batch: Batch) -> None:
        """Sending ``batch`` failed: put it back at the front, to go first after reconnecting."""
        self._sealed.appendleft(batch)
