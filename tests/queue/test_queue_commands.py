"""Tier 1: the queue's sans-io core (and the two store hooks it needs), no event loop.

The store hooks: a ``["many", [...]]`` log op applied atomically, and ComputedCommand (a write that
computes its own effect at the master). The queue: ids, FIFO, delivery counts, settlement, dead
letters, ownership release, and the master's index kept equal to one rebuilt from the state.
Then the commands over the simulated network of elected-store replicas, with a master crash.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_mqtt.queue import MessageState
from broker_mqtt.queue.commands import (
    MAX_ERASES,
    MAX_OWNER,
    MAX_REASON,
    RECORD_BYTES,
    Acquire,
    CommitReader,
    Forget,
    Publish,
    RegisterReader,
    ReleaseOwner,
    Renew,
    Settle,
    Sweep,
    acquired_cost,
    settled_cost,
)
from broker_mqtt.queue.model import MARKER_LIMIT, MessageRecord, QueueIndex, index_for, new_marker
from broker_mqtt.queue.publishing import Publisher
from broker_mqtt.store.commands import CommandKind, ComputedCommand, Put, decode_command, register_command
from broker_mqtt.store.errors import StoreDecodeError
from broker_mqtt.store.log_ops import compute_op
from broker_mqtt.store.versioned import Record, VersionedState

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "store"))
from _elected_sim import SimNet  # noqa: E402 - the elected-store simulator lives with its tests

WALL = 1_000.0


def run(state: VersionedState, cmd: Any, wall: float = WALL, *, writer: str = "w", n: int = 0) -> Any:
    """What a master does with one write: compute its effect, apply it as the next record."""
    op, answer = compute_op(state, cmd, wall)
    state.apply(Record(state.last_seq + 1, (1, "m"), state.last_seq + 1, "o", writer, n or state.last_seq + 1,
                       op, answer))
    return answer


def records(state: VersionedState) -> dict[int, MessageRecord]:
    out = {}
    for k, v in state.items():
        if isinstance(k, int):
            rec = MessageRecord.from_wire(v)
            assert rec is not None
            out[k] = rec
    return out


# -- the store hooks --------------------------------------------------------------------------------------

def test_many_op_is_one_record_applied_in_order_and_round_trips() -> None:
    state = VersionedState()
    rec = Record(1, (1, "m"), 5, "o", "w", 1, ("many", [("put", "a", 1, None), ("put", "b", 2, None),
                                                          ("erase", "a")]), None)
    again = Record.from_wire(rec.to_wire())
    assert again == rec
    changes = state.apply(again)
    assert dict(state.items()) == {"b": 2} and state.last_seq == 1
    assert [(c.key, c.exists) for c in changes] == [("a", True), ("b", True), ("a", False)]


@pytest.mark.parametrize("op", [
    ["many", [["many", []]]],             # not nested
    ["many", [["put", "k", 1]]],           # a bad inner op
    ["many", "put"],                      # not a list
    ["many"],
])
def test_malformed_many_op_is_a_decode_error(op: Any) -> None:
    with pytest.raises(StoreDecodeError):
        Record.from_wire([1, [1, "m"], 5, "o", "w", 1, op, None])


@dataclass(frozen=True, slots=True)
class _Swap(ComputedCommand):
    a: str
    b: str

    def compute(self, state: VersionedState, wall: float) -> tuple[tuple[Any, ...], Any]:
        va, vb = state.get(self.a), state.get(self.b)
        return ("many", [("put", self.a, vb, None), ("put", self.b, va, None)]), [va, vb]


def test_computed_command_computes_its_own_effect() -> None:
    state = VersionedState()
    run(state, Put("x", 1))
    run(state, Put("y", 2))
    assert run(state, _Swap("x", "y")) == [1, 2]
    assert dict(state.items()) == {"x": 2, "y": 1}


def test_register_command_takes_only_computed_commands() -> None:
    with pytest.raises(TypeError):
        register_command(CommandKind.QUEUE_PUBLISH)(Put)


@pytest.mark.parametrize("wire", [
    ["queue_publish", [], None],                     # nothing to publish
    ["queue_publish", [1], 0],                       # max_deliveries 0
    ["queue_publish", "abc", None],
    ["queue_acquire", "", 1, 1.0],                   # no owner
    ["queue_acquire", "o", 0, 1.0],
    ["queue_acquire", "o", 1, -1],
    ["queue_acquire", "o", True, 1.0],
    ["queue_settle", "o", [[1, "eat", None]]],
    ["queue_settle", "o", []],
    ["queue_settle", "o", [["1", "accept", None]]],
    ["queue_settle", "o", [[1, "accept"]]],
    ["queue_settle", "o", [[1, "accept", None, 0]]],           # delivery counts start at 1
    ["queue_settle", "o", [[1, "accept", None, "1"]]],
    ["queue_settle", "o", [[1, "accept", None, 1, 2]]],
    ["queue_release_owner", "o", "why", "yes"],
    ["queue_renew", "o", 0],
    ["queue_renew", "o"],
    ["queue_forget", -1],
    ["queue_forget", "60"],
    ["queue_forget", True],
    ["queue_forget"],
    ["queue_acquire", "o" * (MAX_OWNER + 1), 1, 1.0],  # a record carries the owner per message
    ["queue_acquire", "\U0001F600" * 100, 1, 1.0],   # (in ASCII: its length is its size)
    ["queue_settle", "o", [[1, "reject", "r" * (MAX_REASON + 1)]]],
    ["queue_release_owner", "o", "r" * (MAX_REASON + 1), False],
    ["queue_publish", [1], 1 << 63],                 # max_deliveries is a count, not a bignum
    ["queue_sweep", 0],
    ["queue_sweep"],
])
def test_malformed_queue_commands_are_decode_errors(wire: Any) -> None:
    with pytest.raises(StoreDecodeError):
        decode_command(wire)


@pytest.mark.parametrize("cmd", [Publish([1, {"a": b"x"}], 3), Acquire("o", 5, 2.5), Settle("o", [[1, "reject", "bad"]]),
                                 Settle("o", [[1, "accept", None, 2]]),
                                 ReleaseOwner("o", "gone", True), Renew("o", 3.0), Forget(60.0), Forget(0), Sweep(5)])
def test_queue_commands_round_trip(cmd: Any) -> None:
    assert decode_command(cmd.to_wire()) == cmd


# -- queue semantics ----------------------------------------------------------------------------------------

def test_ids_are_consecutive_and_first_deliveries_fifo() -> None:
    state = VersionedState()
    assert run(state, Publish(["a", "b"])) == 1
    assert run(state, Publish(["c"])) == 3
    assert run(state, Acquire("x", 2, 5.0)) == [[1, "a", 1], [2, "b", 1]]
    assert run(state, Acquire("y", 5, 5.0)) == [[3, "c", 1]]
    assert run(state, Acquire("y", 5, 5.0)) == []
    recs = records(state)
    assert [(i, r.state, r.owner) for i, r in recs.items()] == [
        (1, MessageState.ACQUIRED, "x"), (2, MessageState.ACQUIRED, "x"), (3, MessageState.ACQUIRED, "y")]
    assert state.get("lease/x") == WALL + 5.0


def test_accept_release_reject() -> None:
    state = VersionedState()
    run(state, Publish(["a", "b", "c"]))
    run(state, Acquire("x", 3, 5.0))
    assert run(state, Settle("x", [[1, "accept", None], [2, "release", None], [3, "reject", "bad input"]])) == [
        None, None, None]
    recs = records(state)
    assert 1 not in recs
    assert recs[2].state is MessageState.READY and recs[2].count == 1 and recs[2].owner is None
    assert recs[3].state is MessageState.DEAD and recs[3].reason == "bad input"
    # the released one is delivered again, its count raised
    assert run(state, Acquire("y", 5, 5.0)) == [[2, "b", 2]]


def test_the_index_counts_messages_that_became_ready() -> None:
    # the master's arrivals: publishing, releasing and taking back count; acquiring and settling do not
    state = VersionedState()
    run(state, Publish(["a", "b"]))
    idx = index_for(state)
    assert idx.readied == 2
    run(state, Acquire("x", 2, 5.0))
    run(state, Settle("x", [[1, "accept", None]]))
    assert index_for(state) is idx and idx.readied == 2
    run(state, Settle("x", [[2, "release", None]]))
    assert idx.readied == 3
    run(state, Acquire("y", 1, 5.0))
    run(state, ReleaseOwner("y", "gone"))
    assert index_for(state) is idx and idx.readied == 4 and idx.ready == {2}


def test_a_settlement_with_a_delivery_count_settles_that_delivery_only() -> None:
    # taken back and acquired again by the same owner: the first delivery's late accept is refused
    state = VersionedState()
    run(state, Publish(["a"]))
    assert run(state, Acquire("x", 1, 5.0)) == [[1, "a", 1]]
    run(state, ReleaseOwner("x", "lease expired"))
    assert run(state, Acquire("x", 1, 5.0)) == [[1, "a", 2]]
    [why] = run(state, Settle("x", [[1, "accept", None, 1]]))
    assert why is not None and "delivery 2 (not 1)" in why
    assert records(state)[1].state is MessageState.ACQUIRED
    assert run(state, Settle("x", [[1, "accept", None, 2]])) == [None]
    assert 1 not in records(state)


def test_settling_what_one_does_not_hold_is_answered_per_item() -> None:
    state = VersionedState()
    run(state, Publish(["a", "b"]))
    run(state, Acquire("x", 1, 5.0))
    run(state, Acquire("y", 1, 5.0))
    answers = run(state, Settle("x", [[2, "accept", None], [1, "accept", None], [1, "reject", "twice"], [9, "accept", None]]))
    assert answers[1] is None
    assert all(isinstance(a, str) and "not held" in a for a in (answers[0], answers[2], answers[3]))
    assert set(records(state)) == {2}  # y still holds 2; 1 accepted once, not rejected after


def test_max_deliveries_dead_letters_once_with_reason() -> None:
    state = VersionedState()
    run(state, Publish(["a"], 2))
    for owner in ("x", "y"):
        assert run(state, Acquire(owner, 1, 5.0))[0][2] in (1, 2)
        run(state, Settle(owner, [[1, "release", None]]))
    rec = records(state)[1]
    assert rec.state is MessageState.DEAD and rec.count == 2 and "max_deliveries 2" in (rec.reason or "")
    assert run(state, Acquire("z", 1, 5.0)) == []


def test_an_acquire_hands_over_half_a_records_worth_and_one_message_always() -> None:
    """Its record carries every message twice: past what the broker carries it could not travel
    (before, an acquire of 5 messages of 20 kB on a 100 kB broker tore down the master's endpoint).
    Messages are added while under RECORD_BYTES // 2, so a short answer under it means none is left."""
    state = VersionedState()
    big = "x" * 10_000
    run(state, Publish([big] * 5 + ["small"]))
    assert acquired_cost(big, "x") < RECORD_BYTES // 2 <= 2 * acquired_cost(big, "x")
    for ids in ([1, 2], [3, 4], [5, 6]):
        got = run(state, Acquire("x", 10, 5.0))
        assert [m[0] for m in got] == ids
        cut = sum(acquired_cost(data, "x") for _, data, _ in got) >= RECORD_BYTES // 2
        assert cut == (ids != [5, 6])  # [5, 6]: the last ready ones
    huge = "y" * RECORD_BYTES  # past the budget alone: it goes, alone
    run(state, Publish([huge, huge, "z"]))
    assert [m[0] for m in run(state, Acquire("y", 10, 5.0))] == [7]
    assert [m[0] for m in run(state, Acquire("y", 10, 5.0))] == [8]
    last = run(state, Acquire("y", 10, 5.0))
    assert [m[0] for m in last] == [9] and sum(acquired_cost(d, "y") for _, d, _ in last) < RECORD_BYTES // 2  # dry
    assert run(state, Acquire("y", 10, 5.0)) == []


def test_release_owner_takes_back_a_records_worth_and_keeps_the_lease_until_the_last() -> None:
    state = VersionedState()
    big = "x" * 10_000
    run(state, Publish([big] * 7))
    for _ in range(4):
        run(state, Acquire("x", 10, 5.0))
    assert len(index_for(state).owned["x"]) == 7
    per_record = RECORD_BYTES // settled_cost(big, "lease expired")
    counts = []
    while n := run(state, ReleaseOwner("x", "lease expired", True), wall=WALL + 6.0):
        counts.append(n)
        assert state.exists("lease/x") == (sum(counts) < 7)  # dropped with the last part only
    assert counts == [per_record, 7 - per_record] and per_record < 7
    assert [r.state for r in records(state).values()] == [MessageState.READY] * 7
    assert not state.exists("lease/x")


def _record_size(state: VersionedState, cmd: Any, wall: float = WALL) -> tuple[Any, int]:
    """Apply ``cmd`` as the master would; its answer and the encoded size of its log record."""
    from broker_mqtt.wire import codec

    op, answer = compute_op(state, cmd, wall)
    rec = Record(state.last_seq + 1, (1, "m" * 41), state.last_seq + 1, "o" * 32, "w" * 41, state.last_seq + 1,
                 op, answer)
    state.apply(rec)
    return answer, len(codec.encode(rec.to_wire()))


def test_no_queue_record_passes_record_bytes_with_many_small_messages() -> None:
    """Measured, not estimated: acquire, settle (cut by settled_cost as a consumer cuts), release,
    forget and a reader's commit, over thousands of small messages, each make records of at most
    RECORD_BYTES and the record's slack (before, an acquire of 1,000 made 123 kB, a forget of 10,000 keys 110 kB)."""
    from broker_mqtt.store.writer_core import RECORD_SLACK

    LIMIT = RECORD_BYTES + RECORD_SLACK  # the ops, and the record around them (epoch, ids, stamps)
    owner = "e" * 32 + ".0123abcd"
    state = VersionedState()
    data = ["tag-0", 123456]
    for _ in range(10):
        run(state, Publish([data] * 1000))
    run(state, RegisterReader("r", "oldest"))
    held: list[int] = []
    acquire_sizes = []
    while True:
        got, size = _record_size(state, Acquire(owner, 1000, 30.0))
        if not got:
            break
        held += [m[0] for m in got]
        acquire_sizes.append(size)
    assert len(held) == 10_000 and len(acquire_sizes) > 10 and max(acquire_sizes) <= LIMIT
    # settle in the parts a consumer cuts: a quarter rejected (dead, with a reason), the rest accepted
    # (done: a reader is behind)
    part: list[list[Any]] = []
    room = RECORD_BYTES
    settle_sizes = []
    for i, msg_id in enumerate(held):
        item = [msg_id, "reject" if i % 4 == 0 else "accept", "bad" if i % 4 == 0 else None, 1]
        cost = settled_cost(data, item[2])
        if part and room - cost < 0:
            settle_sizes.append(_record_size(state, Settle(owner, part))[1])
            part, room = [], RECORD_BYTES
        part.append(item)
        room -= cost
    settle_sizes.append(_record_size(state, Settle(owner, part))[1])
    assert max(settle_sizes) <= LIMIT
    # the reader passes every done message: its commit erases MAX_ERASES, sweeps erase the rest
    pointer, size = _record_size(state, CommitReader("r", 10_000))
    assert pointer == 10_000 and size <= LIMIT
    sweeps = []
    while (answer := _record_size(state, Sweep(MAX_ERASES)))[0]:
        sweeps.append(answer)
    assert sum(n for n, _ in sweeps) == 7500 - MAX_ERASES and max(size for _, size in sweeps) <= LIMIT
    assert not index_for(state).done
    # every accepted message's tombstone forgotten, a record's worth at a time
    forgets = []
    while (answer := _record_size(state, Forget(0), wall=WALL + 10))[0]:
        forgets.append(answer)
    assert sum(n for n, _ in forgets) == 7500 and len(forgets) > 1
    assert max(size for _, size in forgets) <= LIMIT


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 3000).map(lambda n: b"x" * n), st.integers(0, 800).map(lambda n: "\u00e9" * n),
                          st.lists(st.integers(), max_size=50)), min_size=100, max_size=400),
       st.lists(st.sampled_from(["accept", "release", "reject", "return"]), min_size=1, max_size=300),
       st.booleans())
