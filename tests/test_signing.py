"""Signed PUBLISH payloads (broker_mqtt.wire.signing): the envelope, every rejection, key records,
trust and key files, the ``broker-mqtt keys`` commands. No broker: the module is sans-io."""

from __future__ import annotations

import itertools
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_mqtt.cli.main import main as cli
from broker_mqtt.errors import DecodeError, UsageError
from broker_mqtt.transport.keyfiles import load_private_key, load_trust_file, save_private_key
from broker_mqtt.wire.message import NodeEncoder, decode_batch
from broker_mqtt.wire.signing import (
    MAGIC,
    KeyRecord,
    Rejection,
    SignatureError,
    Signer,
    TrustFileError,
    TrustStore,
    Verifier,
    generate_private_key,
    is_signed,
    overhead,
    public_key_from_b64,
    public_key_to_b64,
)

TOPIC = "bm/d/gw7/sensors/temp"
KEY = generate_private_key()
OTHER = generate_private_key()
FLEET = generate_private_key()


def clock(start: int = 1_000) -> Callable[[], int]:
    return itertools.count(start).__next__


def batch() -> bytes:
    enc = NodeEncoder(bytes(16))
    return b"".join(enc.encode_many(0, "/sensors/temp", [b"\x01", b"\x02", b"\x03"]))


def make(identity: str = "gw7") -> tuple[Signer, Verifier]:
    trust = TrustStore({identity: KEY.public_key(), "other": OTHER.public_key()})
    return Signer(KEY, identity, clock=clock()), Verifier(trust)


def rejected(verifier: Verifier, data: bytes, reason: Rejection, *, topic: str = TOPIC, sender: str = "gw7",
             retained: bool = False) -> SignatureError:
    before = verifier.statistics()
    with pytest.raises(SignatureError) as info:
        verifier.open(topic, data, sender=sender, retained=retained)
    assert info.value.reason is reason, info.value
    after = verifier.statistics()
    assert after.dropped[reason] == before.dropped[reason] + 1 and after.accepted == before.accepted
    return info.value


def test_round_trip_and_envelope_layout() -> None:
    signer, verifier = make()
    payload = batch()
    sealed = signer.seal(TOPIC, payload)
    assert sealed[0] == MAGIC and is_signed(sealed) and not is_signed(payload) and not is_signed(b"")
    assert len(sealed) == len(payload) + signer.overhead == len(payload) + overhead("gw7")
    assert sealed[1:3] == b"\x01\x03" and sealed[3:6] == b"gw7" and sealed[6:14] == (1000).to_bytes(8, "big")
    assert verifier.open(TOPIC, sealed, sender="gw7") == payload
    assert decode_batch(verifier.open(TOPIC, signer.seal(TOPIC, payload), sender="gw7"))[1] is None
    stats = verifier.statistics()
    assert stats.accepted == 2 and stats.dropped_total == 0 and stats.tracked == 1


def test_a_signed_payload_never_decodes_as_a_batch() -> None:
    """The first byte, 0xFC, is a reserved CBOR initial byte: no node-message batch starts with it."""
    signer, _ = make()
    messages, error = decode_batch(signer.seal(TOPIC, batch()))
    assert messages == [] and isinstance(error, DecodeError)


def test_empty_and_arbitrary_payloads() -> None:
    signer, verifier = make()
    for payload in (b"", b"\xfc", bytes(range(256)) * 300):
        assert verifier.open(TOPIC, signer.seal(TOPIC, payload), sender="gw7") == payload


def test_counters_strictly_increase_whatever_the_clock_does() -> None:
    ticks = iter([500, 500, 10, 2_000])
    signer = Signer(KEY, "gw7", clock=lambda: next(ticks))
    counters = []
    for _ in range(4):
        signer.seal(TOPIC, b"x")
        counters.append(signer.counter)
    assert counters == [500, 501, 502, 2_000]
    with pytest.raises(UsageError, match="64 bits"):
        Signer(KEY, "gw7", clock=lambda: 2**64).seal(TOPIC, b"x")


