"""Elected-store replicas fuzzed in simulated time: random writes under random faults, then the
guarantees of ``docs/elected-stores.md`` checked once the election has settled.

Each case is one seed: 4 or 5 replicas, durability ``one`` or ``all``, and a schedule drawn from
``random.Random(seed)`` of episodes, each one fault under a stream of writes at random replicas:

* a forced migration (the master untagged, another node tagged);
* a follower killed, or the master killed and another node tagged after a while;
* a follower or the master paused (SIGSTOP; a master paused long enough loses the tag to another
  node, and is untagged when it resumes);
* a partition in two sides, one side possibly electing its own master (a split);
* a spell of lost messages.

Each episode ends with a recovery, the election's part played as the docs ask: messages flow
again, paused nodes resume, a killed node restarts empty (a new writer id, as a new process), and
after a split every tag is dropped, the sides hear each other for longer than ``member_timeout``
and then one node is tagged. So at most one replica is lost per episode, which ``one`` survives.
Then a quiet phase: everything healed and resumed, one node tagged, long enough to converge.

The writes: a ``put`` of a fresh key each (so an acknowledged put must be found exactly), a
``put_unique`` of a fresh key each, and in cases with neither partitions nor lost messages an
``increment`` of one counter (exactly once: never more than attempted, never fewer than
acknowledged). A split merges a counter per key (last writer wins), and so may a claim that missed
a promise (``docs/elected-stores.md`` § 6 and § 10): there only the upper bound holds. A claim
misses a promise that comes later than ``claim_timeout`` (test_elected_fuzz_topics' long stalls),
so a case without splits can merge too: the increments such a merge drops (those of the diverged
histories whose counter it did not keep: ``FuzzNet.merge_lost``, by writer and write number) are
exempt from the lower bound, and the acknowledged keys are still checked (the merge keeps them).
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import pytest
from _elected_sim import Node, SimNet, fresh_state

from broker_mqtt.store.commands import Increment, Put, PutUnique
from broker_mqtt.store.errors import AnswerForgotten
from broker_mqtt.store.record_log import RecordLog
from broker_mqtt.store.replication import Replica
from broker_mqtt.store.versioned import Clock, Record

#: the seeds the suite runs (0..119: 2, 30, 38, 39, 69 and 95 found a deposed master's records sent
#: in a newer epoch); ``BROKER_MQTT_FUZZ_SEEDS=1000`` runs more (seeds 0..799 passed on 2026-11-29)
SEEDS = range(int(os.environ.get("BROKER_MQTT_FUZZ_SEEDS", "120")))
COUNTER = "counter"
EPISODE_KINDS = ("migrate", "kill_follower", "kill_master", "pause_follower", "pause_master", "partition", "loss")
SAFE_KINDS = ("migrate", "kill_follower", "kill_master", "pause_follower", "pause_master")  # no merges


class FuzzNet(SimNet):
    """A SimNet whose restarted nodes get a new writer id (``name.generation``), as a new process
    does: the same id would make the master take the new process's writes 1, 2, ... for repeats."""

    def __init__(self, names: list[str], **kwargs: Any) -> None:
        self.generations: dict[str, int] = {}
        #: every increment of the counter a master applied: epoch -> seq -> (value, (writer, n))
        self.ledger: dict[Any, dict[int, tuple[int, tuple[str, int]]]] = {}
        #: the increments each merge's line of history starts from (its epoch -> value -> write)
        self.merge_bases: dict[Any, dict[int, tuple[str, int]]] = {}
        #: the increments merges dropped: those of the diverged histories whose counter lost (§ 6)
        self.merge_lost: set[tuple[str, int]] = set()
        super().__init__(names, **kwargs)

    def watch(self, replica: Replica) -> Replica:
        """Note ``replica``'s increments as its master side applies them (:attr:`ledger`) and what
        its merges drop (:attr:`merge_lost`)."""
        ledger = self.ledger

        class Ledger(RecordLog):
            __slots__ = ()

            def append(self, record: Record) -> None:
                if replica.is_master and record.op[1:2] == (COUNTER,):
                    ledger.setdefault(record.epoch, {})[record.seq] = (record.op[2], (record.writer, record.n))
                super().append(record)

        replica._log = Ledger(replica._log.keep)
        finish = replica._finish_claim

        def finish_claim(claim: Any, now: float) -> None:
            if not claim.fetched:
                return finish(claim, now)
            states = [*([replica.state] if claim.merge_self else []), *claim.fetched.values()]
            incs = [self.counter_increments(state.lineage, state.last_seq) for state in states]
            versions = [state.version(COUNTER) for state in states]
            state, taken = replica.state, []
            replace = state.replace

            def replaced(*args: Any, **kwargs: Any) -> Any:  # the merge's counter (before the writes held)
                changes = replace(*args, **kwargs)
                taken.append(state.version(COUNTER))
                return changes

            state.replace = replaced  # type: ignore[method-assign]
            try:
                finish(claim, now)
            finally:
                del state.replace
            merged = taken[0]
            # the history whose counter the merge kept (last writer wins: its version as it was)
            chosen = next((incs[i] for i, v in enumerate(versions) if v is not None and merged is not None
                           and (v.value, v.hlc) == (merged.value, merged.hlc)), {})
            assert merged is None or chosen, f"a merge made counter {merged} out of {versions}"
            self.merge_bases[claim.epoch] = chosen
            self.merge_lost |= set().union(*(set(i.values()) for i in incs)) - set(chosen.values())
            return None

        replica._finish_claim = finish_claim  # type: ignore[method-assign]
        return replica

    def counter_increments(self, lineage: Any, last_seq: int) -> dict[int, tuple[str, int]]:
        """The increments of the history ``lineage`` up to ``last_seq``: counter value -> the write
        (writer, n) that made it, from :attr:`ledger` (and :attr:`merge_bases`: a merge's epoch
        starts from the history whose counter it kept)."""
        assert not lineage or lineage[0][1] == 1, f"a lineage that does not start at seq 1: {lineage}"
        incs: dict[int, tuple[str, int]] = {}
        for i, (epoch, first) in enumerate(lineage):
            end = lineage[i + 1][1] - 1 if i + 1 < len(lineage) else last_seq
            if epoch in self.merge_bases:
                incs = dict(self.merge_bases[epoch])
            for seq, (value, write) in sorted(self.ledger.get(epoch, {}).items()):
                if first <= seq <= end:
                    incs[value] = write
        return incs

    def retire(self, name: str) -> None:
        """Before a restart of ``name``: close its old state."""
        old = self.nodes.get(name)
        if old is not None:
            old.replica.state.close()

    def add(self, name: str, path: Any = None) -> Node:
        """Start node ``name`` (again: a restart, with an empty state and a new writer id)."""
        gen = self.generations[name] = self.generations.get(name, -1) + 1
        self.retire(name)
        clock = Clock(wall=lambda: 1_000_000 + self.now)
        replica = Replica("s", f"{name}.{gen}", fresh_state(), self.now, durability=self.durability,
                          config=self.config, clock=clock, resolver=self.resolver)
        node = self.nodes[name] = Node(self.watch(replica))
        self.dead.discard(name)
        return node


