"""Where each publisher's numbered messages stand at a receiver: gaps, repeats, late arrivals. Sans-io.

Theory of operation. A publisher numbers the node messages it queues per MQTT topic and QoS
(a *stream*; broker_mqtt/wire/sequence.py) and a PUBLISH carries one consecutive range of them.
A :class:`SequenceTracker` keeps, per stream as a receiver sees it (the key names the subscription
it came through, the topic and the QoS), the next number it expects and the ranges of numbers it
delivered. A PUBLISH whose range starts at the expected number is new; one that starts beyond it
reveals a gap, numbers that never came (the broker lost them: a crash before it saved them, a full
queue for a slow subscriber, QoS 0), reported once; one whose range lies before it is a repeat (a
batch resent after a reconnect, or redelivered by the broker) and is dropped only when every one of
its numbers was delivered already: anything else before the expected number is delivered as *late*
(it was reported missing, or a forged header jumped the stream ahead: a lie in a header can cost a
false report, never a message). The first PUBLISH of a stream, or of a new stream id (the
publisher restarted), sets the baseline. Memory is bounded: ``max_streams`` streams (least recently
used out: a forgotten stream starts afresh) and ``max_ranges`` delivered ranges per stream (in-order
delivery keeps one; each gap adds one; the oldest are forgotten, so a very old repeat passes).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

__all__ = ["IN_ORDER", "SequenceTracker", "Verdict"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do with the messages of one PUBLISH: deliver those at indexes ``[skip, count)``;
    ``missed`` numbers were found missing just now; ``repeated`` were dropped as repeats; ``late``
    were delivered although reported missing earlier."""

    skip: int = 0
    missed: int = 0
    repeated: int = 0
    late: int = 0


IN_ORDER = Verdict()  #: deliver everything: what almost every PUBLISH gets


@dataclass(slots=True)
class _Stream:
    stream: int
    next: int
    delivered: list[list[int]]  #: sorted, disjoint [lo, hi) ranges of numbers delivered


class SequenceTracker:
    """Per-stream expectations of one receiver (see the module docstring)."""

    def __init__(self, *, max_streams: int = 100_000, max_ranges: int = 16) -> None:
        self.max_streams = max_streams
        self.max_ranges = max_ranges
        self._streams: OrderedDict[Hashable, _Stream] = OrderedDict()

    def __len__(self) -> int:
        return len(self._streams)

    def check(self, key: Hashable, stream: int, first: int, count: int) -> Verdict:
        """Judge a PUBLISH holding numbers ``[first, first + count)`` of ``stream`` under ``key``."""
        end = first + count
        state = self._streams.get(key)
        if state is None or state.stream != stream:
            self._streams[key] = _Stream(stream, end, [[first, end]])
            self._streams.move_to_end(key)
            if len(self._streams) > self.max_streams:
                self._streams.popitem(last=False)
            return IN_ORDER
        self._streams.move_to_end(key)
        expected = state.next
        if first == expected:
            state.next = end
            last = state.delivered[-1]
            if last[1] == first:
                last[1] = end
            else:
                self._add(state, first, end)
            return IN_ORDER
        if first > expected:
            state.next = end
            self._add(state, first, end)
            return Verdict(missed=first - expected)
        seen = self._covered(state, first, min(end, expected))
        if end <= expected:
            if seen == count:
                return Verdict(skip=count, repeated=count)
            self._add(state, first, end)
            return Verdict(late=count - seen)
        # Overlaps the expected number: what was delivered of it is skipped, the rest is new.
        state.next = end
        self._add(state, first, end)
        if seen == expected - first:
            return Verdict(skip=seen, repeated=seen)
        return Verdict(late=expected - first - seen)

    @staticmethod
    def _covered(state: _Stream, lo: int, hi: int) -> int:
        """How many numbers of ``[lo, hi)`` were delivered."""
        return sum(max(0, min(hi, b) - max(lo, a)) for a, b in state.delivered)

    def _add(self, state: _Stream, lo: int, hi: int) -> None:
        merged: list[list[int]] = []
        for a, b in sorted([*state.delivered, [lo, hi]]):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        state.delivered = merged[-self.max_ranges:]