def test_every_record_of_random_traffic_fits(data: list[Any], actions: list[str], reader: bool) -> None:
    """Messages of random sizes, acquired by a consumer asking for up to 1,000, settled in the
    parts a consumer cuts with random actions (a log reader behind or not), released: each record
    encodes to at most RECORD_BYTES and the record's slack."""
    from broker_mqtt.store.writer_core import RECORD_SLACK

    owner = "e" * 32 + ".0123abcd"
    state = VersionedState()
    for i in range(0, len(data), 20):  # (a publisher cuts its records: queues, "Sizes")
        run(state, Publish(data[i:i + 20]))
    sizes: list[int] = []
    if reader:
        run(state, RegisterReader("r", "oldest"))
    held: dict[int, Any] = {}
    while got := _record_size(state, Acquire(owner, 1000, 30.0)):
        if not got[0]:
            break
        held.update((m[0], m[1]) for m in got[0])
        sizes.append(got[1])
    assert len(held) == len(data)
    part: list[list[Any]] = []
    room = RECORD_BYTES
    for i, (msg_id, d) in enumerate(sorted(held.items())):
        action = actions[i % len(actions)]
        reason = "bad" if action == "reject" else None
        cost = settled_cost(d, reason)
        if part and room - cost < 0:
            sizes.append(_record_size(state, Settle(owner, part))[1])
            part, room = [], RECORD_BYTES
        part.append([msg_id, action, reason, 1])
        room -= cost
    sizes.append(_record_size(state, Settle(owner, part))[1])
    while got := _record_size(state, Acquire(owner, 1000, 30.0)):  # the released and returned ones
        if not got[0]:
            break
        sizes.append(got[1])
    while (released := _record_size(state, ReleaseOwner(owner, "lease expired")))[0]:
        sizes.append(released[1])
    assert max(sizes) <= RECORD_BYTES + RECORD_SLACK
    assert len(sizes) >= 2


