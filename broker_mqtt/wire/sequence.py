"""The sequence header of a PUBLISH of node messages: which numbers its messages carry.

Wire form (docs/wire-format.md §3): a PUBLISH of node messages may begin with one CBOR item ::

    1363([stream, first])

(tag 1363, an array of two unsigned integers), before its node messages. The publisher numbers the
node messages it queues for each MQTT topic and QoS (a *stream*) consecutively: the messages of
this PUBLISH are numbers ``first``, ``first + 1``, ... ``stream`` (below 2**32) is drawn when the
publisher starts the stream, so a restarted publisher, or one that forgot an idle stream, starts a
new one instead of reusing numbers. The header is inside what a signature covers. A receiver that
knows where a stream stands sees a gap (numbers that never came: messages lost), a repeat (a batch
sent again after a reconnect, or a copy the broker redelivered) and numbers that come late.
"""

from __future__ import annotations

from .codec import DecodeError

__all__ = ["SEQUENCE_TAG", "sequence_header", "split_sequence"]

SEQUENCE_TAG = 1363
_HEAD = b"\xd9\x05\x53\x82"  # tag 1363 (two-byte argument), array of 2
_MAX_STREAM = 2**32


def _uint(value: int) -> bytes:
    if value < 24:
        return bytes((value,))
    if value < 0x100:
        return b"\x18" + bytes((value,))
    if value < 0x10000:
        return b"\x19" + value.to_bytes(2, "big")
    if value < 0x100000000:
        return b"\x1a" + value.to_bytes(4, "big")
    return b"\x1b" + value.to_bytes(8, "big")


def sequence_header(stream: int, first: int) -> bytes:
    """The header of a PUBLISH whose first node message is number ``first`` of ``stream``."""
    if not 0 <= stream < _MAX_STREAM or not 0 <= first < 2**64:
        raise ValueError(f"sequence header out of range: stream {stream}, first {first}")
    return _HEAD + _uint(stream) + _uint(first)


def _read_uint(data: bytes, pos: int) -> tuple[int, int]:
    if pos >= len(data):
        raise DecodeError("truncated sequence header")
    head = data[pos]
    if head < 24:
        return head, pos + 1
    width = {0x18: 1, 0x19: 2, 0x1A: 4, 0x1B: 8}.get(head)
    if width is None or pos + 1 + width > len(data):
        raise DecodeError("malformed sequence header: not two unsigned integers")
    return int.from_bytes(data[pos + 1:pos + 1 + width], "big"), pos + 1 + width


def split_sequence(data: bytes) -> tuple[tuple[int, int] | None, int]:
    """``((stream, first), offset of the first node message)`` when ``data`` begins with a sequence
    header; ``(None, 0)`` when it does not. Raises :class:`DecodeError` for a malformed header."""
    if not data.startswith(_HEAD):
        return None, 0
    stream, pos = _read_uint(data, len(_HEAD))
    first, pos = _read_uint(data, pos)
    if stream >= _MAX_STREAM:
        raise DecodeError(f"sequence header names stream {stream}, beyond 2**32")
    return (stream, first), pos
