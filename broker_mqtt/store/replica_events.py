"""The vocabulary of an elected-store replica: its settings, roles, counters and the events it reports.

Used by :mod:`.replication` (which produces them) and :mod:`.elected` (which turns them into the
store's public events).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from .errors import StoreError
from .versioned import Change, Conflict, Epoch

__all__ = [
    "Durability",
    "Role",
    "ReplicaConfig",
    "TOMBSTONE_TTL",
    "ReplicaStatistics",
    "DataChanged",
    "MasterChanged",
    "ConflictsFound",
    "ResolverRefused",
    "WriteDone",
    "WriteFailed",
    "StaleChanged",
    "ReplicaEvent",
]


TOMBSTONE_TTL = 60.0  #: s an elected store keeps an erased key's tombstone by default (the queues' default too)


class Durability(enum.Enum):
    MASTER = "master"
    ONE = "one"
    ALL = "all"


class Role(enum.Enum):
    FOLLOWER = "follower"
    CLAIMING = "claiming"
    MASTER = "master"


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """Timings in seconds. ``log_keep``: log ops kept for catching up others by tail rather than by
    snapshot (a batch's record counts each of its ops; see :mod:`.record_log`). ``tombstone_ttl``:
    the master forgets an erased key's tombstone this long after the erase (None: never), with
    ``forget`` records that every replica applies; a split longer than this can bring an erased key
    back (``docs/elected-stores.md`` § 6). ``snapshot_chunk``: the largest snapshot chunk message, in
    bytes (an entry larger than that goes alone in one); ``snapshot_window``: the chunks a replica
    receiving a snapshot asks for at a time (:mod:`.snapshot_stream`).

    ``heartbeat``, ``member_timeout`` and ``claim_timeout`` must leave room for noticing a pause
    (:attr:`pause_threshold`): ``claim_timeout >= 3 * heartbeat`` and ``member_timeout >= 4 *
    heartbeat`` (ValueError otherwise; the defaults, and those ``attach_store`` derives, do)."""

    heartbeat: float = 0.25
    member_timeout: float = 1.0
    claim_timeout: float = 1.0
    fetch_timeout: float = 2.0
    retry_interval: float = 1.0
    write_timeout: float = 30.0
    max_held: int = 10_000
    log_keep: int = 20_000
    tombstone_ttl: float | None = TOMBSTONE_TTL
    snapshot_chunk: int = 256 * 1024
    snapshot_window: int = 8

    def __post_init__(self) -> None:
        if self.tombstone_ttl is not None and not self.tombstone_ttl >= 0:
            raise ValueError(f"tombstone_ttl must be None or >= 0 s, not {self.tombstone_ttl}")
        hb = self.heartbeat
        slack = 1 - 1e-9  # (claim_timeout=0.3 with heartbeat=0.1 is fine)
        if not (hb > 0 and self.claim_timeout >= 3 * hb * slack and self.member_timeout >= 4 * hb * slack):
            raise ValueError(
                f"heartbeat ({hb}) must be > 0, claim_timeout ({self.claim_timeout}) >= 3 * heartbeat and "
                f"member_timeout ({self.member_timeout}) >= 4 * heartbeat: a replica takes a silence of more than "
                "min(member_timeout / 2, claim_timeout - heartbeat) for a pause of its own, which must be longer "
                "than the heartbeats' gaps (2 * heartbeat) and shorter than the shortest pause that can depose "
                "a master (min(claim_timeout, member_timeout - heartbeat); docs/elected-stores.md § 3)")

    @property
    def pause_threshold(self) -> float:
        """A replica that hears nothing (not even its own timer) for longer than this was paused
        (SIGSTOP, a stalled loop): ``min(member_timeout / 2, claim_timeout - heartbeat)``. The
        shortest pause that can depose a master is ``min(claim_timeout, member_timeout - heartbeat)``
        (a claimant waits ``claim_timeout`` for the master's promise, or none once it has been silent
        for ``member_timeout``, a heartbeat after its last one at worst), so every such pause is
        noticed, with a heartbeat to spare for the network; and a replica running has inputs at least
        every heartbeat, so no pause is seen where there is none (``__post_init__`` checks both)."""
        return min(self.member_timeout / 2, self.claim_timeout - self.heartbeat)


# -- events ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DataChanged:
    changes: list[Change]


@dataclass(frozen=True, slots=True)
class MasterChanged:
    """``master`` (a node id, or None while no master is active) holds ``epoch``."""

    master: str | None
    epoch: Epoch | None


@dataclass(frozen=True, slots=True)
class ConflictsFound:
    epoch: Epoch
    conflicts: list[Conflict]


@dataclass(frozen=True, slots=True)
class ResolverRefused:
    """This node merged diverged histories, and the custom resolver's answer for some keys was
    refused (it raised, or answered what no replica could hold): last writer wins decided those
    keys. ``errors``: one line per key."""

    epoch: Epoch
    errors: list[str]


@dataclass(frozen=True, slots=True)
class WriteDone:
    n: int
    result: Any


@dataclass(frozen=True, slots=True)
class WriteFailed:
    n: int
    error: StoreError


@dataclass(frozen=True, slots=True)
class StaleChanged:
    stale: bool
    reason: str


ReplicaEvent = DataChanged | MasterChanged | ConflictsFound | ResolverRefused | WriteDone | WriteFailed | StaleChanged


@dataclass(slots=True)
class ReplicaStatistics:
    """Counters since start: what handovers cost (records and snapshot entries moved)."""

    claims: int = 0  #: claims this node started
    masterships: int = 0  #: claims that made it master
    merges: int = 0  #: masterships that merged diverged histories
    records_fetched: int = 0  #: log records received by tail (catching up)
    snapshots_installed: int = 0  #: snapshots installed (or fetched for a merge)
    snapshot_entries: int = 0  #: entries (tombstones included) in those snapshots
    records_applied: int = 0  #: records applied (as master or follower)
    #: messages that did not decode (counted by the I/O layer), and snapshot chunks whose entries did not
    #: (counted as they are staged)
    malformed: int = 0
    answers_lost: int = 0  #: this node's writes whose answer was lost (a later one showed it): sent again
    #: writes this master passed over for their writer, which held their answers (it said so, sending
    #: its later ones again): answered by an earlier master and lost with it (durability "master", or a
    #: double fault), or given up by the writer (NoMaster) before any master applied them
    writes_lost: int = 0
    #: keys whose custom resolver answer a merge at this node refused (last writer wins decided them)
    resolver_errors: int = 0
