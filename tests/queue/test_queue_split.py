"""A work queue across a healed network split, over the simulated network of elected-store replicas.

Both sides of a split elect a master and each hands out message ids from the counter they held at
the split; the healed histories are merged key by key. Whatever the merge keeps, publishing after it
must not write over a message either side published: the master's next id lies above every id,
message or tombstone, and every log reader's pointer.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from broker_mqtt.queue.commands import Publish
from broker_mqtt.queue.model import NEXT_ID, index_for, reader_key
from broker_mqtt.store.commands import Erase, Put
from broker_mqtt.store.log_ops import compute_op
from broker_mqtt.store.state_merge import merge_histories
from broker_mqtt.store.versioned import Record, VersionedState

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "store"))
from _elected_sim import SimNet  # noqa: E402 - the elected-store simulator lives with its tests

WALL = 1_000.0


def _messages(state: VersionedState) -> dict[int, Any]:
    """Message id -> its data (live messages only)."""
    return {k: v["data"] for k, v in state.items() if isinstance(k, int)}


def _split(net: SimNet, ab: list[str], cd: list[str]) -> None:
    """One master ``a`` for a common history, then a split with ``c`` master of the other side; ``b``
    publishes ``ab`` on its side, then ``d`` publishes ``cd`` on its own (later, so its counter wins
    the merge of ``next-id``); then the heal, with ``c`` the one master."""
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
    n = net.write("b", Publish(["after-1", "after-2"]))
    net.run(1.0)
    assert net.nodes["b"].done[n] == 12  # above every id either side handed out
    after = _messages(state)
    assert after == {**merged, 12: "after-1", 13: "after-2"}
    for name in "abd":
        assert _messages(net.nodes[name].replica.state) == after, name


def _run(state: VersionedState, cmd: Any, epoch: tuple[int, str], hlc: int) -> Any:
    op, answer = compute_op(state, cmd, WALL)
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