def test_a_message_no_acquire_can_carry_is_dead_lettered_not_a_poison_record() -> None:
    """A peer's publish is not checked against the broker (only WorkQueue.publish checks): a message
    whose acquire record would pass what the master's broker carries (``state.record_limit``) is
    moved to the dead letters, with why, one a record; before, every master's send loop met the
    record and tore its endpoint down."""
    state = VersionedState()
    state.record_limit = 100_000
    run(state, Publish(["a", "x" * 60_000, "y" * 60_000, "b"]))
    assert [m[0] for m in run(state, Acquire("o", 10, 5.0))] == [1]  # cut before 2: first in the next
    assert run(state, Acquire("o", 10, 5.0)) == []  # 2 dead, alone in its record
    assert run(state, Acquire("o", 10, 5.0)) == []  # 3 dead
    assert [m[0] for m in run(state, Acquire("o", 10, 5.0))] == [4]
    dead = {k: r for k, r in records(state).items() if r.state is MessageState.DEAD}
    assert sorted(dead) == [2, 3] and all("too large to deliver" in (r.reason or "") for r in dead.values())
    assert index_for(state).owned["o"] == {1, 4}


def test_a_peers_settle_of_many_messages_it_does_not_hold_stays_under_the_limit() -> None:
    """Each refusal is an answer of text; counted with its head, a settle that would pass the
    limit fails as a whole (516 refusals of 127 characters made 66,699 bytes before)."""
    from broker_mqtt.store.errors import StoreProtocolError
    from broker_mqtt.store.writer_core import RECORD_SLACK

    for n in (400, 516, 1000):
        for first in (0, 2**62):
            state = VersionedState()
            try:
                _answer, size = _record_size(state, Settle("o", [[first + i, "accept", None] for i in range(n)]))
            except StoreProtocolError:
                continue
            assert size <= RECORD_BYTES + RECORD_SLACK, (n, first, size)


