"""``Replica.lag`` (the ``broker_mqtt_store_replica_lag_records`` metric): at the master, how many
records the live replica furthest behind has yet to acknowledge; None elsewhere."""

from __future__ import annotations

from _elected_sim import SimNet

from broker_mqtt.store.commands import Put


def test_lag_counts_what_a_live_replica_has_not_acknowledged() -> None:
    with SimNet(["a", "b", "c"], seed=7) as net:
        net.tag("a")
        net.run(1.0)
        assert net.masters() == ["a"]
        a, b = net.nodes["a"].replica, net.nodes["b"].replica
        assert a.lag == 0 and b.lag is None
        net.pause("c")  # SIGSTOPped: still a member for a while, acknowledges nothing
        for i in range(5):
            net.write("a", Put(f"k{i}", i, None))
        net.run(0.2)
        assert a.lag == 5
        net.resume("c")
        net.run(1.0)
        assert a.lag == 0
