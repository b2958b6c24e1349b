"""Node messages: the one envelope every message on our MQTT topics travels in.

Wire form (docs/wire-format.md §3): a CBOR array of seven items ::

    [version, kind, sender, receivers, ttl, topic, payload]

``version`` is :data:`FORMAT_VERSION`; ``kind`` a :class:`Kind`; ``sender`` the 16 bytes of the
sender's UUID; ``receivers`` null (everyone subscribed) or an array of 16-byte UUIDs; ``ttl`` a
hop count; ``topic`` the broker topic as published; ``payload`` a CBOR byte string holding the
value encoded by :mod:`broker_mqtt.wire.codec`. The payload stays packed: forwarding never decodes
it and a receiver decodes it once, only for a local subscriber that wants it.

One MQTT PUBLISH carries one or more node messages back to back (an RFC 8742 CBOR sequence), after
an optional sequence header that numbers them (:mod:`.sequence`).
:func:`decode_batch` returns every message decoded before the first malformed one together with
the error, so one bad item never discards the good items in front of it.
"""

from __future__ import annotations

import enum
import io
from collections.abc import Iterable
from typing import NamedTuple

import cbor2

from ..errors import peer_repr
from .codec import DecodeError
from .sequence import split_sequence

__all__ = ["FORMAT_VERSION", "DEFAULT_TTL", "Kind", "NodeMessage", "NodeEncoder", "encode_node", "decode_batch",
           "decode_sequenced"]

FORMAT_VERSION = 1
DEFAULT_TTL = 16
_UUID_LEN = 16


class Kind(enum.IntEnum):
    """What a node message carries."""

    DATA = 0  #: a value published on a topic
    COMMAND = 1  #: a store or channel command
    CONTROL = 2  #: presence and other endpoint-to-endpoint control traffic


class NodeMessage(NamedTuple):
    """A decoded envelope; ``payload`` is still packed CBOR. (A NamedTuple: it is on the hot path.)"""

    kind: Kind
    sender: bytes
    receivers: tuple[bytes, ...] | None
    ttl: int
    topic: str
    payload: bytes

    def to_bytes(self) -> bytes:
        return encode_node(self.kind, self.sender, self.receivers, self.ttl, self.topic, self.payload)


def encode_node(
    kind: int,
    sender: bytes,
    receivers: tuple[bytes, ...] | list[bytes] | None,
    ttl: int,
    topic: str,
    payload: bytes,
) -> bytes:
    """Encode one node message. The caller has validated ``topic`` and packed ``payload``.

    For many messages of one sender keep a :class:`NodeEncoder`; this is the same code path.
    """
    return NodeEncoder(sender).encode(kind, topic, payload, None if receivers is None else tuple(receivers), ttl)


class NodeEncoder:
    """Encodes node messages of one sender: the constant head of the array is built once.

    The bytes are those of ``cbor2.dumps([version, kind, sender, receivers, ttl, topic, payload])``
    (a test pins this); this is the only encoder of node messages.
    """

    __slots__ = ("_heads", "_topics", "sender")

    def __init__(self, sender: bytes) -> None:
        self.sender = sender
        self._heads: dict[tuple[int, tuple[bytes, ...] | None, int], bytes] = {}
        self._topics: dict[str, bytes] = {}

    def encode(self, kind: int, topic: str, payload: bytes, receivers: tuple[bytes, ...] | None = None,
               ttl: int = DEFAULT_TTL) -> bytes:
        key = (kind, receivers, ttl)
        head = self._heads.get(key)
        if head is None:
            # 0x87 = array of 7; then version, kind, sender, receivers, ttl, each as CBOR.
            head = b"\x87" + b"".join(
                cbor2.dumps(x) for x in (FORMAT_VERSION, kind, self.sender,
                                         None if receivers is None else list(receivers), ttl)
            )
            self._heads[key] = head
        enc_topic = self._topics.get(topic)
        if enc_topic is None:
            enc_topic = cbor2.dumps(topic)
            if len(self._topics) < 10_000:
                self._topics[topic] = enc_topic
        return head + enc_topic + cbor2.dumps(payload)

    def encode_many(self, kind: int, topic: str, payloads: Iterable[bytes],
                    receivers: tuple[bytes, ...] | None = None, ttl: int = DEFAULT_TTL) -> list[bytes]:
        """``[encode(kind, topic, p, receivers, ttl) for p in payloads]``, the same bytes, faster:
        the head and topic are joined once and each payload gets only its byte-string head."""
        prefix = self.encode(kind, topic, b"", receivers, ttl)[:-1]  # minus the empty string's 0x40
        heads = [prefix + head for head in _BYTES_HEADS]  # whole heads for payloads under 256 bytes
        return [heads[n] + p if (n := len(p)) < 256 else prefix + _bytes_head(n) + p for p in payloads]


#: CBOR heads of byte strings of 0..255 bytes (major type 2).
_BYTES_HEADS = tuple(cbor2.dumps(bytes(n))[:-n or None] for n in range(256))


def _bytes_head(n: int) -> bytes:
    return b"\x59" + n.to_bytes(2, "big") if n < 0x10000 else \
        b"\x5a" + n.to_bytes(4, "big") if n < 0x100000000 else b"\x5b" + n.to_bytes(8, "big")


_KINDS = tuple(Kind)
_new = tuple.__new__