def test_a_settle_whose_record_would_pass_record_bytes_fails_whole() -> None:
    """A peer's settle of messages it does not hold: each answer is text; 1,000 of them would make a
    record of about 150 kB. It fails as a whole (nothing changes); one alone always goes."""
    from broker_mqtt.store.errors import StoreProtocolError

    state = VersionedState()
    run(state, Publish(["a"]))
    with pytest.raises(StoreProtocolError, match="settle them in parts"):
        compute_op(state, Settle("o", [[i, "accept", None] for i in range(1, 1001)]), WALL)
    assert run(state, Settle("o", [[1, "accept", None]]))[0].startswith("message 1 not held")


def test_release_owner_honours_a_renewed_lease() -> None:
    state = VersionedState()
    run(state, Publish(["a", "b", "c"]))
    run(state, Acquire("x", 2, 5.0))
    assert run(state, ReleaseOwner("x", "lease expired", True), wall=WALL + 4.0) == 0  # not expired yet
    assert run(state, Renew("x", 5.0), wall=WALL + 4.0) == 2
    assert run(state, ReleaseOwner("x", "lease expired", True), wall=WALL + 6.0) == 0  # renewed to +9
    assert run(state, ReleaseOwner("x", "lease expired", True), wall=WALL + 9.5) == 2
    assert not state.exists("lease/x")
    assert run(state, Renew("x", 5.0)) == 0  # holds nothing: no lease
    assert [r.state for r in records(state).values()] == [MessageState.READY] * 3
    assert run(state, Acquire("y", 1, 5.0)) == [[1, "a", 2]]  # released ones keep their place (id order)