def test_a_restarted_signer_is_not_taken_for_a_replay() -> None:
    _, verifier = make()
    first = Signer(KEY, "gw7", clock=clock(1_000))
    for _ in range(5):
        verifier.open(TOPIC, first.seal(TOPIC, b"x"), sender="gw7")
    again = Signer(KEY, "gw7", clock=clock(2_000))  # later wall clock, fresh state
    assert verifier.open(TOPIC, again.seal(TOPIC, b"y"), sender="gw7") == b"y"


@pytest.mark.parametrize("where", ["version", "length", "signer", "counter", "signature", "payload"])
def test_tampering_with_any_field_is_rejected(where: str) -> None:
    signer, verifier = make()
    sealed = bytearray(signer.seal(TOPIC, batch()))
    offset = {"version": 1, "length": 2, "signer": 4, "counter": 13, "signature": 20, "payload": len(sealed) - 1}
    sealed[offset[where]] ^= 0x01
    reason = {"version": Rejection.MALFORMED, "signer": Rejection.SENDER_MISMATCH,
              "length": Rejection.SENDER_MISMATCH}.get(where, Rejection.BAD_SIGNATURE)
    rejected(verifier, bytes(sealed), reason)
    assert verifier.statistics().tracked == 0  # a forgery moves no counter


def test_a_batch_moved_to_another_topic_is_rejected() -> None:
    signer, verifier = make()
    rejected(verifier, signer.seal(TOPIC, b"x"), Rejection.BAD_SIGNATURE, topic="bm/d/gw7/other")


def test_the_signer_must_be_the_topics_sender_level() -> None:
    """A trusted member re-sealing under its own name cannot publish as another member."""
    other = Signer(OTHER, "other", clock=clock())
    _, verifier = make()
    error = rejected(verifier, other.seal(TOPIC, b"x"), Rejection.SENDER_MISMATCH, sender="gw7")
    assert "'other'" in str(error) and "'gw7'" in str(error)
    # claiming gw7's name in the envelope needs gw7's key
    forged = Signer(OTHER, "gw7", clock=clock()).seal(TOPIC, b"x")
    rejected(verifier, forged, Rejection.BAD_SIGNATURE)


def test_unknown_signer() -> None:
    _, verifier = make()
    stranger = Signer(generate_private_key(), "stranger", clock=clock())
    rejected(verifier, stranger.seal("bm/d/stranger/x", b"x"), Rejection.UNKNOWN_SIGNER, sender="stranger")


def test_replayed_and_reordered_batches_are_rejected() -> None:
    signer, verifier = make()
    one, two, three = (signer.seal(TOPIC, bytes([i])) for i in range(3))
    assert verifier.open(TOPIC, one, sender="gw7") == b"\x00"
    rejected(verifier, one, Rejection.REPLAY)  # replay
    assert verifier.open(TOPIC, three, sender="gw7") == b"\x02"
    rejected(verifier, two, Rejection.REPLAY)  # re-ordered: older than the last accepted
    rejected(verifier, three, Rejection.REPLAY)


def test_order_is_per_topic() -> None:
    """MQTT orders per topic only: a batch of another topic sealed earlier is still accepted."""
    signer, verifier = make()
    early = signer.seal("bm/d/gw7/a", b"a")
    late = signer.seal("bm/d/gw7/b", b"b")
    assert verifier.open("bm/d/gw7/b", late, sender="gw7") == b"b"
    assert verifier.open("bm/d/gw7/a", early, sender="gw7") == b"a"


def test_a_retained_message_delivered_again_is_accepted_but_not_an_older_one() -> None:
    signer, verifier = make()
    old, new = signer.seal(TOPIC, b"old"), signer.seal(TOPIC, b"new")
    assert verifier.open(TOPIC, new, sender="gw7", retained=True) == b"new"
    assert verifier.open(TOPIC, new, sender="gw7", retained=True) == b"new"  # resubscribed
    rejected(verifier, new, Rejection.REPLAY)  # not retained: a replay
    rejected(verifier, old, Rejection.REPLAY, retained=True)


