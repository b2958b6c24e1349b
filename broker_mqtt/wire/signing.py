"""Signed PUBLISH payloads: one Ed25519 signature per batch, a per-sender counter against replay.

Theory of operation (docs/signing.md). An endpoint that signs holds an Ed25519 private key and an
*identity*: its MQTT client id ``S``, the level every topic it publishes to names (docs/wire-format.md).
:meth:`Signer.seal` wraps a whole PUBLISH payload (a batch of node messages, or any bytes) in an
envelope; :meth:`Verifier.open` checks it and returns the payload it carried, or raises
:class:`SignatureError` naming a :class:`Rejection`. Envelope, all integers big-endian::

    0xFC  0x01  len(S) (1 byte)  S (UTF-8)  counter (8 bytes)  signature (64 bytes)  payload

``0xFC`` is a reserved CBOR initial byte (major type 7, additional information 28: not well-formed,
RFC 8949 §3), so no CBOR item, hence no node-message batch (a CBOR sequence of 7-item arrays, whose
first byte is ``0x87``), can begin with it: :func:`is_signed` tells the two apart by the first byte.
``0x01`` is the envelope version. The signature covers, without ambiguity (every variable field is
length-prefixed)::

    b"broker-mqtt signed publish v1\\0"  len(topic) (4 bytes)  MQTT topic (UTF-8)
    len(S) (1 byte)  S  counter (8 bytes)  payload

so a batch cannot be moved to another MQTT topic, attributed to another signer or given another
counter without breaking it. The counter is one per signer, shared by all its topics, and strictly
increases: each seal takes ``max(last + 1, clock())`` where ``clock`` is passed in (the I/O layer gives
wall-clock microseconds), so a restarted signer continues above the counters it used before (unless
its clock went back). The verifier keeps, per (signer, MQTT topic), the last counter it accepted and
rejects a batch whose counter is not above it (a replay, or batches re-ordered on one topic);
re-ordering *across* topics is accepted, as MQTT orders messages per topic only.

Checks run cheapest first and the first that fails names the rejection: malformed or unsigned, the
signer not the topic's sender level, an unknown signer, a replayed counter, then the signature. The
counters are updated only after the signature verified, so a forgery never moves them.

The per-(signer, topic) table is bounded (``max_topics``, least recently used out); when an entry is
evicted its counter raises that signer's *floor*, below or at which every batch on a topic the verifier
no longer remembers is rejected: forgetting fails closed (replays stay out) at the price of dropping a
very late batch. A fresh verifier accepts any counter above ``floor``: an I/O layer that wants old
captured batches kept out of a freshly started receiver passes its start time (less the clock skew it
tolerates) in microseconds.

:class:`TrustStore` maps identities to public keys: from a trust file (:meth:`TrustStore.from_toml`)
and from :class:`KeyRecord` s signed by the fleet key (:meth:`TrustStore.add_record`).
No I/O here: files are read by :mod:`broker_mqtt.transport.keyfiles` and the CLI.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import tomllib
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import cbor2
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..errors import DecodeError, UsageError

__all__ = [
    "MAGIC", "ENVELOPE_VERSION", "SIGNATURE_LEN", "Rejection", "SignatureError", "TrustFileError",
    "Signer", "Verifier", "VerifierStatistics", "TrustStore", "KeyRecord", "is_signed", "overhead",
    "generate_private_key", "private_key_to_pem", "private_key_from_pem", "public_key_to_b64",
    "public_key_from_b64", "check_identity",
]

MAGIC = 0xFC  #: first byte of a signed payload: a reserved CBOR initial byte (RFC 8949 §3)
ENVELOPE_VERSION = 1
SIGNATURE_LEN = 64
COUNTER_LEN = 8
MAX_COUNTER = 2**64 - 1
MAX_IDENTITY_LEN = 255  #: bytes of UTF-8: the envelope gives the signer one length byte
DEFAULT_MAX_TOPICS = 100_000
_DOMAIN = b"broker-mqtt signed publish v1\x00"
_RECORD_DOMAIN = b"broker-mqtt key record v1\x00"
_RECORD_VERSION = 1


class Rejection(enum.Enum):
    """Why :meth:`Verifier.open` or :meth:`TrustStore.add_record` refused its input."""

    UNSIGNED = "unsigned"  #: not a signed envelope (an unsigned batch, or anything else)
    MALFORMED = "malformed"  #: starts like an envelope but is truncated or badly formed
    SENDER_MISMATCH = "sender-mismatch"  #: the signer is not the sender level of the MQTT topic
    UNKNOWN_SIGNER = "unknown-signer"  #: no public key for the signer (or no fleet key for a record)
    BAD_SIGNATURE = "bad-signature"  #: the signature does not verify
    REPLAY = "replay"  #: counter not above the last accepted for (signer, topic): replayed or re-ordered
    EXPIRED = "expired"  #: a key record past its not_after
    PINNED = "pinned"  #: a key record for an identity the trust file fixes


class SignatureError(DecodeError):
    """Input from the wire that is not a payload (or key record) we can trust; ``reason`` says why.

    A :class:`~broker_mqtt.errors.DecodeError`: the peer's (or an attacker's) fault, never fatal to a
    receive loop; the verifier's state is unchanged by a rejected input.
    """

    def __init__(self, reason: Rejection, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason


class TrustFileError(UsageError):
    """The trust file (or a key given to us) is not what docs/signing.md describes; the message says where."""


def check_identity(identity: str) -> bytes:
    """The UTF-8 of a signer identity, or :class:`UsageError`: 1..255 bytes, a valid MQTT topic level."""
    if not isinstance(identity, str) or not identity:
        raise UsageError("a signer identity is a non-empty string (the endpoint's MQTT client id)")
    if any(c in identity for c in "/+#\x00"):
        raise UsageError(f"signer identity {identity!r} is not a single MQTT topic level (no /, +, #, NUL)")
    raw = identity.encode()
    if len(raw) > MAX_IDENTITY_LEN:
        raise UsageError(f"signer identity of {len(raw)} bytes exceeds {MAX_IDENTITY_LEN} bytes of UTF-8")
    return raw


def is_signed(data: bytes) -> bool:
    """Whether ``data`` claims to be a signed envelope (its first byte); it may still be malformed."""
    return len(data) > 0 and data[0] == MAGIC


def overhead(identity: str) -> int:
    """Bytes a seal adds to a payload for this identity: subtract it from the packet-size budget."""
    return 3 + len(check_identity(identity)) + COUNTER_LEN + SIGNATURE_LEN


def _signed_bytes(topic: bytes, signer: bytes, counter: bytes, payload: bytes | memoryview) -> bytes:
    # The payload enters by its SHA-256: Ed25519 hashes what it signs twice (and its verifier once) with
    # SHA-512; one SHA-256 pass instead keeps a 256 KB batch's seal and check at a third of the cost.
    return b"".join((_DOMAIN, len(topic).to_bytes(4, "big"), topic, bytes((len(signer),)), signer, counter,
                     hashlib.sha256(payload).digest()))


class Signer:
    """Seals the PUBLISH payloads of one identity. Not thread-safe; cheap to call per PUBLISH.

    ``clock`` returns an integer, the I/O layer's wall clock in microseconds (``time.time_ns() // 1000``);
    each seal uses ``max(previous counter + 1, clock())``, so counters strictly increase whatever the
    clock does and a restarted signer continues above its old counters as long as its clock moved on.
    """

    __slots__ = ("_key", "identity", "_raw_identity", "_clock", "_last", "_topics")

    def __init__(self, private_key: Ed25519PrivateKey, identity: str, *, clock: Callable[[], int]) -> None:
        if not isinstance(private_key, Ed25519PrivateKey):
            raise UsageError("Signer needs an Ed25519 private key (see generate_private_key)")
        self._key = private_key
        self.identity = identity
        self._raw_identity = check_identity(identity)
        self._clock = clock
        self._last = -1
        self._topics: dict[str, bytes] = {}

    @property
    def public_key(self) -> Ed25519PublicKey:
        return self._key.public_key()

    @property
    def counter(self) -> int:
        """The counter of the last seal (-1 before the first)."""
        return self._last

    @property
    def overhead(self) -> int:
        """Bytes :meth:`seal` adds to every payload."""
        return 3 + len(self._raw_identity) + COUNTER_LEN + SIGNATURE_LEN

    def seal(self, mqtt_topic: str, payload: bytes) -> bytes:
        """The envelope carrying ``payload`` on ``mqtt_topic`` (the exact topic it is published to).

        Raises :class:`UsageError` if the counter would pass 2**64 - 1 (a clock gone wild).
        """
        counter = max(self._last + 1, self._clock())
        if counter > MAX_COUNTER:
            raise UsageError(f"signing counter {counter} exceeds 64 bits: is the clock in microseconds?")
        self._last = counter
        topic = self._topics.get(mqtt_topic)
        if topic is None:
            topic = mqtt_topic.encode()
            if len(self._topics) < 10_000:
                self._topics[mqtt_topic] = topic
        raw_counter = counter.to_bytes(COUNTER_LEN, "big")
        signature = self._key.sign(_signed_bytes(topic, self._raw_identity, raw_counter, payload))
        return b"".join((bytes((MAGIC, ENVELOPE_VERSION, len(self._raw_identity))), self._raw_identity,
                         raw_counter, signature, payload))


@dataclass(frozen=True, slots=True)
class VerifierStatistics:
    """A snapshot of a :class:`Verifier`'s counters: batches accepted, and dropped per reason."""

    accepted: int
    dropped: Mapping[Rejection, int]
    tracked: int  #: (signer, topic) pairs whose last counter is remembered

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())