def test_index_kept_incrementally_equals_one_rebuilt_from_the_state() -> None:
    rng = random.Random(7)
    state, follower = VersionedState(), VersionedState()
    held: dict[str, list[int]] = {"x": [], "y": []}
    for step in range(600):
        owner = rng.choice("xy")
        roll = rng.random()
        if roll < 0.35:
            cmd: Any = Publish([step] * rng.randint(1, 3), rng.choice([None, 2, 3]))
        elif roll < 0.6:
            cmd = Acquire(owner, rng.randint(1, 4), 5.0)
        elif roll < 0.9 and held[owner]:
            ids = rng.sample(held[owner], min(len(held[owner]), 3))
            cmd = Settle(owner, [[i, rng.choice(["accept", "release", "reject"]), "r"] for i in ids])
        else:
            cmd = ReleaseOwner(owner, "gone", False)
        op, answer = compute_op(state, cmd, WALL + step)
        rec = Record(state.last_seq + 1, (1, "m"), step + 1, "o", "w", step + 1, op, answer)
        state.apply(rec)
        follower.apply(Record.from_wire(rec.to_wire()))  # a replica applies the same log
        held = {o: sorted(index_for(state).owned.get(o, ())) for o in "xy"}
        idx, fresh = index_for(state), QueueIndex.build(state)
        assert (idx.ready, idx.owned, idx.owner_of, idx.leases, idx.next_id) == (
            fresh.ready, fresh.owned, fresh.owner_of, fresh.leases, fresh.next_id)
        assert idx.first_ready(3) == sorted(fresh.ready)[:3]
    assert dict(follower.items()) == dict(state.items())