@dataclass
class Write:
    node: Node  # the writer (a restarted node is another Node)
    n: int
    kind: str
    key: str
    value: Any


@dataclass
class Fuzz:
    """One case: the network, the election's tags, and every write placed."""

    seed: int
    rng: random.Random
    net: FuzzNet
    names: list[str]
    increments: bool
    tagged: set[str] = field(default_factory=set)
    writes: list[Write] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    fresh: int = 0
    #: acknowledged writes the docs allow to be lost (durability "master": what a dead master held alone)
    exempt_keys: set[str] = field(default_factory=set)
    #: the increments (writer id, write number) the docs allow to be lost, acknowledged or not
    exempt_incs: set[tuple[str, int]] = field(default_factory=set)

    def log(self, what: str) -> None:
        self.trace.append(f"{self.net.now:8.3f} {what}")

    # -- the election ------------------------------------------------------------------------------
    def tag(self, name: str) -> None:
        self.log(f"tag {name}")
        self.tagged.add(name)
        self.net.tag(name)

    def untag(self, name: str) -> None:
        self.log(f"untag {name}")
        self.tagged.discard(name)
        self.net.untag(name)

    def live(self) -> list[str]:
        return [n for n in self.names if n not in self.net.dead and self.net.nodes[n].paused is None]

    def master(self) -> str | None:
        return next(iter(self.tagged), None)

    # -- writes ------------------------------------------------------------------------------------
    def write_some(self) -> None:
        writers = self.live()
        for _ in range(self.rng.randint(0, 2)):
            if not writers:
                return
            name = self.rng.choice(writers)
            roll = self.rng.random()
            self.fresh += 1
            if self.increments and roll < 0.3:
                command: Any = Increment(COUNTER, 1)
                kind, key, value = "inc", COUNTER, 1
            elif roll < 0.5:
                kind, key, value = "unique", f"u{self.fresh}", self.fresh
                command = PutUnique(key, value, None, name, self.fresh)
            else:
                kind, key, value = "put", f"k{self.fresh}", self.fresh
                command = Put(key, value)
            n = self.net.write(name, command)
            self.writes.append(Write(self.net.nodes[name], n, kind, key, value))

    def run(self, seconds: float, step: float = 0.05) -> None:
        """``seconds`` of writes: a few at random live nodes every ``step`` or so."""
        end = self.net.now + seconds
        while self.net.now < end:
            self.write_some()
            self.net.run(min(self.rng.uniform(0.2, 1.8) * step, max(end - self.net.now, 0.0)))

    # -- faults ------------------------------------------------------------------------------------
    def kill(self, name: str) -> None:
        """Kill node ``name`` (a hook: a subclass notes what the kill may lose)."""
        self.net.kill(name)

    def episode(self, kind: str) -> None:
        net, rng = self.net, self.rng
        master = self.master()
        others = [n for n in self.live() if n != master]
        self.log(f"episode {kind} (master {master})")
        if kind == "migrate" and master is not None:
            self.run(rng.uniform(0.1, 1.0))
            self.untag(master)
            self.run(rng.uniform(0.0, 0.3))
            self.tag(rng.choice(others))
        elif kind == "kill_follower":
            victim = rng.choice(others)
            self.run(rng.uniform(0.1, 1.0))
            self.log(f"kill {victim}")
            self.kill(victim)
            self.run(rng.uniform(0.2, 1.5))
        elif kind == "kill_master" and master is not None:
            self.run(rng.uniform(0.1, 1.0))
            self.log(f"kill {master}")
            self.kill(master)
            self.tagged.discard(master)
            self.run(rng.uniform(0.0, 1.5))  # the election notices
            self.tag(rng.choice(others))
            self.run(rng.uniform(0.2, 1.0))
        elif kind == "pause_follower":
            victim = rng.choice(others)
            self.log(f"pause {victim}")
            net.pause(victim)
            self.run(rng.uniform(0.2, 3.0))
        elif kind == "pause_master" and master is not None:
            self.log(f"pause {master}")
            net.pause(master)
            if rng.random() < 0.6:  # long enough for the election to move the tag on
                self.run(rng.uniform(0.0, 1.5))
                self.tagged.discard(master)  # it lost the tag, though it does not know it yet
                self.tag(rng.choice(others))
            self.run(rng.uniform(0.2, 2.0))
        elif kind == "partition":
            nodes = list(self.names)
            rng.shuffle(nodes)
            cut = rng.randint(1, len(nodes) - 1)
            sides = set(nodes[:cut]), set(nodes[cut:])
            self.log(f"partition {sorted(sides[0])} | {sorted(sides[1])}")
            net.partition(*sides)
            self.run(rng.uniform(0.2, 1.0))
            masterless = [s for s in sides if master not in s]
            if masterless and rng.random() < 0.6:  # a split: the other side elects its own master
                self.run(net.config.member_timeout + rng.uniform(0.2, 0.8))
                candidates = [n for n in self.live() if n in masterless[0]]
                if candidates:
                    self.tag(rng.choice(candidates))
            self.run(rng.uniform(0.5, 2.0))
        elif kind == "loss":
            net.loss = rng.uniform(0.05, 0.3)
            self.log(f"loss {net.loss:.2f}")
            self.run(rng.uniform(0.5, 2.0))
            if master is not None and rng.random() < 0.5:
                self.untag(master)
                self.run(rng.uniform(0.0, 0.3))
                self.tag(rng.choice(others))
                self.run(rng.uniform(0.5, 1.5))
        self.recover(writes=True)

    def recover(self, *, writes: bool) -> None:
        """Undo every fault as the election would, then let the replicas catch up."""
        net, rng = self.net, self.rng
        net.loss = 0.0
        go = self.run if writes else self.net.run
        for name in self.names:
            if net.nodes[name].paused is not None:
                self.log(f"resume {name}")
                if name in self.tagged or not net.nodes[name].replica.is_master:
                    net.resume(name)
                elif rng.random() < 0.5:  # the election ran first: Detag before it reads anything
                    self.log(f"(untag {name} first)")
                    net.resume(name, first=lambda name=name: self.untag(name))
                else:
                    net.resume(name)
                    self.untag(name)
        for name in self.names:
            if name in net.dead:
                self.log(f"restart {name}")
                net.add(name)
        if net.groups is not None or len(self.tagged) != 1:
            # a healed split (or no master): the election settles; no tag until all hear each other
            net.heal()
            self.log("heal")
            for name in sorted(self.tagged):
                self.untag(name)
            go(net.config.member_timeout + rng.uniform(0.3, 0.8))
            self.tag(rng.choice(self.live()))
        go(rng.uniform(1.5, 2.5))

    def play(self, header: str, kinds: Sequence[str], most: int = 6) -> Self:
        """The case's schedule: log ``header``, tag a random node, 0.5 s of writes, 3 to ``most``
        episodes of random ``kinds``, then the quiet phase (:meth:`settle`). Returns the case."""
        self.log(header)
        self.tag(self.rng.choice(self.names))
        self.run(0.5)
        for _ in range(self.rng.randint(3, most)):
            self.episode(self.rng.choice(kinds))
        self.settle()
        return self

    def settle(self) -> None:
        """The quiet phase: everything healed and resumed, one node tagged once all hear each other,
        then 6 s more."""
        self.log("settle")
        self.net.heal()
        for name in sorted(self.tagged):
            self.untag(name)
        self.recover(writes=False)  # untagged: recover tags one node once all hear each other
        self.net.run(6.0)

    # -- the guarantees ----------------------------------------------------------------------------
    def check_converged(self) -> tuple[str, dict[Any, Any]]:
        """One master, every replica's contents the same: the trace (for messages), the contents."""
        net = self.net
        where = f"seed {self.seed}; trace:\n" + "\n".join(self.trace)
        assert net.masters() == [self.master()], where
        reference = net.contents(self.names[0])
        for name in self.names[1:]:
            assert net.contents(name) == reference, f"{name} differs from {self.names[0]}: {where}"
        return where, reference

    def check(self) -> None:
        net = self.net
        where, reference = self.check_converged()
        attempted = acked = exempt = 0
        for w in self.writes:
            answered = w.n in w.node.done
            if w.kind == "inc":
                attempted += 1
                acked += answered
                exempt += answered and (w.node.replica.id, w.n) in self.exempt_incs | net.merge_lost
            elif answered and w.key not in self.exempt_keys:
                got = reference.get(w.key)
                if w.kind == "unique":
                    assert w.node.done[w.n] is True, f"put_unique of fresh {w.key} answered {w.node.done[w.n]}: {where}"
                assert got == w.value, f"acknowledged {w.kind} {w.key}={w.value} lost ({got}): {where}"
        counter = reference.get(COUNTER, 0)
        assert counter <= attempted, f"{counter} increments applied of {attempted}: {where}"
        if self.increments:
            assert counter >= acked - exempt, \
                f"{counter} increments applied, {acked} acknowledged, {exempt} of them may be lost: {where}"
        for w in self.writes:  # every writer alive at the end had each of its writes answered
            if w.node is net.nodes[w.node.replica.id.split(".")[0]]:
                assert w.n in w.node.done or isinstance(w.node.failed.get(w.n), AnswerForgotten), \
                    f"{w.kind} {w.key} of {w.node.replica.id} unanswered ({w.node.failed.get(w.n)!r}): {where}"