def test_forgotten_topics_fail_closed() -> None:
    """Evicting a (signer, topic) counter raises the signer's floor: its old batches stay out."""
    signer = Signer(KEY, "gw7", clock=clock())
    verifier = Verifier(TrustStore({"gw7": KEY.public_key()}), max_topics=2)
    a1 = signer.seal("bm/d/gw7/a", b"a1")
    assert verifier.open("bm/d/gw7/a", a1, sender="gw7") == b"a1"
    for t in "bc":
        verifier.open(f"bm/d/gw7/{t}", signer.seal(f"bm/d/gw7/{t}", t.encode()), sender="gw7")
    assert verifier.statistics().tracked == 2
    rejected(verifier, a1, Rejection.REPLAY, topic="bm/d/gw7/a")
    assert verifier.open("bm/d/gw7/a", signer.seal("bm/d/gw7/a", b"a2"), sender="gw7") == b"a2"


def test_floor_and_forget() -> None:
    signer = Signer(KEY, "gw7", clock=clock(100))
    early = signer.seal(TOPIC, b"x")
    verifier = Verifier(TrustStore({"gw7": KEY.public_key()}), floor=100)
    rejected(verifier, early, Rejection.REPLAY)
    later = signer.seal(TOPIC, b"y")
    assert verifier.open(TOPIC, later, sender="gw7") == b"y"
    verifier.forget("gw7")
    assert verifier.statistics().tracked == 0
    rejected(verifier, later, Rejection.REPLAY, topic="bm/d/gw7/else")


@pytest.mark.parametrize("cut", [1, 2, 3, 5, 6, 13, 14, 77])
def test_truncated_envelopes_are_malformed(cut: int) -> None:
    signer, verifier = make()
    sealed = signer.seal(TOPIC, b"")  # 3 + 3 + 8 + 64 = 78 bytes
    assert len(sealed) == 78
    rejected(verifier, sealed[:cut], Rejection.MALFORMED)


def test_unsigned_and_odd_envelopes() -> None:
    _, verifier = make()
    rejected(verifier, batch(), Rejection.UNSIGNED)
    rejected(verifier, b"", Rejection.UNSIGNED)
    rejected(verifier, b"\xfc\x01\x00" + bytes(80), Rejection.MALFORMED)  # empty signer
    rejected(verifier, b"\xfc\x01\x02\xff\xfe" + bytes(80), Rejection.MALFORMED)  # not UTF-8
    rejected(verifier, b"\xfc\x02\x03gw7" + bytes(80), Rejection.MALFORMED)  # envelope version 2


def test_signature_error_is_a_decode_error() -> None:
    assert issubclass(SignatureError, DecodeError) and issubclass(TrustFileError, UsageError)


@pytest.mark.parametrize("identity", ["", "a/b", "a+", "#", "x\x00", "é" * 128])
def test_bad_identities(identity: str) -> None:
    with pytest.raises(UsageError):
        Signer(KEY, identity, clock=clock())


@settings(max_examples=2000, deadline=None)
@given(st.one_of(st.binary(max_size=300),
                 st.binary(max_size=200).map(lambda b: b"\xfc\x01" + b),
                 st.binary(max_size=200).map(lambda b: b"\xfc\x01\x03gw7" + b)),
       st.booleans())
def test_fuzz_open_raises_only_signature_error(data: bytes, retained: bool) -> None:
    _, verifier = make()
    with pytest.raises(SignatureError):
        verifier.open(TOPIC, data, sender="gw7", retained=retained)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_key_records_raise_only_signature_error(data: bytes) -> None:
    store = TrustStore(fleet_key=FLEET.public_key())
    with pytest.raises(SignatureError):
        store.add_record(data, now=0)


# -- key records -----------------------------------------------------------------------------------

def record(identity: str = "gw7", key: Ed25519PrivateKey = KEY, issued: int = 100, not_after: int | None = None,
           fleet: Ed25519PrivateKey = FLEET) -> bytes:
    return KeyRecord(identity, key.public_key().public_bytes_raw(), issued, not_after).sign(fleet)