# -- over the simulated network of replicas ---------------------------------------------------------------

def test_master_crash_loses_and_doubles_no_accepted_message() -> None:
    """Publisher b and consumer c work through the master a, which crashes; b becomes master.
    Every acknowledged publish is accepted exactly once; no accept is acknowledged twice."""
    net = SimNet(["a", "b", "c"], seed=5)
    net.run(0.5)
    net.tag("a")
    net.run(0.5)
    published: dict[int, list[int]] = {}  # write n -> the numbers it carried
    acquires: set[int] = set()
    settles: dict[int, list[int]] = {}  # write n -> ids it accepts
    accepted: list[int] = []
    id_of_number: dict[int, int] = {}
    seen_b: set[int] = set()
    seen_c: set[int] = set()
    number = 0

    def collect() -> None:
        b, c = net.nodes["b"], net.nodes["c"]
        for n, first in list(b.done.items()):
            if n in published and n not in seen_b:
                seen_b.add(n)
                for i, num in enumerate(published[n]):
                    id_of_number[num] = first + i
        for n, result in list(c.done.items()):
            if n in seen_c:
                continue
            seen_c.add(n)
            if n in acquires and result:
                ids = [i for i, _, _ in result]
                settles[net.write("c", Settle("c.0", [[i, "accept", None] for i in ids]))] = ids
            elif n in settles:
                accepted.extend(i for i, a in zip(settles[n], result, strict=True) if a is None)

    def step() -> None:
        nonlocal number
        batch = [number, number + 1]
        number += 2
        published[net.write("b", Publish(batch))] = batch
        collect()
        acquires.add(net.write("c", Acquire("c.0", 3, 30.0)))
        net.run(0.01)

    for _ in range(60):
        step()
    net.kill("a")
    net.run(0.3)
    net.tag("b")
    for _ in range(60):
        step()
    for _ in range(200):  # drain: no more publishes, keep consuming
        collect()
        if not net.nodes["c"].replica.pending_writes and not records(net.nodes["b"].replica.state):
            break
        acquires.add(net.write("c", Acquire("c.0", 10, 30.0)))
        net.run(0.05)
    net.run(1.0)
    assert net.masters() == ["b"]
    assert len(accepted) == len(set(accepted)), "a message was accepted twice"
    acked_ids = set(id_of_number.values())
    assert len(acked_ids) == len(id_of_number), "two published numbers share an id"
    assert acked_ids and acked_ids <= set(accepted), f"lost: {sorted(acked_ids - set(accepted))[:10]}"
    assert records(net.nodes["b"].replica.state) == records(net.nodes["c"].replica.state) == {}


def test_return_undoes_an_acquire_that_was_never_handed_out() -> None:
    state = VersionedState()
    run(state, Publish(["a"], 1))
    run(state, Acquire("x", 1, 5.0))
    assert run(state, Settle("x", [[1, "return", None]])) == [None]
    rec = records(state)[1]
    assert (rec.state, rec.count) == (MessageState.READY, 0)  # not dead: max_deliveries 1 not used up
    assert run(state, Acquire("y", 1, 5.0)) == [[1, "a", 1]]


def test_a_wrong_index_is_rebuilt_not_trusted() -> None:
    state = VersionedState()
    run(state, Publish(["a", "b"]))
    run(state, Acquire("x", 1, 5.0))
    index_for(state).ready.add(1)  # corrupt it: 1 is acquired by x
    assert run(state, Acquire("y", 2, 5.0)) == [[2, "b", 1]]  # 1 skipped, the index rebuilt
    assert index_for(state).ready == set() and index_for(state).owner_of == {1: "x", 2: "y"}


def test_forget_drops_only_tombstones_older_than_its_age_and_the_index_stays_right() -> None:
    state = VersionedState()

    def at(cmd: Any, wall: float) -> Any:  # the record's HLC is the master's wall clock, as a real one's
        op, answer = compute_op(state, cmd, wall)
        state.apply(Record(state.last_seq + 1, (1, "m"), int(wall * 1_000_000), "o", "w", state.last_seq + 1, op,
                           answer))
        return answer

    first = at(Publish(list(range(6))), 100.0)
    got = at(Acquire("c", 4, 30.0), 100.0)
    at(Settle("c", [[first, "accept", None], [first + 1, "accept", None]]), 110.0)  # erased at 110
    at(Settle("c", [[first + 2, "accept", None]]), 150.0)                           # erased at 150
    assert state.tombstones == 3
    assert at(Forget(60.0), 160.0) == 0       # nothing erased before 100
    assert at(Forget(60.0), 200.0) == 2       # the two erased at 110
    assert state.tombstones == 1 and state.version(first) is None and state.version(first + 2).deleted
    assert at(Forget(60.0), 200.0) == 0       # nothing more: the one erased at 150 is 50 s old
    assert [g[0] for g in got] == [first, first + 1, first + 2, first + 3]
    assert at(Settle("c", [[first + 3, "accept", None]]), 201.0) == [None]
    assert [g[0] for g in at(Acquire("d", 10, 30.0), 202.0)] == [first + 4, first + 5]  # FIFO as before
    assert at(Forget(0), 203.0) == 2          # age 0: every tombstone (first + 2, first + 3)
    assert state.tombstones == 0
    assert index_for(state).next_id == first + 6
    fresh = QueueIndex.build(state)  # the index kept across forgets equals one rebuilt from the state
    assert fresh.ready == index_for(state).ready and fresh.owned == index_for(state).owned


