"""Review of the late-``active`` early return (23f8efb): cases where a follower holds records of the
active's epoch, or where the early return skips what the later branches did."""

from __future__ import annotations

from pathlib import Path

from _elected_sim import SimNet, keep_sent

from broker_mqtt.store.commands import Put


def test_a_follower_restarted_from_its_file_past_the_active_catches_up(tmp_path: Path) -> None:
    """A follower restarted from its SQLite file (not verified yet) holds records of the master's
    epoch past the active's position; a late repeat of the active reaches it before any heartbeat."""
    paths = {n: tmp_path / f"{n}.db" for n in "abc"}
    with SimNet(["a", "b", "c"], seed=3, paths=paths) as net:
        actives = keep_sent(net, "active")
        net.tag("a")
        net.run(1.0)
        a = net.nodes["a"].replica
        for i in range(20):
            net.write("a", Put(f"k{i}", i))
        net.run(1.0)
        net.kill("b")
        net.run(0.1)
        b = net.add("b", paths["b"]).replica
        assert b.state.position[1] == a.epoch and not b._verified
        b.handle(actives[-1][1], net.now)
        net._flush("b")
        net.run(30.0)
        assert not b.stale, b._stale_reason
        net.write("a", Put("after", 1))
        net.run(1.0)
        assert net.contents("b") == net.contents("a")


def test_a_late_active_after_the_master_resigned_changes_nothing_that_matters() -> None:
    with SimNet(["a", "b", "c"], seed=4) as net:
        actives = keep_sent(net, "active")
        net.tag("a")
        net.run(1.0)
        for i in range(10):
            net.write("a", Put(f"k{i}", i))
        net.run(1.0)
        b = net.nodes["b"].replica
        net.untag("a")
        net.run(0.05)
        assert b.stale
        b.handle(actives[-1][1], net.now)
        net._flush("b")
        assert b.stale  # following a resigned master, it says it is not current
        net.tag("c")
        net.run(2.0)
        c = net.nodes["c"].replica
        assert c.is_master and not b.stale and b.master == c.id
        n = net.write("b", Put("after", 1))
        net.run(1.0)
        assert n in net.nodes["b"].done
        assert net.contents("a") == net.contents("b") == net.contents("c")


def test_a_follower_holding_a_deposed_masters_tail_gets_the_late_active_then_the_new_master() -> None:
    """b holds a's records past a's durable point (their acks lost), misses c's claim (partitioned),
    then a late repeat of a's active; once healed it takes c's state, without a's unacknowledged tail."""
    with SimNet(["a", "b", "c"], seed=7, durability="all") as net:
        actives = keep_sent(net, "active")
        net.tag("a")
        net.run(1.0)
        a, b, c = (net.nodes[n].replica for n in "abc")
        for i in range(5):
            net.write("a", Put(f"k{i}", i))
        net.run(1.0)
        # c stops hearing a: a's next writes reach b only, and are never acknowledged (durability all)
        net.partition({"a", "b"}, {"c"})
        for i in range(5):
            net.write("a", Put(f"t{i}", i))
        net.run(0.05)
        assert b.state.last_seq > c.state.last_seq and b.state.position[1] == a.epoch
        # a is deposed: c claims, in a group of its own with... a (b cut off)
        net.partition({"a", "c"}, {"b"})
        net.untag("a")
        net.tag("c")
        net.run(3.0)
        old = tuple(actives[0][1][1])
        assert c.is_master and b.epoch == old and b.state.position[1] == old and b._verified and c.epoch > old
        b.handle(actives[0][1], net.now)  # a's active, late
        net._flush("b")
        net.heal()
        net.run(5.0)
        assert c.is_master and b.master == c.id and not b.stale, b._stale_reason
        n = net.write("b", Put("after", 1))
        net.run(2.0)
        assert n in net.nodes["b"].done
        assert net.contents("b") == net.contents("c") == net.contents("a")