def test_key_record_round_trip_makes_the_key_trusted() -> None:
    store = TrustStore(fleet_key=FLEET.public_key())
    got = store.add_record(record(not_after=1_000), now=500)
    assert got == KeyRecord("gw7", KEY.public_key().public_bytes_raw(), 100, 1_000)
    signer, verifier = Signer(KEY, "gw7", clock=clock()), Verifier(store)
    assert verifier.open(TOPIC, signer.seal(TOPIC, b"x"), sender="gw7") == b"x"
    assert store.expire(999) == [] and store.expire(1_000) == ["gw7"] and "gw7" not in store


def test_key_record_signed_by_another_key_is_rejected() -> None:
    store = TrustStore(fleet_key=FLEET.public_key())
    with pytest.raises(SignatureError) as info:
        store.add_record(record(fleet=OTHER), now=0)
    assert info.value.reason is Rejection.BAD_SIGNATURE and "gw7" not in store


def test_key_record_tampered_is_rejected() -> None:
    good = record()
    bad = good.replace(b"gw7", b"gw8")
    store = TrustStore(fleet_key=FLEET.public_key())
    with pytest.raises(SignatureError) as info:
        store.add_record(bad, now=0)
    assert info.value.reason is Rejection.BAD_SIGNATURE


def test_key_record_rules() -> None:
    with pytest.raises(SignatureError) as info:
        TrustStore().add_record(record(), now=0)
    assert info.value.reason is Rejection.UNKNOWN_SIGNER  # no fleet key
    store = TrustStore({"pinned": OTHER.public_key()}, fleet_key=FLEET.public_key())
    for data, reason in ((record(not_after=50), Rejection.EXPIRED), (record("pinned"), Rejection.PINNED)):
        with pytest.raises(SignatureError) as info:
            store.add_record(data, now=60)
        assert info.value.reason is reason
    assert store.get("pinned") is not None and store.get("pinned").public_bytes_raw() == \
        OTHER.public_key().public_bytes_raw()  # type: ignore[union-attr]
    store.add_record(record(issued=200), now=0)
    with pytest.raises(SignatureError) as info:
        store.add_record(record(key=OTHER, issued=150), now=0)  # an older record: cannot roll the key back
    assert info.value.reason is Rejection.REPLAY
    store.add_record(record(key=OTHER, issued=300), now=0)  # a newer one rotates the key
    assert store.get("gw7").public_bytes_raw() == OTHER.public_key().public_bytes_raw()  # type: ignore[union-attr]


# -- trust files and key files ---------------------------------------------------------------------

def test_trust_file_round_trip() -> None:
    store = TrustStore({"gw7": KEY.public_key(), "a.b=c d": OTHER.public_key()}, fleet_key=FLEET.public_key())
    again = TrustStore.from_toml(store.to_toml())
    assert list(again) == ["a.b=c d", "gw7"]
    assert public_key_to_b64(again.get("gw7")) == public_key_to_b64(KEY)  # type: ignore[arg-type]
    assert again.fleet_key is not None and public_key_to_b64(again.fleet_key) == public_key_to_b64(FLEET)


@pytest.mark.parametrize(("text", "message"), [
    ("keys = [", "not valid TOML"),
    ("[keys]\ngw7 = 'notbase64!'", "keys.gw7: 'notbase64!' is not base64"),
    ("[keys]\ngw7 = 'AAAA'", "keys.gw7: an Ed25519 public key is 32 bytes"),
    ("[keys]\ngw7 = 5", "keys.gw7 must be a base64 string"),
    ('[keys]\n"a/b" = "' + "A" * 43 + '="', "not a single MQTT topic level"),
    ("keys = 3", "keys must be a table"),
    ("fleet_key = 'AAAA'", "fleet_key: an Ed25519 public key is 32 bytes"),
    ("[key]\ngw7 = 'x'", "unknown entries ['key']"),
    ("", "it would trust nobody"),
])
def test_trust_file_errors_are_clear(text: str, message: str) -> None:
    with pytest.raises(TrustFileError, match="^my.toml: ") as info:
        TrustStore.from_toml(text, source="my.toml")
    assert message in str(info.value)