@pytest.mark.parametrize("value", [
    MessageRecord("x").to_wire(), MessageRecord("x", MessageState.ACQUIRED, "o", 1).to_wire(),
    {**MessageRecord("x").to_wire(), "extra": 1}, {**MessageRecord("x").to_wire(), "count": "2"},
    {**MessageRecord("x").to_wire(), "count": "two"}, {**MessageRecord("x").to_wire(), "state": "eaten"},
    {**MessageRecord("x").to_wire(), "state": ["ready"]}, {"data": 1, "state": "ready"}, [1, 2], "ready", 7, None,
])
def test_the_index_reads_a_value_as_a_record_exactly_when_from_wire_does(value: Any) -> None:
    from broker_mqtt.queue.model import record_state

    rec = MessageRecord.from_wire(value)
    assert record_state(value) == (None if rec is None else (rec.state, rec.owner))


def test_a_published_record_is_built_as_to_wire_builds_it() -> None:
    from broker_mqtt.queue.model import published_wire

    for data, m in ((["t", 1], 10), ({"job": 7}, None)):
        assert published_wire(data, m, 5.5) == MessageRecord(data, max=m, published=5.5).to_wire()


def test_an_id_of_an_int_subclass_is_that_message_in_the_masters_index() -> None:
    """An id of an int subclass (an application's own id type) packs as the int, so it settles that
    message; the master's index follows (it did not: the released message stayed out of ``ready``
    and no acquire handed it out until the index was rebuilt)."""

    class Id(int):
        pass

    state = VersionedState()
    assert run(state, Publish(["a", "b"])) == 1
    assert [m[0] for m in run(state, Acquire("c1", 2, 60.0))] == [1, 2]
    assert run(state, Settle("c1", [[Id(1), "release", None]])) == [None]
    idx = index_for(state)
    assert sorted(idx.ready) == sorted(QueueIndex.build(state).ready) == [1]
    assert run(state, Acquire("c2", 2, 60.0)) == [[1, "a", 2]]


@pytest.mark.parametrize("owner", [[1], 5, {"x": 1}])
def test_a_record_a_peer_wrote_with_an_owner_no_consumer_has_stops_nothing(owner: Any) -> None:
    """A peer may put any value into a queue's store: an acquired record whose owner is not a string
    (unhashable, or an int) made every index build raise TypeError, so every later command of the
    queue failed. Now that message is held by nobody the index knows; the others go on."""
    state = VersionedState()
    assert run(state, Publish(["a", "b"])) == 1
    run(state, Put(1, {"data": "a", "state": "acquired", "owner": owner, "count": 1, "max": None, "reason": None}))
    assert run(state, Acquire("c1", 5, 60.0)) == [[2, "b", 1]]
    assert QueueIndex.build(state).owners_of_endpoint("c") == ["c1"]
    assert run(state, ReleaseOwner("c1", "gone")) is not None
    assert run(state, Acquire("c2", 5, 60.0)) == [[2, "b", 2]]


def test_every_change_of_a_record_keeps_its_publish_marker() -> None:
    """The publish marker (the publisher's random number; here, for a publish without one, the
    master's clock) tells two messages given one id in a split apart: it must survive acquire,
    release, return, reject, death by max_deliveries, and accept while a log reader keeps the
    message."""
    state = VersionedState()
    first = run(state, Publish(["a", "b", "c", "d", "e"], max_deliveries=1), 123.25)
    run(state, RegisterReader("r", 0), 124.0)
    run(state, Acquire("o", 5, 30.0), 125.0)
    run(state, Settle("o", [[first, "accept", None], [first + 1, "release", None], [first + 2, "return", None],
                            [first + 3, "reject", "bad"]]), 126.0)
    kept = records(state)
    assert [kept[first + i].state for i in range(5)] == [
        MessageState.DONE, MessageState.DEAD, MessageState.READY, MessageState.DEAD, MessageState.ACQUIRED]
    assert all(rec.published == 123.25 for rec in kept.values())
    assert "p" not in MessageRecord("x").to_wire()  # (a record of an earlier version has none)


