"""What a claimant fetches (docs/elected-stores.md § 3, § 6), found by ops fuzz seed 96: after a merge,
replicas left behind at the histories it merged (under lost messages their snapshots from each new
master kept starting over) were fetched and merged again by every later claim, and each claim's
snapshot fetches started over in a new epoch at the first lost chunk: no claim ended for 30 s, writes
failed ``NoMaster``, and keys erased on the merged line (tombstones forgotten since) could come back.
"""

from __future__ import annotations

from typing import Any

from _elected_sim import SimNet, drop_acks

from broker_mqtt.store.commands import Erase, Put
from broker_mqtt.store.replication import ReplicaConfig


def test_a_history_a_merge_subsumed_is_not_merged_again_while_the_merged_line_is_there() -> None:
    """d stays at the history of its side of a split (cut off while the split heals and a merges,
    and while the merged line erases ``gone`` and forgets its tombstone); then b claims with d back.
    b holds the merge, which holds d's history: b takes nothing from d (d takes b's state), and
    ``gone`` stays erased. Before, b merged d's history again: ``gone`` came back."""
    config = ReplicaConfig(tombstone_ttl=0.5)
    with SimNet(["a", "b", "c", "d"], seed=5, config=config) as net:
        net.tag("a")
        net.run(1.0)
        net.write("a", Put("gone", 1))
        net.run(0.5)
        net.partition({"a", "b"}, {"c", "d"})
        net.untag("a")
        net.tag("a")
        net.tag("c")
        net.run(3.0)
        net.write("a", Put("x", "a"))
        net.write("c", Put("y", "c"))
        net.run(1.0)
        d = net.nodes["d"].replica
        assert d.state.position == net.nodes["c"].replica.state.position
        net.partition({"a", "b", "c"}, {"d"})  # healed, d left out
        net.untag("c")
        net.run(4.0)
        assert net.masters() == ["a"] and net.nodes["a"].replica.stats.merges == 1
        assert {k: net.contents(n).get(k) for n in "abc" for k in "xy"} == {"x": "a", "y": "c"}
        net.write("b", Erase("gone"))
        net.run(3.0)  # the tombstone is forgotten (past 1.25 ttl)
        assert all("gone" not in dict(net.nodes[n].replica.state.versions()) for n in "abc")
        b = net.nodes["b"].replica
        merges = b.stats.merges
        net.heal()
        net.untag("a")
        net.tag("b")  # d promises its old history to b's claim
        net.run(6.0)
        assert net.masters() == ["b"]
        for n in "abcd":
            assert net.contents(n) == {"x": "a", "y": "c"}, n
        assert b.stats.merges == merges  # nothing merged: d's history was merged already


def test_a_claims_snapshot_fetch_resumes_after_a_lost_chunk() -> None:
    """c, behind by more than the master's log, claims and fetches a's state by snapshot, one chunk
    at a time; one chunk is lost. c asks again from what it holds and becomes master in the epoch
    it claimed. Before, the stalled fetch started the claim over in a new epoch (and under steady
    loss no claim fetching many chunks ever ended)."""
    config = ReplicaConfig(snapshot_chunk=64, snapshot_window=1, log_keep=8)
    with SimNet(["a", "b", "c"], seed=7, config=config) as net:
        net.tag("a")
        net.run(1.0)
        net.partition({"a", "b"}, {"c"})
        for i in range(30):
            net.write("a", Put(f"k{i}", i))
        net.run(1.0)
        c = net.nodes["c"].replica
        behind = c.state.last_seq
        sent = net._send
        chunks: list[Any] = []

        def lossy(name: str, msg: Any, receivers: set[str] | None = None) -> None:
            if name == "a" and msg[0] == "schunk" and msg[1][1] == "c.0" and msg[2] == "c.0":  # c's claim's
                chunks.append(msg)
                if len(chunks) == 3:
                    return  # lost
            sent(name, msg, receivers)

        net._send = lossy  # type: ignore[method-assign]
        net.heal()
        net.run(0.3)  # c hears a (and starts to catch up)
        net.untag("a")
        net.tag("c")
        claims = c.stats.claims
        epoch = c.epoch
        assert epoch is not None and epoch[1] == "c.0"
        net.run(15.0)
        assert len(chunks) > 10  # (the snapshot came in chunks, the third lost)
        assert c.state.last_seq > behind
        assert net.masters() == ["c"]
        assert c.epoch == epoch and c.stats.claims == claims
        assert net.contents("c") == {f"k{i}": i for i in range(30)}


