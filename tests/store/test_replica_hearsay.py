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


def test_a_replica_fenced_by_a_claim_only_it_heard_takes_part_again() -> None:
    """A claim that reached one replica only (its claimant died as it sent it, or lost the tag
    before the others heard it) fences that replica in a term the master never saw: it ignores the
    master's epoch and follows no master. The master, which holds the tag, claims again above it
    once the claimant is gone for a while; before, the replica stayed out of the store for good and
    durability "all" answered no write."""
    net = SimNet(["a", "b", "c"], seed=6, durability="all")
    net.tag("a")
    net.run(1.0)
    a, b = net.nodes["a"].replica, net.nodes["b"].replica
    epoch = a.epoch
    assert epoch is not None and a.is_master
    net.kill("c")
    # c's last claim, heard by b alone (the topic proves it came from c's endpoint)
    b.handle(["claim", [epoch[0] + 1, "c.0"], [b.state.last_seq, list(epoch)]], net.now, sender="c")
    assert b.epoch == (epoch[0] + 1, "c.0") and b.master is None
    n = net.write("a", Put("k", 1))
    net.run(10.0)
    assert net.nodes["a"].done == {n: None}  # b took part again, and confirmed it
    assert a.is_master and a.epoch is not None and a.epoch > (epoch[0] + 1, "c.0")
    assert b.epoch == a.epoch and b.master == a.id and net.contents("b") == net.contents("a") == {"k": 1}


def test_the_master_claims_above_a_members_newer_epoch_only_once_it_lasts() -> None:
    """A member fenced in a newer epoch that names no master is usually mid-election (the claimant's
    ``active`` follows within ``claim_timeout``): the master claims above it only once the member
    has reported it for ``claim_timeout + member_timeout``; a member that follows a master in it
    is the master's business, not this one's."""
    net = SimNet(["a", "b", "c"], seed=7)
    net.tag("a")
    net.run(1.0)
    a, b = net.nodes["a"].replica, net.nodes["b"].replica
    epoch = a.epoch
    assert epoch is not None and a.stats.claims == 1
    config = net.config
    net.pause("b")  # b's own heartbeats are held back: a hears what follows only
    newer, pos = [epoch[0] + 1, "c.0"], [b.state.last_seq, list(epoch)]
    following = ["hb", b.id, newer, "follower", pos, "c.0"]
    fenced = ["hb", b.id, newer, "follower", pos, None]
    for hb, seconds in ((following, 5.0), (fenced, config.claim_timeout + config.member_timeout - 0.5)):
        end = net.now + seconds
        while net.now < end:
            a.handle(hb, net.now, sender="b")
            net.run(config.heartbeat)
        assert a.epoch == epoch and a.is_master and a.stats.claims == 1
    for _ in range(4):
        a.handle(fenced, net.now, sender="b")
        net.run(config.heartbeat)
    assert a.stats.claims == 2 and a.epoch is not None and a.epoch[0] == epoch[0] + 2
