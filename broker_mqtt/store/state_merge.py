"""Merging diverged histories of an elected store (a healed network split; ``docs/elected-stores.md``).

:func:`merge` combines two replicas' :class:`~.versioned.VersionedState` per key: the version with the larger
``(hlc, origin)`` wins (last writer wins; pluggable), and every key that both sides wrote since their
common history is reported as a :class:`~.history.Conflict`. :func:`merge_histories` folds several
into the arguments of :meth:`~.versioned.VersionedState.replace` on a new line of history.

A custom resolver is the application's code, run at the claimant only: its answer is checked
(:func:`resolved`), and one that raises or answers something no replica could hold is replaced by
last writer wins for that key and reported, so that a bug in it neither stops the merge nor lets
the master hold what its followers would decode differently.

A resolver may also keep what it did not choose: one with a ``merged(versions, conflicts)``
method (a :class:`MergeHook`, e.g. a work queue's, :mod:`broker_mqtt.queue.split_merge`) gets every
merged ``(key, version)`` and the conflicts of that merge (each key's chosen and other version)
once each two histories are merged, and returns the versions with its additions (under other
keys, each stamped as a version of these histories). What it returns is checked
(:func:`_checked_additions`); a hook that raises or answers anything else adds nothing,
and is reported.
"""

from __future__ import annotations

import math
from typing import Any, Protocol, runtime_checkable

from ..errors import peer_repr
from .errors import BackendError
from .history import Conflict, Epoch, Resolver, Version, fork_seq, last_writer_wins
from .packing import detached, pack
from .versioned import VersionedState
from .writer_table import _Applied

__all__ = ["merge", "merge_histories", "resolved", "MergeHook"]


@runtime_checkable
class MergeHook(Protocol):
    """A resolver that also sees the whole merge (see the module docstring)."""

    def __call__(self, key: Any, a: Version, b: Version) -> Version: ...

    def merged(self, versions: list[tuple[Any, Version]], conflicts: list[Conflict]) -> list[tuple[Any, Version]]:
        """``versions`` (every key's merged version) with this hook's additions; a key that is in
        ``versions`` already must not be added again. ``conflicts``: the keys of this merge that
        both sides wrote with different results, each with the version chosen and the other."""
        ...


def _stamp(v: Version) -> tuple[int, str, int]:
    return v.hlc, v.origin, v.seq


def resolved(resolver: Resolver, key: Any, first: Version, second: Version) -> tuple[Version, str | None]:
    """``resolver``'s choice between ``first`` (last writer wins' choice) and ``second``, checked:
    ``(version, None)``, or ``(first, why)`` when the resolver raised or answered something other
    than a :class:`Version` with the stamp (``hlc``, ``origin``, ``seq``) of one of them, a
    ``deleted`` flag and a finite expiry (or None). The resolver gets copies (changing their values
    changes no state); the answer's value is copied in the form every replica decodes (a tuple
    becomes a list), and one outside the data model is refused; its stamp is the given version's."""
    try:
        chosen = resolver(key, first.copied(), second.copied())
    except Exception as exc:  # the application's code: any failure is its own
        return first, f"the resolver raised {type(exc).__name__}: {exc}"
    if not isinstance(chosen, Version):
        return first, f"the resolver returned {peer_repr(chosen, 60)}, not a Version"
    stamp = (chosen.hlc, chosen.origin, chosen.seq)
    if tuple(map(type, stamp)) != (int, str, int) or stamp not in (_stamp(first), _stamp(second)):
        return first, (f"the resolver returned a version stamped {peer_repr(stamp, 80)}, neither of the two it "
                       f"was given ({_stamp(first)}, {_stamp(second)}): change a given version's value, not its stamp")
    given = first if stamp == _stamp(first) else second
    expiry = chosen.expiry
    if type(chosen.deleted) is not bool or not (
            expiry is None or (type(expiry) in (int, float) and math.isfinite(expiry) and expiry >= 0)):
        return first, f"the resolver returned a malformed version (deleted {chosen.deleted!r}, expiry {expiry!r})"
    try:
        value = None if chosen.deleted else detached(chosen.value)
    except BackendError as exc:
        return first, f"the resolver returned a value no replica can hold: {exc}"
    return Version(value, given.hlc, given.origin, given.seq, chosen.deleted, None if chosen.deleted else expiry), None