class Verifier:
    """Opens signed envelopes against a :class:`TrustStore`, rejecting replays. Sans-io, not thread-safe.

    ``max_topics`` bounds the (signer, topic) table (see the module docstring for what eviction does);
    ``floor``: counters at or below it are rejected for every signer.
    """

    __slots__ = ("trust", "_last", "_floors", "_floor", "_max_topics", "_accepted", "_dropped")

    def __init__(self, trust: TrustStore, *, max_topics: int = DEFAULT_MAX_TOPICS, floor: int = -1) -> None:
        if max_topics < 1:
            raise UsageError("max_topics must be at least 1")
        self.trust = trust
        self._last: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._floors: dict[str, int] = {}
        self._floor = floor
        self._max_topics = max_topics
        self._accepted = 0
        self._dropped: Counter[Rejection] = Counter()

    def statistics(self) -> VerifierStatistics:
        return VerifierStatistics(self._accepted, {r: self._dropped[r] for r in Rejection}, len(self._last))

    def _reject(self, reason: Rejection, detail: str) -> SignatureError:
        self._dropped[reason] += 1
        return SignatureError(reason, detail)

    def open(self, mqtt_topic: str, data: bytes, *, sender: str, retained: bool = False) -> bytes:
        """The payload ``data`` carries, checked; else :class:`SignatureError` (and a drop counted).

        ``mqtt_topic`` is the topic the PUBLISH arrived on, ``sender`` that topic's sender level ``S``.
        ``retained``: the broker delivered a stored retained message, which a resubscription delivers
        again: a counter *equal* to the last accepted is then accepted too (a signer never reuses a
        counter, so equal means the very same batch). Accepting updates the (signer, topic) counter.
        """
        n = len(data)
        if n == 0 or data[0] != MAGIC:
            raise self._reject(Rejection.UNSIGNED, "the payload is not signed")
        if n < 3 or data[1] != ENVELOPE_VERSION:
            raise self._reject(Rejection.MALFORMED, "truncated envelope" if n < 3 else
                               f"unknown envelope version {data[1]}")
        id_end = 3 + data[2]
        sig_end = id_end + COUNTER_LEN + SIGNATURE_LEN
        if data[2] == 0 or n < sig_end:
            raise self._reject(Rejection.MALFORMED, f"truncated envelope ({n} bytes)")
        raw_signer = data[3:id_end]
        try:
            signer = raw_signer.decode()
        except UnicodeDecodeError:
            raise self._reject(Rejection.MALFORMED, "the signer is not UTF-8") from None
        if signer != sender:
            raise self._reject(Rejection.SENDER_MISMATCH,
                               f"signed by {signer!r} but published under sender {sender!r}")
        key = self.trust.get(signer)
        if key is None:
            raise self._reject(Rejection.UNKNOWN_SIGNER, f"no public key for {signer!r}")
        raw_counter = data[id_end:id_end + COUNTER_LEN]
        counter = int.from_bytes(raw_counter, "big")
        slot = (signer, mqtt_topic)
        last = self._last.get(slot)
        if last is None:
            last = max(self._floor, self._floors.get(signer, -1))
        if counter < last or (counter == last and not retained):
            raise self._reject(Rejection.REPLAY, f"counter {counter} of {signer!r} on {mqtt_topic!r} is not "
                               f"above the last accepted, {last}")
        try:
            key.verify(data[id_end + COUNTER_LEN:sig_end],
                       _signed_bytes(mqtt_topic.encode(), raw_signer, raw_counter, memoryview(data)[sig_end:]))
        except InvalidSignature:
            raise self._reject(Rejection.BAD_SIGNATURE, f"the signature of {signer!r} does not verify") from None
        self._last[slot] = counter
        self._last.move_to_end(slot)
        if len(self._last) > self._max_topics:
            (old_signer, _), old = self._last.popitem(last=False)
            if old > self._floors.get(old_signer, -1):
                self._floors[old_signer] = old
        self._accepted += 1
        return data[sig_end:]

    def forget(self, signer: str) -> None:
        """Drop the counters of ``signer`` except a floor at its highest: e.g. after its key was removed."""
        slots = [slot for slot in self._last if slot[0] == signer]
        if slots:
            self._floors[signer] = max(self._floors.get(signer, -1), *(self._last.pop(s) for s in slots))