def _check(item: object, offset: int) -> NodeMessage:
    if not isinstance(item, list) or len(item) != 7:
        raise DecodeError(f"node message at byte {offset} is not a 7-item array")
    version, kind, sender, receivers, ttl, topic, payload = item
    if type(version) is not int or version != FORMAT_VERSION:  # not 1.0, not true
        raise DecodeError(f"node message at byte {offset} has format version {peer_repr(version)}, expected 1")
    if type(kind) is not int or kind not in (0, 1, 2):
        raise DecodeError(f"node message at byte {offset} has unknown kind {peer_repr(kind)}")
    if type(sender) is not bytes or len(sender) != _UUID_LEN:
        raise DecodeError(f"node message at byte {offset} has a malformed sender id")
    if receivers is not None:
        if not isinstance(receivers, list) or not all(
            type(r) is bytes and len(r) == _UUID_LEN for r in receivers
        ):
            raise DecodeError(f"node message at byte {offset} has malformed receiver ids")
        receivers = tuple(receivers)
    if type(ttl) is not int or ttl < 0:
        raise DecodeError(f"node message at byte {offset} has a malformed ttl {peer_repr(ttl)}")
    if type(topic) is not str:
        raise DecodeError(f"node message at byte {offset} has a non-string topic")
    if type(payload) is not bytes:
        raise DecodeError(f"node message at byte {offset} has a payload that is not a byte string")
    return _new(NodeMessage, (_KINDS[kind], sender, receivers, ttl, topic, payload))


def _seeks_back() -> bool:
    """Whether cbor2's decoder, which reads ahead, seeks its stream back to just after the item."""
    fp = io.BytesIO(b"\x9f\x01\xff\x02" + bytes(8192))
    try:
        return bool(cbor2.CBORDecoder(fp).decode() == [1] and fp.tell() == 3)
    except cbor2.CBORError:
        return False


_DECODER_SEEKS_BACK = _seeks_back()


def _array_header_len(n: int) -> int:
    return 1 if n < 24 else 2 if n < 0x100 else 3 if n < 0x10000 else 5 if n < 0x100000000 else 9


def _decode_fast(data: bytes) -> list[NodeMessage] | None:
    """The whole batch in one C call, or None when only the exact path can tell.

    Decode the sequence as one indefinite-length array; it held precisely ``data`` iff the
    decoder stopped at the very end (a stray break byte ends it early, leaving trailing bytes).
    cbor2 seeks its stream back to the end of the item it decoded; where it does not
    (:data:`_DECODER_SEEKS_BACK` false), re-encode instead: our encoder is canonical, so the
    bytes match exactly iff the array held precisely ``data``.
    """
    wrapped = b"\x9f" + data + b"\xff"
    try:
        if _DECODER_SEEKS_BACK:
            fp = io.BytesIO(wrapped)
            items = cbor2.CBORDecoder(fp).decode()
            if fp.tell() != len(wrapped):
                return None
        else:
            items = cbor2.loads(wrapped)
            again = cbor2.dumps(items)
            if len(again) - len(data) != _array_header_len(len(items)) or not again.endswith(data):
                return None
    except (cbor2.CBORError, ValueError, TypeError, OverflowError, RecursionError):
        return None
    if type(items) is not list:
        return None
    out = []
    for item in items:
        if (
            type(item) is list
            and len(item) == 7
            and type(item[0]) is int
            and item[0] == FORMAT_VERSION
            and type(item[1]) is int
            and 0 <= item[1] <= 2
            and type(item[2]) is bytes
            and len(item[2]) == _UUID_LEN
            and item[3] is None
            and type(item[4]) is int
            and item[4] >= 0
            and type(item[5]) is str
            and type(item[6]) is bytes
        ):
            out.append(_new(NodeMessage, (_KINDS[item[1]], item[2], None, item[4], item[5], item[6])))
        else:
            try:
                out.append(_check(item, -1))
            except DecodeError:
                return None  # the exact path reports it with its offset
    return out


def decode_batch(data: bytes) -> tuple[list[NodeMessage], DecodeError | None]:
    """Decode a PUBLISH payload: the messages before the first malformed one, and that error.

    A leading sequence header (:mod:`.sequence`) is skipped: :func:`decode_sequenced` returns it.
    Never raises for malformed input; an empty payload is an error (no message).
    """
    _header, messages, error = decode_sequenced(data)
    return messages, error


def decode_sequenced(data: bytes) -> tuple[tuple[int, int] | None, list[NodeMessage], DecodeError | None]:
    """:func:`decode_batch` that also returns the payload's sequence header ``(stream, first)``, or
    None when it has none (a malformed header is the error, with no message)."""
    try:
        header, start = split_sequence(data)
    except DecodeError as exc:
        return None, [], exc
    if start:
        data = data[start:]
    messages, error = _decode_messages(data)
    return header, messages, error


def _decode_messages(data: bytes) -> tuple[list[NodeMessage], DecodeError | None]:
    end = len(data)
    if end == 0:
        return [], DecodeError("empty payload: no node message")
    fast = _decode_fast(data)
    if fast is not None:
        return fast, None
    fp = io.BytesIO(data)
    decoder = cbor2.CBORDecoder(fp, read_size=1)
    out: list[NodeMessage] = []
    offset = 0
    try:
        while offset < end:
            out.append(_check(decoder.decode(), offset))
            offset = fp.tell()
    except DecodeError as exc:
        return out, exc
    except (cbor2.CBORDecodeError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        return out, DecodeError(f"malformed CBOR at byte {offset}: {exc}")
    return out, None
