"""A work queue across a healed network split, over the simulated network of elected-store replicas.

Both sides of a split elect a master and each hands out message ids from the counter they held at
the split; the healed histories are merged key by key. Whatever the merge keeps, publishing after it
must not write over a message either side published: the master's next id lies above every id,
message or tombstone, and every log reader's pointer; and the master's chores write the counter
back up (``Sweep``), so that log readers, which read up to it, see every message without a publish.
With the queue's resolver (what ``attach_queue`` gives its store), the merge keeps both of two
different messages under one id, the other under a new id.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_mqtt.queue.commands import MAX_ERASES, Acquire, Publish, ReleaseOwner, Settle, Sweep
from broker_mqtt.queue.model import (
    ID_LIMIT,
    NEXT_ID,
    MessageRecord,
    MessageState,
    id_in_use,
    index_for,
    lease_key,
    new_marker,
    reader_key,
)
from broker_mqtt.queue.split_merge import QueueResolver
from broker_mqtt.store.commands import Erase, Put
from broker_mqtt.store.history import Conflict, Version
from broker_mqtt.store.log_ops import compute_op
from broker_mqtt.store.state_merge import merge_histories
from broker_mqtt.store.versioned import Record, VersionedState

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "store"))
from _elected_sim import SimNet  # noqa: E402 - the elected-store simulator lives with its tests

WALL = 1_000.0


def _messages(state: VersionedState) -> dict[int, Any]:
    """Message id -> its data (live messages only)."""
    return {k: v["data"] for k, v in state.items() if isinstance(k, int)}


def _split(net: SimNet, ab: list[str], cd: list[str], between: Any = None) -> None:
    """One master ``a`` for a common history, then a split with ``c`` master of the other side; ``b``
    publishes ``ab`` on its side, then (after ``between()``) ``d`` publishes ``cd`` on its own
    (later, so its counter wins the merge of ``next-id``); then the heal, with ``c`` the one master."""
    net.tag("a")
    first = net.write("a", Publish(["common"]))
    net.run(1.0)
    assert net.nodes["a"].done[first] == 1
    net.partition({"a", "b"}, {"c", "d"})
    net.run(1.5)  # the c/d side forgets the a/b side
    net.tag("c")
    net.run(1.0)
    assert sorted(net.masters()) == ["a", "c"]
    for data in ab:
        net.write("b", Publish([data]))
        net.run(0.02)
    net.run(0.2)
    if between is not None:  # (before c/d's publishes: these are later)
        between()
        net.run(0.2)
    for data in cd:
        net.write("d", Publish([data]))
        net.run(0.02)
    net.run(1.0)
    net.heal()
    net.untag("a")
    net.run(4.0)
    assert net.masters() == ["c"]


def test_publishing_after_a_healed_split_writes_over_no_message_of_either_side() -> None:
    """The c/d side's counter (5) wins the merge of ``next-id`` though the a/b side handed out ids up
    to 11: the next publish must not take id 5, which holds the a/b side's message."""
    net = SimNet(["a", "b", "c", "d"], seed=11)
    ab = [f"ab{i}" for i in range(10)]
    cd = [f"cd{i}" for i in range(3)]
    _split(net, ab, cd)
    state = net.nodes["c"].replica.state
    merged = _messages(state)
    assert state.value(NEXT_ID) == 5  # the premise: the counter went back below ids in use
    assert {merged[i] for i in range(5, 12)} == set(ab[3:])
    assert index_for(state).counter_behind(state)
    n = net.write("b", Publish(["after-1", "after-2"]))
    net.run(1.0)
    assert net.nodes["b"].done[n] == 12  # above every id either side handed out
    after = _messages(state)
    assert after == {**merged, 12: "after-1", 13: "after-2"}
    for name in "abd":
        assert _messages(net.nodes[name].replica.state) == after, name


def _run(state: VersionedState, cmd: Any, epoch: tuple[int, str], hlc: int, wall: float = WALL) -> Any:
    op, answer = compute_op(state, cmd, wall)
    state.apply(Record(state.last_seq + 1, epoch, hlc, epoch[1], "w" + epoch[1], state.last_seq + 1, op, answer))
    return answer


def _copy(state: VersionedState) -> VersionedState:
    out = VersionedState()
    out.replace(state.versions(), last_seq=state.last_seq, lineage=state.lineage, applied=state.applied,
                max_hlc=state.max_hlc)
    return out