# -- keys -------------------------------------------------------------------------------------------------

def generate_private_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def private_key_to_pem(key: Ed25519PrivateKey) -> bytes:
    """The key file format: PEM, PKCS#8, unencrypted (as ``openssl genpkey -algorithm ed25519`` writes)."""
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def private_key_from_pem(data: bytes) -> Ed25519PrivateKey:
    """Parse a key file; :class:`TrustFileError` if it is not an unencrypted PEM PKCS#8 Ed25519 key."""
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise TrustFileError(f"not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise TrustFileError(f"the private key is {type(key).__name__}, not Ed25519")
    return key


def public_key_to_b64(key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """The 32 raw bytes of a public key in standard base64: how trust files and the CLI write keys."""
    if isinstance(key, Ed25519PrivateKey):
        key = key.public_key()
    return base64.b64encode(key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)).decode()


def public_key_from_b64(text: str) -> Ed25519PublicKey:
    """Parse :func:`public_key_to_b64`'s form; :class:`TrustFileError` if it is not 32 bytes of base64."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError, AttributeError):
        raise TrustFileError(f"{text!r} is not base64") from None
    if len(raw) != 32:
        raise TrustFileError(f"an Ed25519 public key is 32 bytes, {text!r} decodes to {len(raw)}")
    return Ed25519PublicKey.from_public_bytes(raw)


# -- key records ------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class KeyRecord:
    """The fleet key's statement "``identity`` signs with ``public_key``", valid from ``issued`` until
    ``not_after`` (Unix seconds; None: no end). Encoded, it is published retained on ``<ns>/k/<identity>``.

    Wire form: a CBOR array ``[1, identity, public key (32 bytes), issued, not_after, signature]``, the
    Ed25519 signature of the fleet key over ``b"broker-mqtt key record v1\\0"`` followed by the CBOR of
    the same array without its signature.
    """

    identity: str
    public_key: bytes  #: 32 raw bytes
    issued: int
    not_after: int | None = None

    def __post_init__(self) -> None:
        check_identity(self.identity)
        if not isinstance(self.public_key, bytes) or len(self.public_key) != 32:
            raise UsageError("a key record's public_key is the 32 raw bytes of an Ed25519 key")

    def _body(self) -> list[object]:
        return [_RECORD_VERSION, self.identity, self.public_key, self.issued, self.not_after]

    def sign(self, fleet_key: Ed25519PrivateKey) -> bytes:
        """The record's wire form, signed by ``fleet_key``."""
        signature = fleet_key.sign(_RECORD_DOMAIN + cbor2.dumps(self._body()))
        return cbor2.dumps([*self._body(), signature])

    @classmethod
    def verify(cls, data: bytes, fleet_key: Ed25519PublicKey) -> KeyRecord:
        """The record ``data`` holds if ``fleet_key`` signed it; else :class:`SignatureError`."""
        try:
            item = cbor2.loads(data)
        except (cbor2.CBORError, ValueError, TypeError, OverflowError, RecursionError, MemoryError) as exc:
            raise SignatureError(Rejection.MALFORMED, f"key record is not CBOR: {exc}") from None
        if not (type(item) is list and len(item) == 6 and item[0] == _RECORD_VERSION and type(item[1]) is str
                and type(item[2]) is bytes and len(item[2]) == 32 and type(item[3]) is int
                and (item[4] is None or type(item[4]) is int) and type(item[5]) is bytes):
            raise SignatureError(Rejection.MALFORMED, "key record is not [1, identity, key, issued, "
                                 "not_after, signature]")
        try:
            record = cls(item[1], item[2], item[3], item[4])
        except UsageError as exc:
            raise SignatureError(Rejection.MALFORMED, f"key record: {exc}") from None
        try:
            fleet_key.verify(item[5], _RECORD_DOMAIN + cbor2.dumps(record._body()))
        except InvalidSignature:
            raise SignatureError(Rejection.BAD_SIGNATURE,
                                 f"key record for {record.identity!r} is not signed by the fleet key") from None
        return record


# -- trust ------------------------------------------------------------------------------------------------

class TrustStore:
    """Identity -> Ed25519 public key. Keys given directly (``keys``, :meth:`add`, a trust file) are
    *pinned*: a key record cannot replace them. Key records need ``fleet_key``; a record replaces one
    issued before it and is rejected (:data:`Rejection.REPLAY`) if issued earlier than the one held, so
    an old record re-published cannot bring a replaced key back. Sans-io, not thread-safe."""

    __slots__ = ("fleet_key", "_keys", "_pinned", "_records")

    def __init__(self, keys: Mapping[str, Ed25519PublicKey] | None = None, *,
                 fleet_key: Ed25519PublicKey | None = None) -> None:
        self.fleet_key = fleet_key
        self._keys: dict[str, Ed25519PublicKey] = {}
        self._pinned: set[str] = set()
        self._records: dict[str, KeyRecord] = {}
        for identity, key in (keys or {}).items():
            self.add(identity, key)

    def add(self, identity: str, public_key: Ed25519PublicKey) -> None:
        """Trust ``public_key`` for ``identity`` (pinned: records cannot replace it)."""
        check_identity(identity)
        self._keys[identity] = public_key
        self._pinned.add(identity)
        self._records.pop(identity, None)

    def remove(self, identity: str) -> None:
        """Stop trusting ``identity`` (whether pinned or from a record); a no-op if unknown."""
        self._keys.pop(identity, None)
        self._pinned.discard(identity)
        self._records.pop(identity, None)

    def get(self, identity: str) -> Ed25519PublicKey | None:
        return self._keys.get(identity)

    def __contains__(self, identity: object) -> bool:
        return identity in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._keys))

    def add_record(self, data: bytes, *, now: float) -> KeyRecord:
        """Verify a key record against the fleet key and trust its key; ``now`` is Unix seconds.

        Raises :class:`SignatureError`: UNKNOWN_SIGNER (no fleet key), MALFORMED, BAD_SIGNATURE,
        EXPIRED (``not_after`` passed), PINNED (the trust file fixes this identity), REPLAY (older than
        the record already held). Nothing changes on an error. Re-adding the record held is a no-op.
        """
        if self.fleet_key is None:
            raise SignatureError(Rejection.UNKNOWN_SIGNER, "no fleet key in the trust store: key records "
                                 "cannot be checked")
        record = KeyRecord.verify(data, self.fleet_key)
        if record.not_after is not None and record.not_after <= now:
            raise SignatureError(Rejection.EXPIRED, f"key record for {record.identity!r} expired at "
                                 f"{record.not_after}")
        if record.identity in self._pinned:
            raise SignatureError(Rejection.PINNED, f"{record.identity!r} has a key in the trust file")
        held = self._records.get(record.identity)
        if held is not None and record.issued < held.issued:
            raise SignatureError(Rejection.REPLAY, f"key record for {record.identity!r} issued at "
                                 f"{record.issued} is older than the one held ({held.issued})")
        self._records[record.identity] = record
        self._keys[record.identity] = Ed25519PublicKey.from_public_bytes(record.public_key)
        return record

    def expire(self, now: float) -> list[str]:
        """Remove the keys whose record's ``not_after`` is at or before ``now``; their identities."""
        gone = [i for i, r in self._records.items() if r.not_after is not None and r.not_after <= now]
        for identity in gone:
            self.remove(identity)
        return gone

    @classmethod
    def from_toml(cls, text: str, *, source: str = "trust file") -> TrustStore:
        """Parse a trust file (docs/signing.md): a ``[keys]`` table of ``identity = "<base64 key>"`` and
        an optional top-level ``fleet_key = "<base64 key>"``. :class:`TrustFileError` says what is wrong."""
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise TrustFileError(f"{source}: not valid TOML: {exc}") from None
        unknown = sorted(set(doc) - {"keys", "fleet_key"})
        if unknown:
            raise TrustFileError(f"{source}: unknown entries {unknown} (expected [keys] and fleet_key)")
        store = cls()
        fleet = doc.get("fleet_key")
        if fleet is not None:
            if not isinstance(fleet, str):
                raise TrustFileError(f"{source}: fleet_key must be a base64 string")
            store.fleet_key = _key_or_fail(fleet, f"{source}: fleet_key")
        keys = doc.get("keys", {})
        if not isinstance(keys, dict):
            raise TrustFileError(f"{source}: keys must be a table: [keys] then identity = \"<base64 key>\"")
        for identity, value in keys.items():
            if not isinstance(value, str):
                raise TrustFileError(f"{source}: keys.{identity} must be a base64 string")
            try:
                check_identity(identity)
            except UsageError as exc:
                raise TrustFileError(f"{source}: keys: {exc}") from None
            store.add(identity, _key_or_fail(value, f"{source}: keys.{identity}"))
        if len(store) == 0 and store.fleet_key is None:
            raise TrustFileError(f"{source}: no keys and no fleet_key: it would trust nobody")
        return store

    def to_toml(self) -> str:
        """The trust file of the pinned keys and the fleet key (records are not written)."""
        lines = ["# broker-mqtt trust file (docs/signing.md)"]
        if self.fleet_key is not None:
            lines.append(f'fleet_key = "{public_key_to_b64(self.fleet_key)}"')
        lines.append("")
        lines.append("[keys]")
        for identity in sorted(self._pinned):
            lines.append(f'{_toml_key(identity)} = "{public_key_to_b64(self._keys[identity])}"')
        return "\n".join(lines) + "\n"


def _key_or_fail(text: str, where: str) -> Ed25519PublicKey:
    try:
        return public_key_from_b64(text)
    except TrustFileError as exc:
        raise TrustFileError(f"{where}: {exc}") from None


def _toml_key(identity: str) -> str:
    if all(c.isascii() and (c.isalnum() or c in "-_") for c in identity):
        return identity
    return '"' + "".join(c if " " <= c < "\x7f" and c not in '"\\' else f"\\U{ord(c):08X}"
                         for c in identity) + '"'
