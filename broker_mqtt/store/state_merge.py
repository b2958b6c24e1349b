"""Merging diverged histories of an elected store (a healed network split; ``docs/elected-stores.md``).

:func:`merge` combines two replicas' :class:`~.versioned.VersionedState` per key: the version with the larger
``(hlc, origin)`` wins (last writer wins; pluggable), and every key that both sides wrote since their
common history is reported as a :class:`~.history.Conflict`. :func:`merge_histories` folds several
into the arguments of :meth:`~.versioned.VersionedState.replace` on a new line of history.
"""

from __future__ import annotations

from typing import Any

from .history import Conflict, Epoch, Resolver, Version, fork_seq, last_writer_wins
from .versioned import VersionedState
from .writer_table import _Applied

__all__ = ["merge", "merge_histories"]


def _same(a: Version, b: Version) -> bool:
    """Both sides ended with the same value (e.g. the same write applied on each): no conflict."""
    return a.deleted == b.deleted and (a.deleted or (type(a.value) is type(b.value) and a.value == b.value))


def merge(a: VersionedState, b: VersionedState, *, resolver: Resolver = last_writer_wins
          ) -> tuple[list[tuple[Any, Version]], dict[str, _Applied], list[Conflict]]:
    """Merge two diverged states: ``(versions, applied, conflicts)``. Deterministic: the result does
    not depend on which state is ``a``. A conflict is a key both sides wrote after their fork."""
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
        chosen = resolver(ia[0], first, second)
        other = second if chosen is first else first
        out.append((ia[0], chosen))
        if va.seq > fork and vb.seq > fork and not _same(va, vb):
            conflicts.append(Conflict(ia[0], chosen, other))
    applied: dict[str, _Applied] = {}
    for side in (a.applied, b.applied):
        for w, entry in side.items():
            mine = applied.get(w)
            if mine is None or entry.n > mine.n:
                applied[w] = _Applied(entry.n, entry.seq, {**(mine.results if mine else {}), **entry.results})
            else:
                mine.results = {**entry.results, **mine.results}
    return out, applied, conflicts


def merge_histories(states: list[VersionedState], epoch: Epoch, *, resolver: Resolver = last_writer_wins
                    ) -> tuple[dict[str, Any], list[Conflict]]:
    """Merge diverged histories into a new line of ``epoch``: ``(replace() arguments, conflicts)``.

    The new lineage is the histories' common prefix followed by ``epoch`` from the fork on; its last
    seq lies past every input's, so no input's position is contained in it (followers take a snapshot).
    """
    first = states[0]
    fork = min([fork_seq(first.lineage, first.last_seq, s.lineage, s.last_seq) for s in states[1:]]
               or [first.last_seq])
    merged, conflicts = first, []
    for other in states[1:]:
        versions, applied, found = merge(merged, other, resolver=resolver)
        conflicts.extend(found)
        step = VersionedState()
        step.replace(versions, last_seq=max(merged.last_seq, other.last_seq),
                     lineage=[(e, s) for e, s in merged.lineage if s <= fork],
                     applied=applied, max_hlc=max(merged.max_hlc, other.max_hlc))
        merged = step
    lineage = [*((e, s) for e, s in first.lineage if s <= fork), (epoch, fork + 1)]
    parts = {"versions": list(merged.versions()), "last_seq": max(s.last_seq for s in states) + 1,
             "lineage": lineage, "applied": merged.applied, "max_hlc": merged.max_hlc}
    return parts, conflicts