def test_the_next_id_after_a_merge_lies_above_erased_ids_and_every_readers_pointer() -> None:
    """An erased id (an accepted message) or a log reader's pointer above the merged counter: a new
    message taking such an id would meet a consumer's late settle of the old one, or lie behind the
    reader's pointer, never read."""
    base = VersionedState()
    _run(base, Publish(["common"]), (1, "m"), 1)
    a, b = _copy(base), _copy(base)
    for i in range(6):
        _run(b, Publish([f"b{i}"]), (2, "b"), 10 + i)  # ids 2..7
    _run(b, Erase(7), (2, "b"), 20)  # (what an accept with no reader does)
    _run(a, Publish(["a0"]), (2, "a"), 100)  # id 2; later, so its counter (3) wins
    parts, _ = merge_histories([a, b], (3, "a"))
    merged = VersionedState()
    merged.replace(**parts)
    assert merged.value(NEXT_ID) == 3 and max(_messages(merged)) == 6
    assert index_for(merged).next_id == 8  # above the erased 7

    _run(b, Put(reader_key("r"), 20), (2, "b"), 30)  # a pointer past every id (a peer wrote it)
    parts, _ = merge_histories([a, b], (3, "a"))
    merged = VersionedState()
    merged.replace(**parts)
    assert index_for(merged).next_id == 21


def test_the_masters_sweep_writes_the_counter_back_above_every_id_in_use() -> None:
    """A log reader reads up to the counter: on a queue idle after the heal it would not see the
    a/b side's messages above the merged counter until someone published."""
    net = SimNet(["a", "b", "c", "d"], seed=11)
    _split(net, [f"ab{i}" for i in range(10)], [f"cd{i}" for i in range(3)])
    state = net.nodes["c"].replica.state
    merged = _messages(state)
    n = net.write("d", Sweep(MAX_ERASES))
    net.run(1.0)
    assert net.nodes["d"].done[n] == 0  # nothing to erase
    for name in "abcd":
        replica_state = net.nodes[name].replica.state
        assert replica_state.value(NEXT_ID) == 12, name
        assert _messages(replica_state) == merged, name
    assert not index_for(state).counter_behind(state)
    n = net.write("d", Sweep(MAX_ERASES))  # nothing more to do: the chores stop sending it
    net.run(1.0)
    assert net.nodes["d"].done[n] == 0 and state.value(NEXT_ID) == 12


def test_ids_no_settlement_can_name_are_not_counted_as_in_use() -> None:
    """A peer's plain writes (an erase of any key leaves a tombstone) must not move every later id
    past what a settlement may name."""
    state = VersionedState()
    _run(state, Publish(["x", "y"]), (1, "m"), 1)
    for cmd in (Erase(ID_LIMIT), Erase(ID_LIMIT + 5), Put(ID_LIMIT + 1, {"data": 1}), Put(reader_key("r"), ID_LIMIT)):
        _run(state, cmd, (1, "m"), state.last_seq + 1)
    assert index_for(state).next_id == 3
    assert _run(state, Publish(["z"]), (1, "m"), state.last_seq + 1) == 3


@pytest.mark.parametrize(("key", "value", "held"), [
    (7, {"data": 1}, 7), (7, None, 7),  # a message, live or erased (its tombstone names it)
    (NEXT_ID, 12, 11), (NEXT_ID, 1, 0), (NEXT_ID, None, 0), (NEXT_ID, True, 0),  # ids below the counter
    (reader_key("r"), 9, 9), (reader_key("r"), None, 0), (reader_key("r"), -1, 0), (reader_key("r"), "x", 0),
    (lease_key("c"), 99.0, 0), ("other", 5, 0), (True, {"data": 1}, 0), (-3, {"data": 1}, 0),
    (ID_LIMIT - 1, None, ID_LIMIT - 1), (ID_LIMIT, None, 0), (NEXT_ID, ID_LIMIT + 1, 0),
    (reader_key("r"), ID_LIMIT, 0),  # no settlement names these: a peer's doing, not counted
])
def test_the_id_a_key_puts_in_use(key: Any, value: Any, held: int) -> None:
    """One rule for the master's next id and the resolver's new ids: what a key holds in use."""
    assert id_in_use(key, value) == held


@given(st.sets(st.integers(min_value=-(1 << 70), max_value=1 << 70), max_size=40),
       st.sets(st.one_of(st.text(max_size=3), st.floats(allow_nan=False), st.booleans(), st.binary(max_size=3)),
               max_size=5),
       st.one_of(st.integers(min_value=24, max_value=1 << 64), st.sampled_from([24, ID_LIMIT, 1 << 64])))
