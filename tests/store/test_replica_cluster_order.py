"""Orders a clustered broker may deliver that one broker hardly does (``test_elected_fuzz_topics.py``).

A deposed master that wakes from a pause and meets a newer history before it hears of the claim
that deposed it (the claimant's messages reach it after another member's heartbeat: a clustered
broker orders messages per sender and topic only) claims again to merge that history. Before, it
announced the writes it had just applied, as a master acknowledging nobody (its own tail past the
durable point), as part of its history: the merge took them over the new master's acknowledged
writes (a put undone by an older value, a queue's message handed out twice: test_queue_fuzz_topics
seed 80 with stalls). It now drops that tail for the next master's snapshot, as it does when deposed.
"""

from __future__ import annotations

from _elected_sim import SimNet

from broker_mqtt.store.commands import Put


def test_a_woken_master_meeting_a_newer_history_first_merges_nothing_it_alone_applied() -> None:
    with SimNet(["a", "b", "c"], seed=11) as net:
        net.tag("c")
        net.run(1.0)
        net.pause("c")  # SIGSTOP while master
        old = net.write("a", Put("x", "old"))  # for c: waits for it
        net.tag("b")  # the election moves the tag on (c does not know)
        net.run(3.0)  # b claims; a sends "old" again to b, which applies it
        new = net.write("a", Put("x", "new"))
        net.run(1.0)
        assert net.nodes["a"].done == {old: None, new: None}
        assert [net.contents(n)["x"] for n in "ab"] == ["new", "new"]
        # c wakes: the cluster delivers a's messages (its write, its heartbeats in b's epoch) before
        # b's (its claim, its active, its log)
        c = net.nodes["c"]
        assert c.paused is not None
        c.paused.sort(key=lambda item: item[0] == "b")  # (stable: each sender's order kept)
        net.resume("c")  # applies "old" as master of its epoch, then meets b's history: claims
        net.untag("c")  # the election takes the tag it lost
        net.run(8.0)
        assert net.masters() == ["b"]
        assert [net.contents(n)["x"] for n in "abc"] == ["new", "new", "new"]
