"""A master's state takes back the records past its durable point exactly (``undo_log``): after
``roll_back(d)`` it equals a state that applied only the records up to ``d`` (every version,
tombstone, expiry, the writer table, lineage, ``forgot_seq``), in memory and in its SQLite file."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from broker_mqtt.store import versioned
from broker_mqtt.store.undo_log import UndoLog
from broker_mqtt.store.versioned import Record, VersionedState
from broker_mqtt.store.versioned_sqlite import open_state

WRITERS = ["w1", "w2", "w3"]


def _records(rng: random.Random, count: int, *, clear: bool = False, writers: list[str] = WRITERS) -> list[Record]:
    """``count`` records of every op kind a state applies, over few keys (so that they collide),
    in two epochs, with answers on some."""
    out: list[Record] = []
    n = dict.fromkeys(writers, 0)
    keys: list[Any] = [1, 2, 3, "a", "b", ("t", 1)]
    for seq in range(1, count + 1):
        epoch = (1, "m") if seq <= count // 2 else (2, "x")
        writer = rng.choice(writers)
        n[writer] += 1
        key = rng.choice(keys)
        kind = rng.choice(["put", "put", "put", "erase", "expire", "forget", "push", "pop", "many", "noop",
                           *(["clear"] if clear else [])])
        op: tuple[Any, ...]
        if kind == "put":
            op = ("put", key, rng.randrange(100), rng.choice([None, None, 1000.0 + seq]))
        elif kind in ("erase", "expire", "forget"):
            op = (kind, key)
        elif kind in ("push", "pop"):
            op = (kind, "list", *([rng.randrange(9)] if kind == "push" else []), None)
        elif kind == "many":
            op = ("many", [("put", rng.choice(keys), seq, None), ("erase", rng.choice(keys)),
                           ("put", rng.choice(keys), -seq, 5.0)])
        elif kind == "clear":
            op = ("clear",)
        else:
            op = ("noop",)
        result = rng.choice([None, None, seq, {"r": seq}])
        out.append(Record(seq, epoch, 1_000 + seq, rng.choice(["o1", "o2"]), writer, n[writer], op, result))
    return out


def _view(state: VersionedState) -> dict[str, Any]:
    return {
        "versions": sorted(((repr(k), v) for k, v in state.versions()), key=repr),
        "tombstones": state.tombstones,
        "applied": {w: (a.n, a.seq, dict(sorted(a.results.items()))) for w, a in state.applied.items()},
        "lineage": list(state.lineage),
        "last_seq": state.last_seq,
        "forgot_seq": state.forgot_seq,
    }


@pytest.mark.parametrize("seed", range(80))
def test_a_roll_back_leaves_the_state_a_prefix_of_its_records_made(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    writers = WRITERS
    if seed >= 60:  # answers and writers pruned (a table's bounds, small): a gap at a writers' pruning
        monkeypatch.setattr(versioned, "RESULTS_KEPT", 2)
        monkeypatch.setattr(versioned, "WRITERS_KEPT", 20)
        writers = [f"w{i}" for i in range(30)]
    records = _records(rng, rng.randrange(4, 60 if seed < 60 else 120), clear=40 <= seed < 60, writers=writers)
    start = rng.randrange(0, len(records))  # keep_undo from here (a mastership's start)
    to = rng.randrange(start, len(records) + 1)
    state, prefix = VersionedState(), VersionedState()
    for rec in records[:start]:
        state.apply(rec)
    state.keep_undo()
    for rec in records[start:]:
        state.apply(rec)
        if rng.random() < 0.2:
            state.undo_durable(min(rec.seq, to))  # acknowledged, never past the roll back's point
    for rec in records[:to]:
        prefix.apply(rec)
    before = {k: v for k, v in state.items()}
    changes = state.roll_back(to)
    if changes is None:  # a gap (a clear, or the writers' pruning, past ``to``): refused, nothing changed
        assert state.last_seq == len(records)
        assert any(r.op[0] == "clear" for r in records[to:]) or len(writers) > versioned.WRITERS_KEPT
        return
    assert changes is not None
    assert _view(state) == _view(prefix)
    after = dict(prefix.items())
    # the changes say how the visible values went from before to after
    differ = {repr(k) for k in before.keys() | after.keys() if before.get(k, ...) != after.get(k, ...)}
    assert differ <= {repr(c.key) for c in changes}
    for c in changes:
        assert (c.existed, c.exists) == (c.key in before, c.key in after)
        assert (c.old, c.new) == (before.get(c.key), after.get(c.key))
    # and it goes on as the prefix does
    more = [Record(r.seq, r.epoch, r.hlc, r.origin, r.writer, r.n + 100, r.op, r.result) for r in records[to:]]
    for rec in more:
        state.apply(rec)
        prefix.apply(rec)
    assert _view(state) == _view(prefix)


def test_no_roll_back_below_what_is_acknowledged_or_without_undo() -> None:
    records = _records(random.Random(1), 20)
    state = VersionedState()
    for rec in records[:5]:
        state.apply(rec)
    assert state.roll_back(4) is None  # no undo kept
    state.keep_undo()
    for rec in records[5:]:
        state.apply(rec)
    assert state.roll_back(4) is None  # before keep_undo
    state.undo_durable(12)
    assert state.roll_back(11) is None  # acknowledged
    assert state.last_seq == 20
    assert state.roll_back(12) is not None
    assert state.last_seq == 12


def test_a_clear_or_a_full_undo_log_is_a_gap_the_roll_back_does_not_cross() -> None:
    state = VersionedState()
    state.keep_undo()
    recs = [Record(1, (1, "m"), 1, "o", "w", 1, ("put", "k", 1, None)),
            Record(2, (1, "m"), 2, "o", "w", 2, ("clear",)),
            Record(3, (1, "m"), 3, "o", "w", 3, ("put", "k", 3, None))]
    for rec in recs:
        state.apply(rec)
    assert state.roll_back(1) is None  # the clear's undo is not kept
    assert state.roll_back(2) is not None
    assert state.value("k") is None and state.version("k") is not None and state.version("k").deleted  # type: ignore[union-attr]
    log = UndoLog(0, limit=4)  # records and keys
    for seq in range(1, 10):
        keys = log.begin(seq, 0, 0, "w", None)
        if keys is not None:
            keys.append((b"k", None, None, None))
    assert log.gap == 9 and len(log) == 0  # full at 3, 6 and 9: each time dropped, then that record
    log.begin(10, 0, 0, "w", None)
    assert [entry[0] for entry in log.records] == [10]


@pytest.mark.parametrize("seed", range(8))
def test_the_file_of_a_state_rolled_back_holds_the_prefix(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    records = _records(rng, 40)
    state = open_state(tmp_path / "s.db")
    prefix = VersionedState()
    for rec in records[:10]:
        state.apply(rec)
    state.commit()
    state.keep_undo()
    for i, rec in enumerate(records[10:]):
        state.apply(rec)
        if i % 7 == 0:
            state.commit()
    state.commit()
    to = rng.randrange(10, 41)
    for rec in records[:to]:
        prefix.apply(rec)
    assert state.roll_back(to) is not None
    state.commit()
    state.close()
    reopened = open_state(tmp_path / "s.db")
    try:
        view, expected = _view(reopened), _view(prefix)
        del view["forgot_seq"], expected["forgot_seq"]  # (a loaded state's is its last seq, not known better)
        assert view == expected
    finally:
        reopened.close()