def fuzz(seed: int) -> Fuzz:
    """Run the case of ``seed``: its setup, 3 to 6 episodes, then the quiet phase (healed, resumed,
    one node tagged once all hear each other, 6 s more)."""
    rng = random.Random(seed)
    names = ["a", "b", "c", "d", "e"][: rng.choice([4, 5])]
    durability = rng.choice(["one", "all"])
    safe = rng.random() < 0.5  # no partitions and no lost messages: the counter is checked exactly
    net = FuzzNet(names, seed=seed, latency=(0.001, rng.choice([0.01, 0.03])), durability=durability,
                  batch=rng.choice([0.0, 0.005]))
    case = Fuzz(seed, rng, net, names, increments=safe)
    return case.play(f"{len(names)} nodes, durability {durability}, {'no splits' if safe else 'splits and loss'}",
                     SAFE_KINDS if safe else EPISODE_KINDS)


@pytest.mark.parametrize("seed", SEEDS)
def test_fuzzed_faults_lose_no_acknowledged_write_and_converge_on_one_master(seed: int) -> None:
    """Under a random schedule of migrations, kills, pauses, splits and lost messages, with writes
    at random replicas throughout: once settled there is one master, every replica holds the same
    contents, every acknowledged put and put_unique of a fresh key is there with its value (and a
    put_unique of a fresh key was answered True), the counter holds every acknowledged increment and
    no more than were attempted, and every write of a replica still running was answered. No
    exception escapes a replica's ``handle`` or ``tick`` (it would fail the case)."""
    case = fuzz(seed)
    try:
        case.check()
    finally:
        case.net.close()