def _same(a: Version, b: Version) -> bool:
    """Both sides ended with the same value (e.g. the same write applied on each): no conflict."""
    return a.deleted == b.deleted and (a.deleted or (type(a.value) is type(b.value) and a.value == b.value))


def merge(a: VersionedState, b: VersionedState, *, resolver: Resolver = last_writer_wins,
          refused: list[str] | None = None,
          fork: int | None = None) -> tuple[list[tuple[Any, Version]], dict[str, _Applied], list[Conflict]]:
    """Merge two diverged states: ``(versions, applied, conflicts)``. Deterministic (if ``resolver``
    is): the result does not depend on which state is ``a``. A conflict is a key both sides wrote
    after their fork: the last seq up to which their histories are one (``fork``; by default found
    from their lineages). Each key whose resolver answer :func:`resolved` refused (last writer wins
    instead) adds why to ``refused``."""
    if fork is None:
        fork = fork_seq(a.lineage, a.last_seq, b.lineage, b.last_seq)
    keyed_a = a._keyed()
    keyed_b = b._keyed()
    out: list[tuple[Any, Version]] = []
    conflicts: list[Conflict] = []
    for k in sorted(keyed_a.keys() | keyed_b.keys()):
        ia, ib = keyed_a.get(k), keyed_b.get(k)
        if ia is None or ib is None:
            item = ia if ib is None else ib
            assert item is not None
            out.append(item)
            continue
        va, vb = ia[1], ib[1]
        if (va.hlc, va.origin) == (vb.hlc, vb.origin):
            out.append(ia)
            continue
        first, second = (va, vb) if (va.hlc, va.origin) > (vb.hlc, vb.origin) else (vb, va)
        conflict = va.seq > fork and vb.seq > fork  # both sides wrote it since their common history
        if resolver is last_writer_wins or not conflict:  # (a write on one side only: the later one stands)
            chosen = first
        else:
            chosen, why = resolved(resolver, ia[0], first, second)
            if why is not None and refused is not None:
                refused.append(f"key {peer_repr(ia[0], 60)}: {why}")
        other = second if _stamp(chosen) == _stamp(first) else first
        out.append((ia[0], chosen))
        if conflict and not _same(va, vb):
            conflicts.append(Conflict(ia[0], chosen, other))
    if isinstance(resolver, MergeHook):
        out = _with_additions(resolver, out, conflicts, max(a.last_seq, b.last_seq), refused)
    applied: dict[str, _Applied] = {}
    for side in (a.applied, b.applied):
        for w, entry in side.items():
            mine = applied.get(w)
            if mine is None or entry.n > mine.n:
                applied[w] = _Applied(entry.n, entry.seq, {**(mine.results if mine else {}), **entry.results})
            else:
                mine.results = {**entry.results, **mine.results}
    return out, applied, conflicts


def _with_additions(hook: MergeHook, out: list[tuple[Any, Version]], conflicts: list[Conflict], last_seq: int,
                    refused: list[str] | None) -> list[tuple[Any, Version]]:
    """``out`` and what ``hook.merged`` adds to it, checked; ``out`` alone if the hook failed (why:
    to ``refused``)."""
    try:
        answer = hook.merged(list(out), list(conflicts))
        additions = _checked_additions(answer, out, last_seq)
    except Exception as exc:  # the application's code (or ours, for a queue): any failure is its own
        if refused is not None:
            refused.append(f"the resolver's merged() failed, nothing added: {type(exc).__name__}: {exc}")
        return out
    return [*out, *additions]


