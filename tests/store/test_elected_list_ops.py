"""An elected store's ``push`` and ``pop`` travel as the item, not as the whole list (sans-io).

Before, a push was logged as a ``put`` of the list with the item appended: every push onto a list of
n items sent, logged and kept n items, so a long list made each write O(n) in the log, on the wire
and in what the garbage collector walks (the log keeps ``log_keep`` ops). The master now logs
``["push", key, item, expiry]`` / ``["pop", key, expiry]`` when the key holds a list, and every replica
applies them to the same state, so the lists stay identical, whether a replica follows the log, catches
up from another's log tail, or reopens its SQLite file.
"""

from __future__ import annotations

from typing import Any

import pytest
from _elected_sim import SimNet

from broker_mqtt.store.commands import Pop, Push, Put
from broker_mqtt.store.errors import NoSuchKey, TypeClash
from broker_mqtt.store.log_ops import compute_op
from broker_mqtt.store.packing import pack
from broker_mqtt.store.replication import ReplicaConfig
from broker_mqtt.store.versioned import Record, VersionedState


def _ops(net: SimNet, name: str) -> list[tuple[Any, ...]]:
    """From now on, every op ``name``'s replica applies (a ``many``'s parts one by one)."""
    state = net.nodes[name].replica.state
    seen: list[tuple[Any, ...]] = []
    apply = state.apply

    def recording(record: Record, *, report: bool = True) -> Any:
        seen.extend(record.op[1] if record.op[0] == "many" else [record.op])
        return apply(record, report=report)

    state.apply = recording  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize("persistent", [False, True])
def test_pushes_and_pops_log_the_item_and_every_replica_holds_the_same_list(tmp_path: Any, persistent: bool) -> None:
    names = ["a", "b", "c"]
    paths = {n: tmp_path / f"{n}.db" for n in names} if persistent else None
    with SimNet(names, seed=5, paths=paths) as net:
        seen = {n: _ops(net, n) for n in names}
        net.tag("a")
        net.run(1.0)
        expected: list[Any] = []
        for i in range(300):  # one writer's writes are applied in its order
            net.write("b", Push("l", {"i": i}))
            expected.append({"i": i})
            net.write("c", Push("m", i))
            if i % 7 == 6:
                net.write("b", Pop("l"))
                expected.pop()
        net.write("b", Put("s", "text"))
        net.write("b", Push("s", 1))  # not a list: refused, nothing logged but a noop
        net.write("c", Pop("missing"))  # no such key: refused
        net.run(2.0)
        for n in names:
            assert net.contents(n)["l"] == expected, n
            assert net.contents(n)["m"] == list(range(300)), n
            assert net.contents(n)["s"] == "text", n
            assert net.nodes[n].replica.state.last_seq == net.nodes["a"].replica.state.last_seq
        ops = [op for op in seen["b"] if op[0] != "noop"]
        firsts = [op for op in ops if op[0] == "put" and op[1] in ("l", "m")]
        assert firsts == [("put", k, [v], None) for k, v in (("l", {"i": 0}), ("m", 0))] or firsts == [
            ("put", k, [v], None) for k, v in (("m", 0), ("l", {"i": 0}))]  # a missing key: its one-item list
        assert {op[0] for op in ops if op[1] in ("l", "m")} == {"put", "push", "pop"}
        assert max(len(pack(list(op))) for op in ops) < 40  # no op carries the list
        assert seen["b"] == seen["c"] == seen["a"]
        if paths is not None:
            net.close()
            for n in names:
                net.add(n, paths[n])  # reopened from its file
                assert net.contents(n)["l"] == expected and net.contents(n)["m"] == list(range(300)), n


def test_a_replica_catching_up_from_a_log_tail_replays_the_pushes() -> None:
    with SimNet(["a", "b"], seed=6, config=ReplicaConfig(log_keep=10_000)) as net:
        net.tag("a")
        net.run(1.0)
        for i in range(20):
            net.write("b", Push("l", i))
        net.run(1.0)
        net.add("c")  # a new replica: fetches the store
        net.run(1.0)
        for i in range(20, 40):
            net.write("a", Push("l", i))
        net.write("a", Pop("l"))
        net.run(2.0)
        assert [net.contents(n)["l"] for n in "abc"] == [list(range(39))] * 3


def test_compute_op_checks_what_the_key_holds_as_before() -> None:
    state = VersionedState()
    assert compute_op(state, Push("k", 1, expiry=5.0), 100.0) == (("put", "k", [1], 105.0), None)
    with pytest.raises(NoSuchKey):
        compute_op(state, Pop("k"), 100.0)
    state.apply(Record(1, (1, "m"), 1, "m", "w", 1, ("put", "k", [1], None)))
    assert compute_op(state, Push("k", 2), 100.0) == (("push", "k", 2, None), None)
    assert compute_op(state, Pop("k"), 100.0) == (("pop", "k", None), None)
    state.apply(Record(2, (1, "m"), 2, "m", "w", 2, ("push", "k", 2, None)))
    state.apply(Record(3, (1, "m"), 3, "m", "w", 3, ("push", "k", 3, 200.0)))
    assert state.get("k") == [1, 2, 3] and state.version("k").expiry == 200.0  # the op's expiry, like a put's
    state.apply(Record(4, (1, "m"), 4, "m", "w", 4, ("pop", "k", None)))
    assert state.get("k") == [1, 2]
    state.apply(Record(5, (1, "m"), 5, "m", "w", 5, ("put", "t", "text", None)))
    with pytest.raises(TypeClash):
        compute_op(state, Push("t", 1), 100.0)
