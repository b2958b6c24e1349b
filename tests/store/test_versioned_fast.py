"""The fast paths of ``store/versioned.py`` (and ``packing.pack_array``) against plain reference forms.

The per-op code of :class:`VersionedState` builds its dataclasses through written-out ``__init__``s,
checks received ops in one flat pass, and persists the writers' answers from a cache of their
encodings: each is checked here against the straightforward form it replaces.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import random
import sqlite3
from pathlib import Path
from typing import Any

import cbor2
import pytest

from broker_mqtt.store.errors import StoreDecodeError
from broker_mqtt.store.history import Stamps
from broker_mqtt.store.packing import pack as _pack
from broker_mqtt.store.packing import pack_array as _pack_array
from broker_mqtt.store.packing import unpack as _unpack
from broker_mqtt.store.state_merge import merge
from broker_mqtt.store.versioned import (
    RESULTS_KEPT,
    Change,
    Record,
    Version,
    VersionedState,
    _Applied,
    _op_from_wire,
)
from broker_mqtt.store.versioned_sqlite import open_state
from broker_mqtt.wire import codec

EPOCH = (1, "n")


@pytest.mark.parametrize("cls", [Version, Change, Record])
def test_written_out_init_sets_every_field_with_the_dataclass_defaults(cls: type) -> None:
    fields = dataclasses.fields(cls)
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    assert [p.name for p in params] == [f.name for f in fields]
    assert [p.default for p in params] == [inspect.Parameter.empty if f.default is dataclasses.MISSING
                                           else f.default for f in fields]
    args = [object() for _ in fields]
    obj = cls(*args)
    assert [getattr(obj, f.name) for f in fields] == args
    assert obj == cls(**{f.name: a for f, a in zip(fields, args, strict=True)})
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(obj, fields[0].name, 1)
    assert dataclasses.replace(obj, **{fields[1].name: 5}) == cls(args[0], 5, *args[2:])


def test_version_defaults_repr_and_hash() -> None:
    v = Version("x", 1, "o", 2)
    assert (v.deleted, v.expiry) == (False, None)
    assert repr(v) == "Version(value='x', hlc=1, origin='o', seq=2, deleted=False, expiry=None)"
    assert hash(v) == hash(Version("x", 1, "o", 2, False, None))
    assert Change("k", True, 1, True, 2, "o").expired is False


# -- received ops: the flat check against the recursive one it replaces ---------------------------------

_OPS = {"put": 4, "erase": 2, "expire": 2, "clear": 1, "noop": 1, "many": 2, "forget": 2}


def _reference_valid(op: Any, *, nested: bool = False) -> bool:
    if not (isinstance(op, (list, tuple)) and op and _OPS.get(op[0]) == len(op)):
        return False
    if op[0] == "many":
        return not nested and isinstance(op[1], (list, tuple)) and all(_reference_valid(o, nested=True)
                                                                       for o in op[1])
    return True


def _reference_convert(op: Any) -> tuple[Any, ...]:
    return ("many", [tuple(o) for o in op[1]]) if op[0] == "many" else tuple(op)


_SAMPLES: list[Any] = [
    ["put", 1, {"a": 1}, None], ("put", "k", 2, 3.5), ["put", 1, 2], ["erase", 1], ["erase"], ["expire", "k"],
    ["clear"], ["clear", 1], ["noop"], ["forget", 3], ["forget"], ["bogus", 1], [], (), None, "put", 5, {"put": 1},
    [None], [1, 2], ["many", []], ["many", [["put", 1, 2, None], ["erase", 1], ["forget", 1]]],
    ["many", [["put", 1, 2, None], ["many", []]]], ["many", [["put", 1, 2]]], ["many", [[]]], ["many", [None]],
    ["many", "xy"], ["many", None], ["many", [["noop"], ("clear",), ["expire", 2]]], ["many"], ["many", [], 1],
    ("many", (("put", 1, 2, None),)), ["many", [["bogus"]]], ["many", [[5]]],
]


@pytest.mark.parametrize("op", _SAMPLES, ids=repr)
def test_op_from_wire_accepts_and_converts_as_the_recursive_check(op: Any) -> None:
    got = _op_from_wire(op)
    if _reference_valid(op):
        assert got == _reference_convert(op)
        assert all(type(o) is tuple for o in got[1]) if got[0] == "many" else type(got) is tuple
    else:
        assert got is None


def test_record_from_wire_rejects_a_malformed_op_and_round_trips_a_good_one() -> None:
    rec = Record(3, EPOCH, 10, "o", "w", 1, ("many", [("put", 1, {"x": [1]}, None), ("erase", 2)]), [1])
    wire = cbor2.loads(cbor2.dumps(rec.to_wire()))
    assert Record.from_wire(wire) == rec
    wire[6] = ["many", [["put", 1, 2, None], ["many", []]]]
    with pytest.raises(StoreDecodeError):
        Record.from_wire(wire)


# -- apply: changes, tombstone order, expiring keys ------------------------------------------------------

def _apply(state: VersionedState, *ops: tuple[Any, ...], writer: str = "w", result: Any = None) -> list[Change]:
    seq = state.last_seq + 1
    op = ops[0] if len(ops) == 1 else ("many", list(ops))
    return state.apply(Record(seq, EPOCH, 100 + seq, f"o{seq}", writer, seq, op, result))


def test_apply_reports_changes_and_keeps_tombstones_in_erase_order() -> None:
    s = VersionedState()
    assert _apply(s, ("put", 1, "a", None), ("put", 2, "b", None), ("put", 1, "c", None)) == [
        Change(1, False, None, True, "a", "o1"), Change(2, False, None, True, "b", "o1"),
        Change(1, True, "a", True, "c", "o1")]
    assert _apply(s, ("erase", 1), ("erase", 3)) == [Change(1, True, "c", False, None, "o2")]
    assert _apply(s, ("erase", 2)) == [Change(2, True, "b", False, None, "o3")]
    assert s.old_tombstones(10**9, 10) == [1, 3, 2]
    assert _apply(s, ("erase", 1)) == []  # erased again: moves behind the younger tombstones
    assert s.old_tombstones(10**9, 10) == [3, 2, 1] and s.tombstones == 3
    assert _apply(s, ("put", 3, "d", None)) == [Change(3, False, None, True, "d", "o5")]
    assert s.old_tombstones(10**9, 10) == [2, 1] and s.version(3) == Version("d", 105, "o5", 5)
    assert _apply(s, ("forget", 2), ("forget", 3), ("forget", 9)) == []
    assert s.old_tombstones(10**9, 10) == [1] and s.get(3) == "d" and s.version(2) is None


def test_apply_tracks_expiring_keys_expire_and_clear() -> None:
    s = VersionedState()
    _apply(s, ("put", "a", 1, 50.0), ("put", "b", 2, 40.0), ("put", "c", 3, None))
    assert s.next_expiry() == (40.0, "b")
    _apply(s, ("put", "b", 2, None))
    assert s.next_expiry() == (50.0, "a")
    assert _apply(s, ("expire", "a")) == [Change("a", True, 1, False, None, "o3", expired=True)]
    assert s.next_expiry() is None and s.keys() == ["b", "c"]
    assert _apply(s, ("clear",)) == [Change("b", True, 2, False, None, "o4"), Change("c", True, 3, False, None, "o4")]
    assert len(s) == 0 and s.tombstones == 3 and s.old_tombstones(10**9, 10) == ["a", "b", "c"]


def test_random_ops_keep_the_indexes_consistent() -> None:
    rng = random.Random(5)
    s = VersionedState()
    visible: dict[Any, Any] = {}
    for _ in range(300):
        ops = []
        for _ in range(rng.randint(1, 6)):
            key = rng.choice([1, 2, 3, "a", "b", (1, 2)])
            kind = rng.choice(["put", "put", "erase", "expire", "forget", "clear"])
            ops.append(("put", key, rng.random(), rng.choice([None, 7.0])) if kind == "put"
                       else ("clear",) if kind == "clear" else (kind, key))
        changes = _apply(s, *ops)
        for c in changes:
            assert (c.existed, c.old) == ((c.key in visible), visible.get(c.key))
            if c.exists:
                visible[c.key] = c.new
            else:
                visible.pop(c.key, None)
        assert sorted(map(repr, s.items())) == sorted(map(repr, visible.items()))
        dead = [_pack(key) for key, v in s.versions() if v.deleted]
        assert sorted(s._tombstones) == sorted(dead)
        assert set(s._expiring) == {_pack(key) for key, v in s.versions() if v.expiry is not None and not v.deleted}


# -- the persisted header: cached answer encodings against the plain encoding --------------------------

def _plain_header(state: VersionedState) -> bytes:
    return cbor2.dumps({
        "seq": state.last_seq, "lineage": [[list(e), s] for e, s in state.lineage], "hlc": state.max_hlc,
        "applied": [[w, a.n, a.seq, [[n, r] for n, r in a.results.items()]] for w, a in state.applied.items()],
    }, canonical=True, default=codec._default)


def _stored_header(path: Path) -> bytes:
    # closing(): a connection's own ``with`` block ends a transaction but leaves it open
    with contextlib.closing(sqlite3.connect(path)) as db:
        return bytes(db.execute("SELECT v FROM meta WHERE name = 'state'").fetchone()[0])


@pytest.mark.parametrize("n", [0, 1, 23, 24, 255, 256, 65_535, 65_536])
def test_pack_array_is_pack_of_the_list(n: int) -> None:
    items = [i % 300 for i in range(n)]
    assert _pack_array([_pack(i) for i in items]) == _pack(items)


def test_committed_header_is_byte_for_byte_the_plain_encoding(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with contextlib.closing(open_state(path)) as s:
        rng = random.Random(3)
        for i in range(RESULTS_KEPT * 3):
            writer = f"w{rng.randrange(30)}" if i < RESULTS_KEPT * 2 else "busy"
            answer = rng.choice([None, i, [[i, {"data": ["t", i]}, 1]], "x" * 30, {"k": {1, 2}}][writer == "busy":])
            _apply(s, ("put", i % 7, i, None), writer=writer, result=answer)
            if rng.random() < 0.3:
                s.commit()
                assert _stored_header(path) == _plain_header(s)
        s.commit()
        assert _stored_header(path) == _plain_header(s)
        assert len(s.applied["busy"].results) == RESULTS_KEPT
        assert len(s.applied["busy"].packed) <= RESULTS_KEPT + 1  # dropped answers leave the cache
        s.applied["busy"].results[max(s.applied["busy"].results)] = ["replaced"]  # as merge() may
        _apply(s, ("put", 0, 0, None))
        s.commit()
        assert _stored_header(path) == _plain_header(s)
    with contextlib.closing(open_state(path)) as again:
        assert {w: (a.n, a.seq, a.results) for w, a in again.applied.items()} == {
            w: (a.n, a.seq, {n: _unpack(_pack(r)) for n, r in a.results.items()}) for w, a in s.applied.items()}


def test_header_with_many_writers_and_after_a_merge(tmp_path: Path) -> None:
    with contextlib.closing(open_state(tmp_path / "a.db")) as a:
        b = VersionedState()
        for i in range(300):
            _apply(a, ("put", i, i, None), writer=f"w{i}", result=[i])
        a.commit()
        assert _stored_header(tmp_path / "a.db") == _plain_header(a)
        _apply(b, ("put", "x", 1, None), writer="w5", result="other")
        versions, applied, _ = merge(a, b)
        a.replace(versions, last_seq=a.last_seq + 1, lineage=a.lineage, applied=applied, max_hlc=a.max_hlc)
        a.commit()
        assert _stored_header(tmp_path / "a.db") == _plain_header(a)
        assert isinstance(a.applied["w5"], _Applied)


# -- entries held out of the garbage collector's walk -------------------------------------------------------

def test_a_state_of_plain_values_holds_nothing_the_garbage_collector_walks() -> None:
    import gc

    s = VersionedState()
    for i in range(1, 2001):
        s.apply(Record(i, EPOCH, 10 * i, f"o{i % 3}", "w", i, ("put", f"k{i}", i, 5.0 if i % 2 else None)))
    s.commit()
    gc.collect()  # a full collection stops tracking the dicts that hold only untracked objects
    assert not any(gc.is_tracked(d) for d in (s._values, s._stamps, s._expiring, s._tombstones))
    assert s.version("k7") == Version(7, 70, "o1", 7, False, 5.0)
    assert s.version("k8") == Version(8, 80, "o2", 8, False, None)


def test_a_version_whose_seq_does_not_fit_a_stamp_is_malformed() -> None:
    with pytest.raises(StoreDecodeError):
        Version.from_wire([1, 10, "o", 2**64, False, None])
    with pytest.raises(StoreDecodeError):
        Version.from_wire([1, 10, "o", -1, False, None])
    assert Version.from_wire([1, -10, "o", 2**64 - 1, False, None]).seq == 2**64 - 1


def test_a_stamp_gives_back_what_it_was_made_of() -> None:
    stamps = Stamps()
    for hlc, origin, seq in [(0, "a", 0), (-5, "b", 2**64 - 1), (2**60, "a", 12345), (1, "", 1)]:
        assert stamps.parts(stamps.stamp(hlc, origin, seq)) == (hlc, origin, seq)
    assert stamps.names == ["a", "b", ""]


def test_array_keys_come_back_as_tuples() -> None:
    s = VersionedState()
    _apply(s, ("put", (1, (2, 3)), "v", None), ("put", [4, 5], "w", None))
    assert sorted(s.keys(), key=repr) == [(1, (2, 3)), (4, 5)]
    assert s.get([1, [2, 3]]) == "v"


def test_value_is_the_live_value_or_the_default_as_version_says() -> None:
    """``value(key, default)`` (no Version built) agrees with ``version(key)`` for live, erased
    and never-written keys, and keys that pack alike (a tuple and a list) are one key."""
    state = VersionedState()
    ops = [("put", 1, {"data": [1, 2]}, None), ("put", (1, "a"), None, None), ("put", "gone", 5, None),
           ("erase", "gone")]
    state.apply(Record(1, (1, "m"), 10, "o", "w", 1, ("many", ops)), report=False)
    assert len(state) == 2 and state.tombstones == 1
    for key in (1, [1, "a"], (1, "a"), "gone", "never", 1.0):
        v = state.version(key)
        live = v is not None and not v.deleted
        assert state.value(key, "absent") == (v.value if live else "absent"), key
    assert state.value(1) == {"data": [1, 2]} and state.value("gone") is None