def test_the_largest_erased_int_below_a_bound_is_found_without_decoding(
        ints: set[int], others: set[Any], below: int) -> None:
    state = VersionedState()
    keys = [*ints, *others]
    for i, key in enumerate(keys):
        state.apply(Record(i + 1, (1, "m"), i + 1, "m", "w", i + 1, ("erase", key), None))
    expected = max((k for k in ints if 0 <= k < below), default=None)
    assert state.largest_erased_int(below) == expected


def test_the_largest_erased_int_takes_no_bound_the_encoding_cannot_order() -> None:
    for below in (23, (1 << 64) + 1):
        with pytest.raises(ValueError, match="below must be"):
            VersionedState().largest_erased_int(below)


def test_the_queues_resolver_keeps_both_of_two_messages_given_one_id() -> None:
    """Ids 2-4 went to a/b's ab0-ab2 and to c/d's cd0-cd2: last writer wins kept c/d's only; the
    queue's resolver keeps a/b's under new ids above every id in use (12-14), ready again though
    one was acquired on its side (its consumer, on the other side, cannot settle the new id)."""
    net = SimNet(["a", "b", "c", "d"], seed=11, resolver=QueueResolver())
    ab = [f"ab{i}" for i in range(10)]
    cd = [f"cd{i}" for i in range(3)]

    def acquire_on_the_ab_side() -> None:
        n = net.write("b", Acquire("b.0", 2, 30.0))
        net.run(0.5)
        assert net.nodes["b"].done[n] == [[1, "common", 1], [2, "ab0", 1]]

    _split(net, ab, cd, acquire_on_the_ab_side)
    state = net.nodes["c"].replica.state
    merged = _messages(state)
    assert sorted(merged.values()) == sorted(["common", *ab, *cd])  # nothing lost
    assert [merged[i] for i in (2, 3, 4)] == cd and [merged[i] for i in (12, 13, 14)] == ab[:3]
    moved = MessageRecord.from_wire(state.value(12))
    assert moved is not None and (moved.state, moved.owner, moved.count) == (MessageState.READY, None, 1)
    for name in "abd":
        assert _messages(net.nodes[name].replica.state) == merged, name
    assert sorted(c.key for c in net.nodes["a"].conflicts if c.key != NEXT_ID) == [2, 3, 4]  # still reported
    n = net.write("b", Publish(["after"]))
    net.run(1.0)
    assert net.nodes["b"].done[n] == 15
    got = net.write("a", Acquire("a.0", 20, 30.0))
    net.run(1.0)
    assert sorted(data for _, data, _ in net.nodes["a"].done[got]) == sorted(
        [*ab, *cd, "after"])  # every message ready (but "common", which b.0 holds), ab0 again under 12


def test_the_queues_resolver_keeps_one_message_both_sides_changed() -> None:
    """A message published before the split and acquired on each side is one message: kept once."""
    net = SimNet(["a", "b", "c", "d"], seed=11, resolver=QueueResolver())

    def acquire_on_both_sides() -> None:
        for node in ("b", "d"):
            n = net.write(node, Acquire(f"{node}.0", 1, 30.0))
            net.run(0.5)
            assert net.nodes[node].done[n] == [[1, "common", 1]]

    _split(net, [], [], acquire_on_both_sides)
    state = net.nodes["c"].replica.state
    assert _messages(state) == {1: "common"}
    assert MessageRecord.from_wire(state.value(1)).owner == "d.0"  # type: ignore[union-attr]  # (the later)


def test_the_queues_resolver_keeps_a_message_against_the_erase_of_its_id() -> None:
    """c/d accepted its cd0 (id 2: erased); a/b's ab0, published under the same id, is kept."""
    net = SimNet(["a", "b", "c", "d"], seed=11, resolver=QueueResolver())

    def accept_on_the_cd_side() -> None:
        net.write("d", Publish(["cd0"]))
        net.run(0.5)
        n = net.write("d", Acquire("d.0", 5, 30.0))
        net.run(0.5)
        got = net.nodes["d"].done[n]
        assert [i for i, _, _ in got] == [1, 2]
        n = net.write("d", Settle("d.0", [[2, "accept", None]]))
        net.run(0.5)
        assert net.nodes["d"].done[n] == [None]

    _split(net, ["ab0"], [], accept_on_the_cd_side)
    state = net.nodes["c"].replica.state
    assert _messages(state)[2] == "ab0"