def test_key_files(tmp_path: Path) -> None:
    path = tmp_path / "node.key"
    save_private_key(path, KEY)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert public_key_to_b64(load_private_key(path)) == public_key_to_b64(KEY)
    with pytest.raises(TrustFileError, match="exists"):
        save_private_key(path, OTHER)
    save_private_key(path, OTHER, overwrite=True)
    assert public_key_to_b64(load_private_key(path)) == public_key_to_b64(OTHER)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and os.listdir(tmp_path) == ["node.key"]
    path.chmod(0o644)
    with pytest.raises(TrustFileError, match="chmod 600"):
        load_private_key(path)
    bad = tmp_path / "bad.key"
    bad.write_text("hello")
    bad.chmod(0o600)
    with pytest.raises(TrustFileError, match="bad.key: not an unencrypted PEM private key"):
        load_private_key(bad)
    with pytest.raises(TrustFileError, match="cannot read"):
        load_private_key(tmp_path / "missing.key")
    (tmp_path / "trust.toml").write_text(f'[keys]\ngw7 = "{public_key_to_b64(KEY)}"\n')
    assert list(load_trust_file(tmp_path / "trust.toml")) == ["gw7"]


# -- the command line ------------------------------------------------------------------------------

def test_cli_keys(tmp_path: Path) -> None:
    runner = CliRunner()
    node, fleet = tmp_path / "node.key", tmp_path / "fleet.key"
    out = runner.invoke(cli, ["keys", "generate", "--out", str(node)])
    assert out.exit_code == 0, out.output
    node_pub = out.output.strip()
    assert public_key_to_b64(load_private_key(node)) == node_pub
    assert runner.invoke(cli, ["keys", "generate", "--out", str(node)]).exit_code == 2  # exists
    assert runner.invoke(cli, ["keys", "generate", "--out", str(fleet)]).exit_code == 0
    out = runner.invoke(cli, ["keys", "public", str(node)])
    assert out.exit_code == 0 and out.output.strip() == node_pub

    rec = tmp_path / "gw7.rec"
    out = runner.invoke(cli, ["keys", "sign-record", "--fleet-key", str(fleet), "--identity", "gw7",
                              "--public-key", node_pub, "--valid-days", "1", "--out", str(rec)])
    assert out.exit_code == 0, out.output
    store = TrustStore(fleet_key=load_private_key(fleet).public_key())
    got = store.add_record(rec.read_bytes(), now=0)
    assert got.identity == "gw7" and got.not_after == got.issued + 86400
    assert public_key_to_b64(store.get("gw7")) == node_pub  # type: ignore[arg-type]

    trust = tmp_path / "trust.toml"
    out = runner.invoke(cli, ["keys", "trust-file", f"gw7={node_pub}", f"x=y={node_pub}", "--fleet-key", str(fleet),
                              "--out", str(trust)])
    assert out.exit_code == 0, out.output
    loaded = load_trust_file(trust)
    assert list(loaded) == ["gw7", "x=y"] and loaded.fleet_key is not None
    out = runner.invoke(cli, ["keys", "trust-file", "--fleet-key", public_key_to_b64(FLEET)])
    assert out.exit_code == 0 and out.output.startswith("# broker-mqtt trust file")

    for args in (["keys", "trust-file"], ["keys", "trust-file", "gw7"], ["keys", "trust-file", "gw7=AAAA"],
                 ["keys", "public", str(tmp_path / "missing")],
                 ["keys", "sign-record", "--fleet-key", str(fleet), "--identity", "a/b", "--public-key", node_pub,
                  "--out", str(rec)]):
        out = runner.invoke(cli, args)
        assert out.exit_code == 2, (args, out.output)
    assert public_key_to_b64(public_key_from_b64(node_pub)) == node_pub
