"""A heartbeat vouches only for its sender's own epoch (issue 19, tests/test_attacks_live.py).

A heartbeat's node is its sender (the topic it came on proves that); the epoch it reports names that
epoch's master. A member that reports another node's epoch (a huge term, say) must not fence the
replicas: before the fix every replica adopted epoch (10**9, master) and the master claimed again in
term 10**9 + 1 — repeated, that stops the store.
"""

from __future__ import annotations

from _elected_sim import SimNet

from broker_mqtt.store.commands import Put


def test_a_heartbeat_reporting_another_nodes_epoch_changes_nothing() -> None:
    net = SimNet(["a", "b", "c"], seed=5)
    net.tag("a")
    net.run(1.0)
    a, b, c = (net.nodes[n].replica for n in "abc")
    assert a.is_master and b.master == c.master == a.id
    epoch = a.epoch
    assert epoch is not None
    # b, in its own name, reports a.id's mastership in term 10**9 (as follower and as "master")
    for role in ("follower", "master"):
        hearsay = ["hb", b.id, [10**9, a.id], role, [b.state.last_seq, None], a.id]
        for replica in (a, c):
            replica.handle(hearsay, net.now, sender=b.id.partition(".")[0])
    assert a.epoch == c.epoch == epoch and a.is_master and c.master == a.id and a.max_term == epoch[0]
    n = net.write("c", Put("k", 1))
    net.run(1.0)
    assert net.nodes["c"].done == {n: None} and a.epoch == epoch
    # the master's own heartbeat still tells a replica that missed its claim the new epoch
    own = ["hb", a.id, [epoch[0] + 1, a.id], "master", [a.state.last_seq, None], a.id]
    c.handle(own, net.now, sender=a.id.partition(".")[0])
    assert c.epoch == (epoch[0] + 1, a.id)