@settings(max_examples=200, deadline=None)
@given(data=st.recursive(st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 64) - 1) | st.floats()
                         | st.text(max_size=20) | st.binary(max_size=20),
                         lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                                     max_size=4), max_leaves=12),
       owner_len=st.integers(1, MAX_OWNER), reason=st.text(max_size=MAX_REASON),
       wall=st.floats(0, 1e12) | st.integers(0, (1 << 64) - 1))  # (a clock's marker, or new_marker()'s)
def test_the_size_bounds_of_a_message_in_records_hold(data: Any, owner_len: int, reason: str, wall: float) -> None:
    """What the records' size checks count for a message (published_cost, acquired_cost,
    settled_cost) bounds what its ops encode to, with the largest ids, counts and markers."""
    from broker_mqtt.queue.model import ID_LIMIT, published_wire
    from broker_mqtt.queue.record_sizes import published_cost
    from broker_mqtt.wire import codec
    from broker_mqtt.wire.codec import size_bound

    big = ID_LIMIT - 1
    owner = "o" * owner_len
    published = codec.encode(["put", big, published_wire(data, big, wall), None])
    assert len(published) <= published_cost(size_bound(data))
    moved = [wall, big]  # (the marker of a message a split's merge moved: the largest)
    acquired = MessageRecord(data, MessageState.ACQUIRED, owner, big, big, None, moved).to_wire()
    op_and_answer = codec.encode([["put", big, acquired, None], [big, data, big]])
    assert len(op_and_answer) <= acquired_cost(data, owner)
    dead = MessageRecord(data, MessageState.DEAD, None, big, big, reason, moved).to_wire()
    assert len(codec.encode([["put", big, dead, None], None])) <= settled_cost(data, reason)


@pytest.mark.parametrize("hostile", [["x" * 300_000], float("nan"), float("inf"), True, "p", [1.0, -1], [1.0, 2, 3],
                                     {"a": 1}, 1 << 64, -(1 << 64) - 1, 10 ** 400, [10 ** 400, 2], [1 << 64, 2]])
def test_a_marker_of_another_form_is_not_carried_along(hostile: Any) -> None:
    """A peer's record with a "p" that is no publish marker (a large one would make every record
    that carries the message too large for the broker: a poison record; an int too large for a
    float made the whole record unreadable) loses it on its next change."""
    state = VersionedState()
    run(state, Put(1, {**MessageRecord("x").to_wire(), "p": hostile}))
    run(state, Put("next-id", 2))
    assert MessageRecord.from_wire(state.value(1)).published is None  # type: ignore[union-attr]
    assert [m[0] for m in run(state, Acquire("o", 5, 30.0))] == [1]
    assert "p" not in state.value(1)
    run(state, Settle("o", [[1, "release", None]]))
    assert "p" not in state.value(1)


def test_a_publish_carries_its_marker_and_one_of_an_earlier_version_decodes_without() -> None:
    """The marker travels in the publish (its last field, left out when None: what an earlier
    version sends), and becomes each message's "p"; without one, the master's clock is the marker."""
    mark = new_marker()
    assert 0 <= mark < MARKER_LIMIT and new_marker() != mark
    cmd = Publish(["a", "b"], 3, mark)
    assert decode_command(cmd.to_wire()) == cmd
    earlier = ["queue_publish", ["a"], None]
    assert Publish(["a"]).to_wire() == earlier and decode_command(earlier) == Publish(["a"])
    for bad in (-1, MARKER_LIMIT, 1.5, True, "m", [1]):
        with pytest.raises(StoreDecodeError, match="marker"):
            decode_command(["queue_publish", ["a"], None, bad])
    with pytest.raises(StoreDecodeError, match="elements"):
        decode_command(["queue_publish", ["a"], None, mark, 0])
    state = VersionedState()
    run(state, Publish(["a", "b"], None, mark))
    run(state, Publish(["c"]))
    assert [MessageRecord.from_wire(state.value(i)).published for i in (1, 2)] == [mark, mark]  # type: ignore[union-attr]
    assert MessageRecord.from_wire(state.value(3)).published == WALL  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_the_queues_publishes_each_carry_a_new_marker() -> None:
    sent: list[Any] = []

    async def write(cmd: Any) -> int:
        sent.append(cmd)
        return 1

    publisher = Publisher(write, lambda size: None, None)
    await publisher.publish_many(["x"])
    await publisher.publish_many(["x"])
    assert all(isinstance(c.marker, int) for c in sent) and sent[0].marker != sent[1].marker
