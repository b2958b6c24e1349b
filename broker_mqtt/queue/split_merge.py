"""How a work queue's store merges the histories of a healed network split (``docs/queues.md`` § 4).

Each side of a split can elect a master, and each master hands out message ids from the counter it
held at the split: two different messages can get the same id. The store merges the healed
histories key by key, last writer wins, and would keep one of the two. :class:`QueueResolver` is the
queue's resolver (:mod:`broker_mqtt.store.state_merge`): for an id that both sides wrote since the
split it keeps

* the later version, as last writer wins does, when both are the same message (the same publish
  marker, :attr:`.model.MessageRecord.published`, and the same data: a message's data never
  changes); the other side's change of it (an acquire, a release) is dropped, and the message stays
  delivered at least once;
* both, when they are different messages (different markers, or different data): the later one under the id, the other
  under a new id above every id in use (:meth:`QueueResolver.merged`), ready to be delivered (one
  that was acquired: its consumer was on the other side and cannot settle it under the new id), or
  ``done`` or ``dead`` as it was;
* the message, when the other side erased the id (accepted its message): it is delivered again if
  it was the same message, rather than lost if it was not.

A moved message keeps who it is: its marker becomes ``[marker, the id it was published under]``, so
that a later merge (a heal in stages: a replica that answered a claim late is merged at its next
heartbeat) finds it held already and does not move it again when it meets it displaced. A heal in
stages can still deliver a message twice: when the late side changed the message after the first
stage chose another at its id (it wins there, and the moved copy stays), or when two stages each
moved it. Markers are random (:func:`.model.new_marker`); a publish without one (an earlier
version's, or a ``Publish`` written directly) is marked with the master's clock, and equal clocks on two sides (both behind the old
master's stamps) make two such messages with equal data one.
Two records without a marker (written by an earlier version) with equal data cannot be told apart:
one of them is lost, and if both were never changed after their publish their records are equal
and no conflict is even reported. A moved message is reported as the ``other`` of its ``ConflictResolved``, as if dropped.
With three or more diverged histories the store merges them two at a time, those that parted last
first, each pair against where its own histories part (:func:`~broker_mqtt.store.state_merge.merge_histories`):
a message two sides share since an earlier split is one message, moved once at most. Nothing here does I/O; the resolver runs at the replica that merges, one
merge at a time, and what it keeps reaches every replica with the merged state.
"""

from __future__ import annotations

from typing import Any

from ..store.history import Conflict, Version
from .model import ID_LIMIT, MessageRecord, MessageState, id_in_use, is_message_key

__all__ = ["QueueResolver"]


def _record(v: Version) -> MessageRecord | None:
    return None if v.deleted else MessageRecord.from_wire(v.value)


def _identity(key: int, rec: MessageRecord) -> tuple[float, int] | None:
    """Who a message is across merges: its publish marker and the id it was published under (a
    moved message's marker is ``[marker, that id]``); None without a marker (an earlier version's
    record, or a peer's of another form: :func:`.model.marker` left it out when the record was read)."""
    p = rec.published
    if p is None:
        return None
    return (p[0], p[1]) if type(p) is list else (p, key)


def _same_data(a: MessageRecord, b: MessageRecord) -> bool:
    return type(a.data) is type(b.data) and a.data == b.data


def _different(a: MessageRecord, b: MessageRecord) -> bool:
    """Two messages, not one: different publish markers, or (a marker missing: a record of an
    earlier version) different data (a message's data never changes)."""
    if a.published is not None and b.published is not None and (
            type(a.published) is not type(b.published) or a.published != b.published):
        return True
    return not _same_data(a, b)


class QueueResolver:
    """A work queue's resolver of a healed split (see the module docstring). The store calls it
    for each key both sides wrote since the split, then :meth:`merged` once; it keeps no state
    between the calls."""

    def __call__(self, key: Any, a: Version, b: Version) -> Version:
        """``a`` (the later write) or ``b`` (a message against the erase of its id); a different
        message in ``b`` is kept by :meth:`merged`."""
        if not is_message_key(key) or not 0 < key < ID_LIMIT:
            return a
        if _record(b) is not None and _record(a) is None:
            return b if a.deleted else a  # (a tombstone against a message: the message)
        return a

    def merged(self, versions: list[tuple[Any, Version]], conflicts: list[Conflict]) -> list[tuple[Any, Version]]:
        """``versions`` with each message a conflict did not choose, different from the one it
        chose, under a new id: above every id in use (a message's, an erased message's, the
        counter's, a log reader's pointer), in the order of the ids they had; its marker becomes
        ``[marker, the id it was published under]``. A message already held under another id (one
        moved by an earlier merge that this history did not see: a heal in stages) is not moved
        again."""
        displaced = []
        for c in sorted((c for c in conflicts if is_message_key(c.key) and 0 < c.key < ID_LIMIT), key=lambda c: c.key):
            chosen, other = _record(c.chosen), _record(c.other)
            if chosen is not None and other is not None and _different(chosen, other):
                displaced.append((c.key, other, c.other))
        if not displaced:
            return versions
        held: dict[tuple[float, int], list[MessageRecord]] = {}  # the messages merged, by identity
        for key, v in versions:
            rec = _record(v) if is_message_key(key) else None
            who = None if rec is None else _identity(key, rec)
            if rec is not None and who is not None:
                held.setdefault(who, []).append(rec)
        moving: list[tuple[tuple[float, int] | None, MessageRecord, Version]] = []  # (identity, record, version)
        for old_id, rec, v in displaced:
            who = _identity(old_id, rec)
            if who is not None and any(_same_data(rec, same) for same in held.get(who, ())):
                continue  # held already: moved by an earlier merge (the same marker, id and data)
            twin = next((i for i, (w, r, _) in enumerate(moving) if who is not None and w == who
                         and _same_data(rec, r)), None)
            if twin is None:
                moving.append((who, rec, v))
            elif (v.hlc, v.origin) > (moving[twin][2].hlc, moving[twin][2].origin):
                moving[twin] = (who, rec, v)  # the same message displaced twice: its later version
        highest = max((id_in_use(key, None if v.deleted else v.value) for key, v in versions), default=0)
        out = list(versions)
        for who, rec, v in moving:
            marker = rec.published if who is None else [who[0], who[1]]
            state = MessageState.READY if rec.state is MessageState.ACQUIRED else rec.state
            owner = None if rec.state is MessageState.ACQUIRED else rec.owner
            rec = MessageRecord(rec.data, state, owner, rec.count, rec.max, rec.reason, marker)
            highest += 1
            out.append((highest, Version(rec.to_wire(), v.hlc, v.origin, v.seq, False, None)))
        return out