def _checked_additions(answer: Any, out: list[tuple[Any, Version]], last_seq: int) -> list[tuple[Any, Version]]:
    """What ``answer`` adds to ``out``: it must hold every item of ``out`` first, as given, then new
    keys, each a live version of a data-model value stamped with a seq of these histories (its hlc
    and origin are not checked: the hook's own code answers for them). Raises
    ValueError (or BackendError for a value no replica can hold) otherwise."""
    if not isinstance(answer, list) or len(answer) < len(out) or any(
            x is not y for x, y in zip(answer, out, strict=False)):
        raise ValueError("merged() must return the versions it was given, in order, and then its additions")
    keys = {pack(k) for k, _ in out}
    additions: list[tuple[Any, Version]] = []
    for item in answer[len(out):]:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], Version)):
            raise ValueError(f"an addition is not a (key, Version) pair: {peer_repr(item, 60)}")
        key, v = item
        k = pack(key)
        if k in keys:
            raise ValueError(f"key {peer_repr(key, 60)} is added twice (or was merged already)")
        keys.add(k)
        if (v.deleted or type(v.hlc) is not int or type(v.origin) is not str or type(v.seq) is not int
                or not 0 < v.seq <= last_seq or v.expiry is not None):
            raise ValueError(f"the addition under {peer_repr(key, 60)} is not a live version stamped with a "
                             f"seq of these histories")
        additions.append((detached(key), Version(detached(v.value), v.hlc, v.origin, v.seq, False, None)))
    return additions


def merge_histories(states: list[VersionedState], epoch: Epoch, *, resolver: Resolver = last_writer_wins,
                    refused: list[str] | None = None) -> tuple[dict[str, Any], list[Conflict]]:
    """Merge diverged histories into a new line of ``epoch``: ``(replace() arguments, conflicts)``;
    ``refused`` as :func:`merge`'s.

    Histories part as a tree (a split, then a split of one side): they are merged two at a time,
    those that parted last first, each pair judged against the seq where its own histories part, so
    that a write two sides share since an earlier split is one write, never a conflict with itself,
    and a write since the split is never taken for a shared one. (A merged pair's seqs are those of
    its two lineages, which agree up to where they part: one lineage cannot stand for both, so the
    seq where two groups of histories part is found from the histories themselves.) The order of
    ``states`` changes nothing.

    The new lineage is the histories' common prefix followed by ``epoch`` from the fork on; its last
    seq lies past every input's, so no input's position is contained in it (followers take a snapshot).
    """
    states = sorted(states, key=lambda s: (s.lineage, s.last_seq))  # (equal keys: the same history)
    parted = {(i, j): fork_seq(a.lineage, a.last_seq, b.lineage, b.last_seq)
              for i, a in enumerate(states) for j, b in enumerate(states) if i < j}
    first = states[0]
    fork = min(parted.values(), default=first.last_seq)
    groups = [(s, [i]) for i, s in enumerate(states)]  # (merged state, the histories in it)
    conflicts: list[Conflict] = []
    while len(groups) > 1:
        pairs = [((x, y), max(parted[min(i, j), max(i, j)] for i in groups[x][1] for j in groups[y][1]))
                 for x in range(len(groups)) for y in range(x + 1, len(groups))]
        (x, y), at = max(pairs, key=lambda pair: pair[1])  # (the first of equals: states are sorted)
        (a, in_a), (b, in_b) = groups[x], groups[y]
        versions, applied, found = merge(a, b, resolver=resolver, refused=refused, fork=at)
        conflicts.extend(found)
        step = VersionedState()
        step.replace(versions, last_seq=max(a.last_seq, b.last_seq), lineage=[(e, s) for e, s in a.lineage if s <= at],
                     applied=applied, max_hlc=max(a.max_hlc, b.max_hlc))
        groups[x] = (step, in_a + in_b)
        del groups[y]
    merged = groups[0][0]
    lineage = [*((e, s) for e, s in first.lineage if s <= fork), (epoch, fork + 1)]
    parts = {"versions": list(merged.versions()), "last_seq": max(s.last_seq for s in states) + 1,
             "lineage": lineage, "applied": merged.applied, "max_hlc": merged.max_hlc}
    return parts, conflicts