class _Hook(QueueResolver):
    def __init__(self, answer: Any) -> None:
        super().__init__()
        self.answer = answer

    def merged(self, versions: list[tuple[Any, Version]], conflicts: list[Conflict]) -> list[tuple[Any, Version]]:
        out = super().merged(versions, conflicts)
        return self.answer(versions, out)


def _bad_hooks() -> list[Any]:
    return [
        lambda given, out: 1 / 0,  # raises
        lambda given, out: out[len(given):],  # drops what it was given
        lambda given, out: [*out, out[-1]],  # adds a key twice
        lambda given, out: [*out, (99, Version({"data": 1}, 1, "x", 10**9, False, None))],  # a seq of no history
        lambda given, out: [*out, (99, Version(object(), 1, "x", 1, False, None))],  # outside the data model
        lambda given, out: [*out, (99, "not a version")],
    ]


def test_a_merge_hook_that_fails_adds_nothing_and_is_reported() -> None:
    for answer in _bad_hooks():
        base = VersionedState()
        _run(base, Publish(["common"]), (1, "m"), 1)
        a, b = _copy(base), _copy(base)
        _run(a, Publish(["a0"]), (2, "a"), 100)
        _run(b, Publish(["b0"]), (2, "b"), 10)
        refused: list[str] = []
        parts, conflicts = merge_histories([a, b], (3, "a"), resolver=_Hook(answer), refused=refused)
        merged = VersionedState()
        merged.replace(**parts)
        assert _messages(merged) == {1: "common", 2: "a0"}, answer  # last writer wins, nothing added
        assert len(refused) == 1 and "merged() failed" in refused[0]
        assert [c.key for c in conflicts] == [2]


def test_a_moved_message_lands_above_every_log_readers_pointer() -> None:
    """A reader reads only past its pointer: a message moved below it would never be read."""
    base = VersionedState()
    _run(base, Publish(["common"]), (1, "m"), 1)
    a, b = _copy(base), _copy(base)
    _run(b, Publish(["b0"]), (2, "b"), 10)  # id 2
    _run(b, Put(reader_key("r"), 20), (2, "b"), 11)  # (a pointer past every id: a peer wrote it)
    _run(a, Publish(["a0"]), (2, "a"), 100)  # id 2, later
    parts, _ = merge_histories([a, b], (3, "a"), resolver=QueueResolver())
    merged = VersionedState()
    merged.replace(**parts)
    assert _messages(merged) == {1: "common", 2: "a0", 21: "b0"}


def _nested_split(c_hlc: int) -> list[VersionedState]:
    """a/b and c part after "common" (c's master a new epoch); a/b publish m0 (id 2), then a and b
    part: a (the old master, its epoch going on) acquires m0, b (a new epoch) publishes b0 (id 3).
    c publishes c0 under id 2 too, at ``c_hlc`` (before or after a/b's writes)."""
    old = (1, "m")
    base = VersionedState()
    _run(base, Publish(["common"]), old, 1)
    c = _copy(base)
    _run(c, Publish(["c0"]), (2, "c"), c_hlc)
    ab = _copy(base)
    _run(ab, Publish(["m0"]), old, 10)
    a, b = _copy(ab), _copy(ab)
    _run(a, Acquire("x.0", 5, 30.0), old, 20)
    _run(b, Publish(["b0"]), (3, "b"), 30)
    return [a, b, c]


def _one_split_three_ways(c_hlc: int) -> list[VersionedState]:
    """a, b and c part at once, after "common": c's side keeps the old master (its epoch goes on
    past where a and b left it), a and b elect their own; each publishes under id 2."""
    old = (1, "m")
    base = VersionedState()
    _run(base, Publish(["common"]), old, 1)
    a, b, c = _copy(base), _copy(base), _copy(base)
    _run(a, Publish(["a0"]), (2, "a"), 10)
    _run(b, Publish(["b0"]), (3, "b"), 20)
    _run(c, Publish(["c0"]), old, c_hlc)
    _run(c, Publish(["c1"]), old, c_hlc + 1)
    return [a, b, c]


