"""SettleAndAcquire: a consumer's settlements and the acquire that refills its window, one write and one record."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest

from broker_mqtt.queue import MessageState
from broker_mqtt.queue.commands import (
    RECORD_BYTES,
    Acquire,
    Publish,
    RegisterReader,
    Settle,
    SettleAndAcquire,
    acquired_cost,
)
from broker_mqtt.queue.model import QueueIndex, index_for
from broker_mqtt.store.commands import decode_command
from broker_mqtt.store.errors import StoreDecodeError, StoreError
from broker_mqtt.store.versioned import VersionedState

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_queue_commands import _record_size, records, run  # noqa: E402 - what a master does with one write

OWNER = "e" * 32 + ".0123abcd"  # a consumer's owner id: <endpoint hex>.<random>


def _published(n: int, data: Any = None) -> VersionedState:
    state = VersionedState()
    run(state, Publish([data if data is not None else ["job", i] for i in range(n)]))
    return state


def test_round_trip_and_acts_for_its_owner() -> None:
    cmd = SettleAndAcquire(OWNER, [[1, "accept", None, 1], [2, "reject", "bad", 1]], 50, 30.0)
    assert decode_command(cmd.to_wire()) == cmd
    assert cmd.to_wire()[0] == "queue_settle_acquire"
    assert cmd.acts_for() == OWNER  # (the master lets only the owner's endpoint, or a replica's, send it)


@pytest.mark.parametrize("wire", [
    ["queue_settle_acquire", "o", [[1, "accept", None]], 0, 1.0],       # acquire nothing: a Settle
    ["queue_settle_acquire", "o", [], 5, 1.0],                          # settle nothing: an Acquire
    ["queue_settle_acquire", "o", [[1, "eat", None]], 5, 1.0],
    ["queue_settle_acquire", "o", [[1, "accept", None]], 5, 0],
    ["queue_settle_acquire", "o", [[1, "accept", None]], 5],
    ["queue_settle_acquire", "", [[1, "accept", None]], 5, 1.0],
    ["queue_settle_acquire", "o", [[1, "accept", None]], True, 1.0],
    ["queue_settle_acquire", "o", [[1, "accept", None]], 5, 1.0, "more"],
])
def test_malformed_forms_are_decode_errors(wire: Any) -> None:
    with pytest.raises(StoreDecodeError):
        decode_command(wire)


def test_it_does_what_a_settle_then_an_acquire_do_in_one_record() -> None:
    """Random traffic, twice: once with a Settle and then an Acquire, once with the two in one
    SettleAndAcquire. Same answers, same records, and the index kept as it goes equals one rebuilt.
    (Accepts and rejects here: what its settlements make ready again, the next acquire takes.)"""
    rng = random.Random(7)
    apart, together = _published(600), _published(600)
    for a in (apart, together):
        run(a, Acquire(OWNER, 40, 30.0))
    held = list(range(1, 41))
    for _ in range(30):
        rng.shuffle(held)
        settling = held[:rng.randint(1, 20)]
        items = [[i, rng.choice(["accept", "accept", "reject"]), "why", 1] for i in settling]
        items.append([10_000, "accept", None])  # (one it does not hold: answered per item)
        n = rng.randint(1, 30)
        seq = together.last_seq
        answer = run(together, SettleAndAcquire(OWNER, items, n, 30.0))
        assert together.last_seq == seq + 1  # one record
        assert answer == [run(apart, Settle(OWNER, items)), run(apart, Acquire(OWNER, n, 30.0))]
        assert records(together) == records(apart)
        held = [i for i in held if i not in settling] + [m[0] for m in answer[1]]
    idx, rebuilt = index_for(together), QueueIndex.build(together)
    assert (idx.ready, idx.owned, idx.done, idx.next_id) == (rebuilt.ready, rebuilt.owned, rebuilt.done, rebuilt.next_id)
    assert sorted(idx.owned[OWNER]) == sorted(held)


def test_what_its_settlements_make_ready_waits_for_the_next_acquire() -> None:
    """Its acquire takes messages ready before the write: one it releases or returns is not handed
    straight back to it, but waits, ready, for the next acquire (of any consumer)."""
    state = _published(6)
    run(state, Acquire(OWNER, 2, 30.0))
    answer = run(state, SettleAndAcquire(OWNER, [[1, "release", None, 1], [2, "return", None, 1]], 2, 30.0))
    assert [m[0] for m in answer[1]] == [3, 4]
    assert index_for(state).first_ready(2) == [1, 2]
    assert [(m[0], m[2]) for m in run(state, Acquire("other.0", 2, 30.0))] == [(1, 2), (2, 1)]
    idx, rebuilt = index_for(state), QueueIndex.build(state)
    assert (idx.ready, idx.owned) == (rebuilt.ready, rebuilt.owned)


def test_settlements_that_fill_half_a_record_leave_no_room_for_the_acquire() -> None:
    """With a log reader behind, an accepted message stays (``done``) and its record carries its data:
    settlements of large messages fill the record, and the acquire takes only what keeps the whole
    record under RECORD_BYTES // 2 (none once the settlements are there), so that no record passes
    what a publish checked its message against (``largest_acquire``)."""
    from broker_mqtt.store.writer_core import RECORD_SLACK

    big = "x" * 6_000
    state = _published(40, big)
    run(state, RegisterReader("r", "oldest"))
    got = run(state, Acquire(OWNER, 40, 30.0))
    assert len(got) == 3  # (3 of 12 kB each fill half a record)
    first = [[m[0], "accept", None, 1] for m in got]
    answer, size = _record_size(state, SettleAndAcquire(OWNER, first, 40, 30.0))
    assert answer[0] == [None] * 3
    assert 0 < len(answer[1]) < 3  # the settlements took part of the room
    assert size <= RECORD_BYTES // 2 + 2 * acquired_cost(big, OWNER) + RECORD_SLACK
    held = [m[0] for m in answer[1]]
    while len(held) < 6:
        held += [m[0] for m in run(state, Acquire(OWNER, 40, 30.0))]
    many = [[i, "accept", None, 1] for i in held]  # 6 x 6 kB with their data: past half a record alone
    answer, size = _record_size(state, SettleAndAcquire(OWNER, many, 40, 30.0))
    assert answer == [[None] * len(many), []]
    assert size <= RECORD_BYTES + RECORD_SLACK
    assert all(r.state is MessageState.DONE for i, r in records(state).items() if i in held)


def test_a_message_too_large_for_any_acquire_is_dead_lettered_also_behind_settlements() -> None:
    """The broker's limit (``record_limit``): a message that fits no acquire's record, even alone, is
    dead-lettered as by an Acquire, behind the settlements if its data fits there (else by the next
    acquire); one that fits alone but not behind the settlements waits for the next acquire (it is
    not dead)."""
    state = VersionedState()
    state.record_limit = 30_000
    run(state, Publish(["a", "b"]))
    run(state, Acquire(OWNER, 2, 30.0))
    run(state, RegisterReader("r", "oldest"))
    run(state, Publish(["x" * 12_000, "y" * 20_000, "c"]))  # 3: fits alone (24 kB), 4 never (40 kB)
    settle = [[1, "reject", "r" * 900, 1], [2, "reject", "r" * 900, 1]]  # (their data and reasons in the record)
    answer = run(state, SettleAndAcquire(OWNER, settle, 10, 30.0))
    assert answer == [[None, None], []]  # 3 would pass the limit behind the settlements: next time
    assert records(state)[3].state is MessageState.READY
    assert [m[0] for m in run(state, SettleAndAcquire(OWNER, [[10_000, "accept", None]], 10, 30.0))[1]] == [3]
    got = run(state, SettleAndAcquire(OWNER, [[3, "accept", None, 1]], 10, 30.0))[1]
    assert got == []  # 4: its data (20 kB) behind the settlement's (12 kB) would pass the limit
    assert records(state)[4].state is MessageState.READY
    assert run(state, Acquire(OWNER, 10, 30.0)) == []  # 4: dead, alone in its acquire (one a record)
    assert records(state)[4].state is MessageState.DEAD and "too large to deliver" in (records(state)[4].reason or "")
    assert [m[0] for m in run(state, SettleAndAcquire(OWNER, [[10_000, "accept", None]], 10, 30.0))[1]] == [5]
    small = [[i, "reject", None, 1] for i in (5,)]  # a small settlement: the dead letter fits behind it
    run(state, Publish(["z" * 15_000, "d"]))  # 6: never (30 kB), 15 kB with its data
    assert run(state, SettleAndAcquire(OWNER, small, 10, 30.0)) == [[None], []]
    assert records(state)[6].state is MessageState.DEAD


def test_a_dead_letter_behind_settlements_keeps_the_record_under_the_brokers_limit() -> None:
    """A message no acquire can carry is dead-lettered in a record that carries its data once: alone,
    that fits (its publish's record did); behind settlements it may not. Before, a SettleAndAcquire
    dead-lettered it behind them, in a record past ``record_limit`` (what the broker carries: every
    master's send loop would meet it)."""
    from broker_mqtt.store.writer_core import RECORD_SLACK

    state = VersionedState()
    state.record_limit = 30_000
    run(state, Publish(["a" * 1_000, "b" * 1_000]))
    run(state, Acquire(OWNER, 2, 30.0))
    run(state, Publish(["y" * 29_000, "c"]))  # 3: a peer's unchecked publish, its record under the limit
    settle = [[1, "reject", "r" * 900, 1], [2, "reject", "r" * 900, 1]]
    answer, size = _record_size(state, SettleAndAcquire(OWNER, settle, 10, 30.0))
    assert answer[0] == [None, None]
    assert size <= state.record_limit + RECORD_SLACK, size
    # it is dead-lettered by an acquire with nothing before it, as an Acquire does
    while records(state)[3].state is MessageState.READY:
        answer, size = _record_size(state, Acquire(OWNER, 10, 30.0))
        assert size <= state.record_limit + RECORD_SLACK, size
    assert records(state)[3].state is MessageState.DEAD


@pytest.mark.parametrize("seed", range(4))
def test_the_index_the_commands_keep_equals_one_rebuilt_from_the_state(seed: int) -> None:
    """The settle and acquire commands keep the master's index from what they computed (not by
    reading their ops again): after every write of random traffic (every action, a log reader
    behind or not, max_deliveries, two owners, combined writes or not), it equals one rebuilt from
    the state, and a replica applying the same log holds the same state."""
    from broker_mqtt.queue.commands import CommitReader, ReleaseOwner
    from broker_mqtt.store.log_ops import compute_op
    from broker_mqtt.store.versioned import Record

    rng = random.Random(seed)
    state, follower = VersionedState(), VersionedState()
    if seed % 2:
        run(state, RegisterReader("r", "oldest"))
        follower = VersionedState()
        for key, value in state.items():  # (the follower starts from the same state)
            follower.apply(Record(follower.last_seq + 1, (1, "m"), 1, "o", "w", 1, ("put", key, value, None), None))
    for step in range(500):
        owner = rng.choice(["x.1", "y.2"])
        held = sorted(index_for(state).owned.get(owner, ()))
        settle = [[i, rng.choice(["accept", "accept", "release", "reject", "return"]), "r"]
                  for i in rng.sample(held, min(len(held), rng.randint(0, 4)))]
        roll = rng.random()
        if roll < 0.3:
            cmd: Any = Publish([step] * rng.randint(1, 4), rng.choice([None, 2]))
        elif roll < 0.45:
            cmd = Acquire(owner, rng.randint(1, 5), 5.0)
        elif roll < 0.6 and settle:
            cmd = Settle(owner, settle)
        elif roll < 0.9 and settle:
            cmd = SettleAndAcquire(owner, settle, rng.randint(1, 5), 5.0)
        elif roll < 0.95:
            cmd = ReleaseOwner(owner, "gone", False)
        else:
            cmd = CommitReader("r", max(0, index_for(state).next_id - 1 - rng.randint(0, 5))) if seed % 2 else \
                Acquire(owner, 1, 5.0)
        op, answer = compute_op(state, cmd, 1000.0 + step)
        rec = Record(state.last_seq + 1, (1, "m"), step + 1, "o", "w", step + 1, op, answer)
        state.apply(rec)
        follower.apply(Record.from_wire(rec.to_wire()))
        idx, fresh = index_for(state), QueueIndex.build(state)
        assert (idx.ready, idx.owned, idx.owner_of, idx.leases, idx.done, idx.readers, idx.next_id) == (
            fresh.ready, fresh.owned, fresh.owner_of, fresh.leases, fresh.done, fresh.readers, fresh.next_id), step
        assert idx.first_ready(3) == sorted(fresh.ready)[:3]
    assert dict(follower.items()) == dict(state.items())


@pytest.mark.parametrize("seed", range(4))
def test_the_kept_index_equals_a_rebuilt_one_under_adversarial_settlements(seed: int) -> None:
    """As above, with what a peer may send: settlements naming an id twice, ids of no record, of
    ready messages, of another owner's, wrong delivery counts; foreign values written into the store;
    the index dropped mid-way; every other command (readers, sweeps, renewals, releases, forgets)."""
    from broker_mqtt.queue.commands import CommitReader, Forget, ReleaseOwner, RemoveReader, Renew, Sweep
    from broker_mqtt.queue.model import forget_index
    from broker_mqtt.store.log_ops import compute_op
    from broker_mqtt.store.versioned import Record

    def view(idx: QueueIndex) -> tuple[Any, ...]:
        return idx.ready, idx.owned, idx.owner_of, idx.leases, idx.done, idx.readers, idx.next_id

    rng = random.Random(seed)
    state = VersionedState()
    foreign: list[Any] = [{"data": "f", "state": "acquired", "owner": "x.1", "count": 1, "max": None, "reason": None},
                          {"data": "f", "state": "acquired", "owner": 5, "count": 1, "max": None, "reason": None},
                          {"data": "f", "state": "ready", "owner": None, "count": "2", "max": None, "reason": None},
                          {"data": "f", "state": "bogus"}, "junk"]
    for step in range(300):
        owner = rng.choice(["x.1", "y.2"])
        keys = [k for k, _ in state.items() if isinstance(k, int)]
        ids = [*keys, 0, 10**6, max(keys, default=1) + 1]
        items: list[list[Any]] = []
        for _ in range(rng.randint(1, 5)):
            item = [rng.choice(ids), rng.choice(["accept", "release", "reject", "return"]), rng.choice([None, "r"])]
            if rng.random() < 0.3:
                item.append(rng.randint(1, 3))
            items += [item, list(item)] if rng.random() < 0.3 else [item]
        roll = rng.random()
        if roll < 0.95:
            cmd: Any = rng.choice([
                Publish([rng.choice(["s", "x" * 5000]) for _ in range(rng.randint(1, 4))], rng.choice([None, 2])),
                Acquire(owner, rng.randint(1, 8), 5.0), Settle(owner, items),
                SettleAndAcquire(owner, items, rng.randint(1, 8), 5.0), SettleAndAcquire(owner, items, 3, 0.5),
                ReleaseOwner(owner, "gone", rng.random() < 0.5), RegisterReader(rng.choice("rq"), "oldest"),
                CommitReader(rng.choice("rq"), max(0, index_for(state).next_id - 1 - rng.randint(0, 5))),
                RemoveReader(rng.choice("rq")), Sweep(5), Renew(owner, 5.0), Forget(0.0)])
            if rng.random() < 0.05:
                forget_index(state)
            try:
                op, answer = compute_op(state, cmd, 1000.0 + step * 0.3)
            except StoreError:  # (a settle too large for a record: nothing applied)
                assert view(index_for(state)) == view(QueueIndex.build(state))
                continue
        else:  # a peer's value: the index is rebuilt (the state moved as it did not predict)
            op, answer = ("put", rng.choice(ids), rng.choice(foreign), None), None
            cmd = op
        state.apply(Record(state.last_seq + 1, (1, "m"), step + 1, "o", "w", step + 1, op, answer))
        idx, fresh = index_for(state), QueueIndex.build(state)
        assert view(idx) == view(fresh), (step, cmd)
        assert idx.first_ready(5) == sorted(fresh.ready)[:5] and idx.done_upto(None) == sorted(fresh.done)
