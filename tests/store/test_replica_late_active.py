"""A late repeat of the current master's ``active`` (a clustered broker's backlog, a QoS 1 redelivery)
reaches a follower that already applied records of that master's epoch: it changes nothing.

Found by tracing queue topics fuzz seed 1103: a late duplicate of master 2c's ``active`` (its position
at the claim, 108) reached a follower at 126 in epoch 2c. The position it announces does not hold the
follower's (the follower is past it), so the follower took its own history for a diverged one and
marked itself stale ("history diverged: waiting for the master to merge it") until the next claim,
while it went on applying the master's log (``store.stale`` true and ``await_idle`` waiting for
seconds, for nothing).
"""

from __future__ import annotations

from _elected_sim import SimNet, keep_sent

from broker_mqtt.store.commands import Put


def test_a_late_repeat_of_the_masters_active_leaves_a_follower_that_is_past_it_current() -> None:
    with SimNet(["a", "b", "c"], seed=3) as net:
        actives = keep_sent(net, "active")
        net.tag("a")
        net.run(1.0)
        a, b = net.nodes["a"].replica, net.nodes["b"].replica
        assert a.is_master and actives and actives[-1][0] == "a"
        for i in range(20):
            net.write("a", Put(f"k{i}", i))
        net.run(1.0)
        assert b.state.position[1] == a.epoch and b.state.last_seq > actives[-1][1][2][0]  # past the active's position
        assert not b.stale
        b.handle(actives[-1][1], net.now)  # the late repeat
        net._flush("b")
        assert not b.stale, b._stale_reason
        n = net.write("b", Put("after", 1))
        net.run(1.0)
        assert n in net.nodes["b"].done and not b.stale
        assert net.contents("b") == net.contents("a") == {**{f"k{i}": i for i in range(20)}, "after": 1}