@pytest.mark.parametrize("histories", [_nested_split, _one_split_three_ways])
@pytest.mark.parametrize("c_hlc", [5, 50])
def test_three_diverged_histories_merge_to_one_result_in_any_order(histories: Any, c_hlc: int) -> None:
    """Histories that parted as a tree are merged those that parted last first, each pair against the
    seq where its own histories part: a message two sides share since the first split is one message
    (m0: not moved twice, so not delivered twice), and a message written since a split is never
    taken for a shared one (c0 against b0 under one new id: was lost in some orders). The order of
    the histories changes nothing."""
    results = []
    for order in itertools.permutations(range(3)):
        states = histories(c_hlc)
        parts, conflicts = merge_histories([states[i] for i in order], (9, "z"), resolver=QueueResolver())
        merged = VersionedState()
        merged.replace(**parts)
        messages = _messages(merged)
        assert len(messages) == len(set(messages.values())), (order, messages)  # none twice
        results.append((messages, sorted(c.key for c in conflicts if c.key != NEXT_ID)))
    everything = {"common", "c0", "b0", *(["m0"] if histories is _nested_split else ["a0", "c1"])}
    assert set(results[0][0].values()) == everything  # none lost
    assert all(r == results[0] for r in results), results


def test_the_queues_resolver_keeps_no_state_between_merges() -> None:
    """A merge whose merged() never ran (it failed before, say) leaves nothing for the next one: the
    resolver decides what to move from the merge's conflicts alone."""
    base = VersionedState()
    _run(base, Publish(["common"]), (1, "m"), 1)
    a, b = _copy(base), _copy(base)
    _run(a, Publish(["a0"]), (2, "a"), 100)
    _run(b, Publish(["b0"]), (2, "b"), 10)
    used = QueueResolver()
    used(2, a.version(2), b.version(2))  # type: ignore[arg-type]  # (called, then its merge failed)
    results = []
    for resolver in (used, QueueResolver()):
        parts, _ = merge_histories([_copy(a), _copy(b)], (3, "a"), resolver=resolver)
        merged = VersionedState()
        merged.replace(**parts)
        results.append(_messages(merged))
    assert results[0] == results[1] == {1: "common", 2: "a0", 3: "b0"}


def test_the_queues_resolver_keeps_both_of_two_messages_with_equal_data_given_one_id() -> None:
    """Each side published the same job three times (ids 2-4 on both): six messages, told apart by
    their publish markers, not one message three times (the records were even equal but for the
    marker: no conflict was reported, and three jobs were lost silently)."""
    net = SimNet(["a", "b", "c", "d"], seed=11, resolver=QueueResolver())
    _split(net, ["job"] * 3, ["job"] * 3)
    state = net.nodes["c"].replica.state
    assert sorted(_messages(state).values()) == ["common", *["job"] * 6]
    assert sorted(c.key for c in net.nodes["a"].conflicts if c.key != NEXT_ID) == [2, 3, 4]
    for name in "abd":
        assert _messages(net.nodes[name].replica.state) == _messages(state), name


def test_records_of_an_earlier_version_are_told_apart_by_their_data() -> None:
    """A record without a publish marker (written by an earlier version) is one message with any
    record of equal data, as before markers: not moved."""
    base = VersionedState()
    _run(base, Publish(["common"]), (1, "m"), 1)
    a, b = _copy(base), _copy(base)
    _run(a, Put(2, MessageRecord("job").to_wire()), (2, "a"), 100)  # (an earlier version's publish)
    _run(a, Put(NEXT_ID, 3), (2, "a"), 101)
    _run(b, Publish(["job"]), (2, "b"), 10)
    parts, _ = merge_histories([a, b], (3, "a"), resolver=QueueResolver())
    merged = VersionedState()
    merged.replace(**parts)
    assert _messages(merged) == {1: "common", 2: "job"}


def test_a_heal_in_stages_moves_a_message_once() -> None:
    """a and b share m0 (id 2) since the first split; c gave id 2 to c0. A claim merges a with c
    (m0 moved to a new id, marked with the id it was published under), and a later one merges
    that with b, which answered late: b's m0 is the message moved already, not moved again
    (it was: delivered twice; a review's find). The same in one claim of all three."""
    old = (1, "m")
    base = VersionedState()
    _run(base, Publish(["common"]), old, 1)
    c = _copy(base)
    _run(c, Publish(["c0"]), (2, "c"), 50, wall=2000.0)
    ab = _copy(base)
    _run(ab, Publish(["m0"]), old, 10, wall=1001.0)
    a, b = _copy(ab), _copy(ab)
    _run(b, Publish(["b0"]), (3, "b"), 30, wall=1002.0)

    def merged(states: list[VersionedState], epoch: tuple[int, str]) -> VersionedState:
        parts, _ = merge_histories(states, epoch, resolver=QueueResolver())
        out = VersionedState()
        out.replace(**parts)
        return out

    first = merged([a, c], (4, "a"))
    assert _messages(first) == {1: "common", 2: "c0", 3: "m0"}
    assert MessageRecord.from_wire(first.value(3)).published == [1001.0, 2]  # type: ignore[union-attr]
    staged = merged([first, b], (5, "a"))
    assert _messages(staged) == {1: "common", 2: "c0", 3: "b0", 4: "m0"}  # (b0 was later than moved m0)
    assert MessageRecord.from_wire(staged.value(4)).published == [1001.0, 2]  # type: ignore[union-attr]
    assert sorted(_messages(merged([a, b, c], (9, "z"))).values()) == ["b0", "c0", "common", "m0"]