def test_a_replica_past_a_dropped_tail_that_acknowledged_it_there_is_merged_not_left_out() -> None:
    """Review of 090d3fc. n is master; b writes ``w2``, which n applies and logs to b and r only
    (a and d cut off) while every ``ack`` is lost: not durable. a claims without b and r: n promises
    up to its durable point (before ``w2``), so a announces n's dropped tail (n's lineage, unbounded);
    a writes ``x``, d claims and holds the position a merge-less claim names (``subsumed_at``, in a's
    epoch). Meanwhile b claims on its side with r, takes over the history holding ``w2`` and answers
    b's writer: ``w2`` is acknowledged there, at a seq of n's epoch past n's durable point (b writes
    nothing of its own epoch). Healed, d claims and b promises: b's history lies inside n's
    unbounded dropped tail and does not hold d's ``subsumed_at``, but it holds an acknowledged write d
    lacks. It must be merged (as before 090d3fc), not left out: left out, b and r took d's state and
    ``w2``, acknowledged, was lost."""
    with SimNet(["n", "a", "b", "d", "r"], seed=1) as net:
        net.tag("n")
        net.run(1.0)
        net.write("n", Put("k1", 1))
        net.run(0.5)
        drop = drop_acks(net)
        net.partition({"n", "b", "r"}, {"a", "d"})
        w2 = net.write("b", Put("w2", 2))
        net.run(0.2)
        assert net.contents("r") == {"k1": 1, "w2": 2} and net.nodes["n"].replica._durable_seq == 1
        net.partition({"n", "a", "d"}, {"b", "r"})
        net.untag("n")
        net.tag("a")
        net.run(4.0)
        drop["acks"] = False
        net.write("a", Put("x", "a"))
        net.run(0.5)
        net.untag("a")
        net.tag("d")
        net.run(4.0)
        net.tag("b")
        net.run(4.0)
        assert net.masters() == ["b", "d"] or sorted(net.masters()) == ["b", "d"]
        assert w2 in net.nodes["b"].done  # acknowledged by b, master of its own epoch
        net.untag("b")
        net.untag("d")
        net.heal()
        net.tag("d")  # b and r promise to d's claim
        net.run(8.0)
        assert net.masters() == ["d"]
        for name in "nabdr":
            assert net.contents(name) == {"k1": 1, "x": "a", "w2": 2}, (name, net.contents(name))


def test_a_dropped_tail_is_not_carried_into_a_later_merge() -> None:
    """Review of 090d3fc (the merge's carry-over). As above, n's unbounded dropped tail is announced
    on a's side while b, on its own side, takes over the history past n's durable point and
    acknowledges ``w2`` there; then d (master after a) merges a third side's history (e, f). The merge
    carries over the histories an earlier merge subsumed, but not n's dropped tail: b, coming back
    as a follower, is a diverged history the master merges (as before 090d3fc), not one at a
    subsumed history that takes the merged state and loses ``w2``."""
    with SimNet(["n", "a", "b", "d", "r", "e", "f"], seed=1) as net:
        net.tag("n")
        net.run(1.0)
        net.write("n", Put("k1", 1))
        net.run(0.5)
        drop = drop_acks(net)
        net.partition({"n", "b", "r"}, {"a", "d"}, {"e", "f"})
        w2 = net.write("b", Put("w2", 2))
        net.run(0.2)
        net.partition({"n", "a", "d"}, {"b", "r"}, {"e", "f"})
        net.untag("n")
        net.tag("a")
        net.tag("e")
        net.run(4.0)
        drop["acks"] = False
        net.write("a", Put("x", "a"))
        net.write("e", Put("e1", "e"))
        net.run(0.5)
        net.untag("a")
        net.tag("d")
        net.run(4.0)
        net.tag("b")
        net.run(4.0)
        assert w2 in net.nodes["b"].done  # acknowledged by b, master of its own epoch
        net.untag("e")
        net.partition({"n", "a", "d", "e", "f"}, {"b", "r"})
        net.run(6.0)
        d = net.nodes["d"].replica
        assert net.masters() == ["b", "d"] and d.stats.merges >= 1
        net.untag("b")
        net.heal()
        net.run(8.0)
        assert net.masters() == ["d"]
        for name in "nabdref":
            assert net.contents(name) == {"k1": 1, "x": "a", "e1": "e", "w2": 2}, (name, net.contents(name))
