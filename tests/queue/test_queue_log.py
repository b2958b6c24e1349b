"""Tier 1: log readers' sans-io core (broker_mqtt.queue.commands), no event loop.

Retention with 0, 1 and 2 readers; a pointer that advances erases exactly the accepted messages every
reader has passed; removing a reader lets them go; malformed commands are decode errors and a
malformed one sent anyway fails with a clear StoreProtocolError; the master's index stays equal to
one rebuilt from the state.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from test_queue_commands import WALL, records, run

from broker_mqtt.queue import MessageState, UnknownReader
from broker_mqtt.queue.commands import (
    Acquire,
    CommitReader,
    Publish,
    RegisterReader,
    ReleaseOwner,
    RemoveReader,
    Settle,
)
from broker_mqtt.queue.log import raise_for
from broker_mqtt.queue.model import QueueIndex, index_for
from broker_mqtt.store.commands import decode_command
from broker_mqtt.store.errors import StoreDecodeError
from broker_mqtt.store.log_ops import compute_op
from broker_mqtt.store.versioned import Record, VersionedState


def accept_all(state: VersionedState, owner: str = "x") -> None:
    got = run(state, Acquire(owner, 100, 5.0))
    assert run(state, Settle(owner, [[i, "accept", None] for i, _, _ in got])) == [None] * len(got)


def states(state: VersionedState) -> dict[int, MessageState]:
    return {i: r.state for i, r in records(state).items()}


# -- the wire --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cmd", [RegisterReader("audit", "oldest"), RegisterReader("a b", "next"),
                                 CommitReader("audit", 0), CommitReader("audit", 12), RemoveReader("audit")])
def test_reader_commands_round_trip(cmd: Any) -> None:
    assert decode_command(cmd.to_wire()) == cmd


@pytest.mark.parametrize("wire", [
    ["queue_register_reader", "", "oldest"],          # empty name
    ["queue_register_reader", "a/b", "oldest"],       # a '/'
    ["queue_register_reader", "x" * 201, "oldest"],   # too long
    ["queue_register_reader", 7, "oldest"],
    ["queue_register_reader", "a", "latest"],         # unknown start
    ["queue_register_reader", "a"],
    ["queue_commit_reader", "a", -1],
    ["queue_commit_reader", "a", True],
    ["queue_commit_reader", "a", "3"],
    ["queue_commit_reader", "a", 1.5],
    ["queue_commit_reader", "", 1],
    ["queue_remove_reader", None],
    ["queue_remove_reader", "a", "b"],
])
def test_malformed_reader_commands_are_decode_errors(wire: Any) -> None:
    with pytest.raises(StoreDecodeError):
        decode_command(wire)


# -- retention ---------------------------------------------------------------------------------------------

def test_without_readers_accept_erases() -> None:
    state = VersionedState()
    run(state, Publish(["a", "b"]))
    accept_all(state)
    assert records(state) == {}


def test_one_reader_keeps_what_it_has_not_read_and_a_commit_erases_exactly_what_it_passed() -> None:
    state = VersionedState()
    run(state, Publish(["a"]))
    accept_all(state)                                            # 1: erased before the reader exists
    assert run(state, RegisterReader("audit", "oldest")) == [1, True]  # nothing held: from the next id
    run(state, Publish(["b", "c", "d", "e"]))                    # 2..5
    got = run(state, Acquire("x", 3, 5.0))                       # 2, 3, 4
    assert run(state, Settle("x", [[2, "accept", None], [3, "reject", "bad"], [4, "accept", None]])) == [None] * 3
    assert states(state) == {2: MessageState.DONE, 3: MessageState.DEAD, 4: MessageState.DONE,
                             5: MessageState.READY}
    assert records(state)[2].data == "b" and records(state)[2].count == 1 and [g[0] for g in got] == [2, 3, 4]
    assert run(state, CommitReader("audit", 3)) == 3             # erases 2 (done); 3 stays dead
    assert states(state) == {3: MessageState.DEAD, 4: MessageState.DONE, 5: MessageState.READY}
    assert run(state, CommitReader("audit", 5)) == 5             # 4 erased; 5 is not accepted yet
    assert states(state) == {3: MessageState.DEAD, 5: MessageState.READY}
    accept_all(state)                                            # 5: the reader is past it: erased at once
    assert states(state) == {3: MessageState.DEAD}
    assert run(state, CommitReader("audit", 2)) == 5             # never backwards
    assert state.get("reader/audit") == 5


def test_two_readers_erase_only_what_both_passed() -> None:
    state = VersionedState()
    run(state, RegisterReader("a"))
    run(state, RegisterReader("b"))
    run(state, Publish(list("pqrstu")))                          # 1..6
    accept_all(state)
    assert set(states(state).values()) == {MessageState.DONE} and len(states(state)) == 6
    assert run(state, CommitReader("a", 4)) == 4
    assert len(records(state)) == 6                              # b has read nothing
    assert run(state, CommitReader("b", 2)) == 2
    assert sorted(records(state)) == [3, 4, 5, 6]                # both passed 1 and 2
    assert run(state, CommitReader("b", 6)) == 6
    assert sorted(records(state)) == [5, 6]                      # a is at 4
    # a third reader registered now, from the oldest message held, holds 5 and 6 as well
    assert run(state, RegisterReader("c", "oldest")) == [4, True]
    assert run(state, RegisterReader("c", "next")) == [4, False]  # registering again changes nothing
    assert run(state, CommitReader("a", 6)) == 6
    assert sorted(records(state)) == [5, 6]
    assert run(state, RemoveReader("c")) is True
    assert records(state) == {}


def test_remove_reader_lets_retained_messages_go() -> None:
    state = VersionedState()
    run(state, RegisterReader("a"))
    run(state, RegisterReader("b"))
    run(state, Publish(["m1", "m2", "m3"]))
    accept_all(state)
    run(state, CommitReader("b", 1))
    assert run(state, RemoveReader("a")) is True                 # b still holds 2 and 3
    assert sorted(records(state)) == [2, 3]
    assert run(state, RemoveReader("a")) is False
    assert run(state, RemoveReader("b")) is True                 # the last reader: every done message goes
    assert records(state) == {}
    assert not state.exists("reader/a") and not state.exists("reader/b")
    run(state, Publish(["m4"]))
    accept_all(state)
    assert records(state) == {}                                  # no reader: accept erases again


def test_register_next_starts_after_the_last_id_and_oldest_at_the_oldest_held() -> None:
    state = VersionedState()
    run(state, Publish(["a", "b", "c"]))
    run(state, Acquire("x", 1, 5.0))                             # 1 acquired, 2 and 3 ready
    assert run(state, RegisterReader("new", "next")) == [3, True]
    assert run(state, RegisterReader("old", "oldest")) == [0, True]
    assert run(state, RegisterReader("empty-queue-reader", "next")) == [3, True]
    assert index_for(state).readers == {"new": 3, "old": 0, "empty-queue-reader": 3}


def test_caller_trouble_is_answered_and_changes_nothing() -> None:
    state = VersionedState()
    run(state, Publish(["a", "b"]))
    before = dict(state.items())
    unknown = run(state, CommitReader("ghost", 1))
    assert unknown[0] == "unknown-reader" and "ghost" in unknown[1]
    with pytest.raises(UnknownReader, match="no log reader 'ghost'"):
        raise_for(unknown)
    run(state, RegisterReader("r"))
    beyond = run(state, CommitReader("r", 3))                    # only 1 and 2 were published
    assert beyond[0] == "beyond-last" and "last id published is 2" in beyond[1]
    assert dict(state.items()) == {**before, "reader/r": 0}
    assert raise_for(run(state, CommitReader("r", 0))) == 0


def test_a_released_or_dead_message_is_not_erased_by_a_commit() -> None:
    state = VersionedState()
    run(state, RegisterReader("r"))
    run(state, Publish(["a", "b"], 1))
    run(state, Acquire("x", 2, 5.0))
    run(state, ReleaseOwner("x", "gone", False))                 # both dead (max_deliveries 1)
    run(state, CommitReader("r", 2))
    assert states(state) == {1: MessageState.DEAD, 2: MessageState.DEAD}


def test_index_with_readers_kept_incrementally_equals_one_rebuilt_from_the_state() -> None:
    rng = random.Random(11)
    state, follower = VersionedState(), VersionedState()
    most_retained = erased_by_commits = 0
    for step in range(800):
        idx = index_for(state)
        reader = rng.choice(["a", "b", "c"])
        roll = rng.random()
        if roll < 0.25:
            cmd: Any = Publish([step] * rng.randint(1, 3), rng.choice([None, 2]))
        elif roll < 0.45:
            cmd = Acquire("x", rng.randint(1, 4), 5.0)
        elif roll < 0.7 and idx.owned.get("x"):
            ids = rng.sample(sorted(idx.owned["x"]), min(len(idx.owned["x"]), 3))
            cmd = Settle("x", [[i, rng.choice(["accept", "accept", "release", "reject"]), "r"] for i in ids])
        elif roll < 0.78:
            cmd = RegisterReader(reader, rng.choice(["oldest", "next"]))
        elif roll < 0.95:
            cmd = CommitReader(reader, rng.randint(0, idx.next_id - 1))
        else:
            cmd = RemoveReader(reader)
        op, answer = compute_op(state, cmd, WALL + step)
        rec = Record(state.last_seq + 1, (1, "m"), step + 1, "o", "w", step + 1, op, answer)
        state.apply(rec)
        follower.apply(Record.from_wire(rec.to_wire()))
        if isinstance(cmd, (CommitReader, RemoveReader)) and op[0] == "many":
            erased_by_commits += sum(1 for one in op[1] if one[0] == "erase" and isinstance(one[1], int))
        idx, fresh = index_for(state), QueueIndex.build(state)
        assert (idx.ready, idx.owned, idx.readers, idx.done, idx.next_id) == (
            fresh.ready, fresh.owned, fresh.readers, fresh.done, fresh.next_id)
        # the invariant: a done message is one some reader has not read past
        low = idx.low_water()
        assert all(low is not None and i > low for i in idx.done), (step, cmd, low, sorted(idx.done)[:5])
        most_retained = max(most_retained, len(idx.done))
    assert dict(follower.items()) == dict(state.items())
    assert most_retained >= 5 and erased_by_commits >= 5  # the walk did exercise retention and release