def test_a_message_whose_owners_lease_the_merge_erased_is_taken_back() -> None:
    """x holds n since before the split. On the old master's side x acquires m too (its lease
    written again); on the other side, later, x's lease runs out: n is released and the lease
    erased. The merge keeps m acquired by x (only that side wrote it) and the erase of the lease
    (the later write): an owner holding a message with no lease. The master's chores release only
    expired leases, so m stayed acquired for ever while x's consumer lived (bench/chaos.py's
    drain: a message never delivered again, its consumer alive). An owner without a lease is
    expired: the master takes m back."""
    old = (1, "m")
    base = VersionedState()
    _run(base, Publish(["n", "m"]), old, 1)
    assert _run(base, Acquire("x", 1, 5.0), old, 2) == [[1, "n", 1]]
    ab, cd = _copy(base), _copy(base)
    assert _run(ab, Acquire("x", 1, 5.0), old, 10, wall=WALL + 1) == [[2, "m", 1]]
    assert _run(cd, ReleaseOwner("x", "lease expired", True), (2, "c"), 50, wall=WALL + 6) == 1
    parts, _ = merge_histories([ab, cd], (3, "c"), resolver=QueueResolver())
    merged = VersionedState()
    merged.replace(**parts)
    idx = index_for(merged)
    assert merged.value(lease_key("x")) is None and idx.owned == {"x": {2}}  # the premise
    assert idx.expired_owners(WALL + 7) == ["x"]
    assert _run(merged, ReleaseOwner("x", "lease expired", True), (3, "c"), 60, wall=WALL + 7) == 1
    assert MessageRecord.from_wire(merged.value(2)).state is MessageState.READY  # type: ignore[union-attr]
    assert _run(merged, Acquire("y", 2, 5.0), (3, "c"), 61, wall=WALL + 8) == [[1, "n", 2], [2, "m", 2]]


def test_an_owner_is_expired_when_its_lease_ran_out_not_before() -> None:
    state = VersionedState()
    _run(state, Publish(["a", "b"]), (1, "m"), 1)
    _run(state, Acquire("x", 1, 5.0), (1, "m"), 2, wall=WALL)
    _run(state, Acquire("y", 1, 9.0), (1, "m"), 3, wall=WALL)
    idx = index_for(state)
    assert idx.expired_owners(WALL + 4.9) == []
    assert idx.expired_owners(WALL + 5.0) == ["x"]
    assert idx.expired_owners(WALL + 9.0) == ["x", "y"]


def test_two_masters_whose_clocks_agree_keep_both_of_two_equal_messages() -> None:
    """Both sides' masters stamped their publishes alike (clocks behind the old master's stamps
    both count up from the last one: equal stamps, equal walls) and gave one id to the same job:
    two messages, told apart by the publishers' random markers (markers from the masters' clocks
    were equal: one job lost, unreported). The same publish applied on both sides under one id (a
    writer re-sent it to the other side's master) is one message."""
    base = VersionedState()
    _run(base, Publish(["common"]), (1, "m"), 1)
    a, b = _copy(base), _copy(base)
    _run(a, Publish(["job"], None, new_marker()), (2, "a"), 100, wall=1001.0)
    _run(b, Publish(["job"], None, new_marker()), (2, "b"), 100, wall=1001.0)
    parts, _ = merge_histories([a, b], (3, "a"), resolver=QueueResolver())
    merged = VersionedState()
    merged.replace(**parts)
    assert sorted(_messages(merged).values()) == ["common", "job", "job"]

    same = Publish(["job"], None, new_marker())
    a, b = _copy(base), _copy(base)
    _run(a, same, (2, "a"), 100, wall=1001.0)
    _run(b, same, (2, "b"), 120, wall=1003.0)
    parts, _ = merge_histories([a, b], (3, "a"), resolver=QueueResolver())
    merged.replace(**parts)
    assert _messages(merged) == {1: "common", 2: "job"}
