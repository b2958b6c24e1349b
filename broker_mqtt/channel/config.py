"""ChannelConfig: the timers and bounds a producer and its consumers agree on."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ChannelConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelConfig:
    """Timers and bounds of a channel; producer and consumers should agree on them.

    - ``heartbeat_interval`` (1.0 s): the producer broadcasts a heartbeat after this long without
      broadcasting, and repeats unacknowledged handshakes this often.
    - ``ack_interval`` (1.0 s): a consumer sends a cumulative ACK (plus a NACK while it has gaps)
      this often, idle or not.
    - ``connection_timeout`` (5): heartbeat intervals of silence after which the producer drops a
      consumer and a consumer declares the producer lost.
    - ``buffer_size`` (1024): events the producer keeps for retransmission, and events a consumer
      buffers out of order; beyond it the producer evicts the oldest, the consumer drops the newest.
    - ``max_nack_ranges`` (64): ranges listed in one NACK; the rest are asked for later.
    """

    heartbeat_interval: float = 1.0
    ack_interval: float = 1.0
    connection_timeout: int = 5
    buffer_size: int = 1024
    max_nack_ranges: int = 64

    def __post_init__(self) -> None:
        if not self.heartbeat_interval > 0 or not self.ack_interval > 0:
            raise ValueError("heartbeat_interval and ack_interval must be positive")
        if self.connection_timeout < 2:
            raise ValueError("connection_timeout must be at least 2 heartbeat intervals")
        if self.buffer_size < 1 or self.max_nack_ranges < 1:
            raise ValueError("buffer_size and max_nack_ranges must be at least 1")

    @property
    def timeout(self) -> float:
        """Seconds of silence after which a peer is considered dead."""
        return self.heartbeat_interval * self.connection_timeout
