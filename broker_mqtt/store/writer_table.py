"""What a replicated state remembers of each writer: the number of its last write applied, the log
position of it, and the answers of its recent writes that have one (for repeats; see
:mod:`.versioned`), with the wire and persisted form of that table."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .errors import StoreDecodeError
from .packing import Packed, pack, pack_array

__all__ = ["applied_from_wire"]


@dataclass(slots=True)
class _Applied:
    n: int
    seq: int
    results: dict[int, Any] = field(default_factory=dict)
    # commit()'s cache: n -> (results[n], the encoding of [n, results[n]]); see packed_results
    packed: dict[int, tuple[Any, bytes]] = field(default_factory=dict, compare=False, repr=False)

    def packed_results(self) -> Packed:
        """The encoding of ``[[n, result], ...]`` as the persisted header holds it. Each answer is
        encoded once, at the first commit that writes it: re-encoding the up to RESULTS_KEPT answers of
        every writer at every commit was most of the cost of a commit (a queue's acquire answers
        with its messages)."""
        cache = self.packed
        parts = []
        for n, result in self.results.items():
            hit = cache.get(n)
            if hit is None or hit[0] is not result:
                hit = cache[n] = (result, pack([n, result]))
            parts.append(hit[1])
        if len(cache) > len(parts):  # answers dropped from results
            self.packed = {n: cache[n] for n in self.results}
        return Packed(pack_array(parts))


def applied_from_wire(rows: Iterable[Any]) -> dict[str, _Applied]:
    """The writer table from its wire (and persisted) form, ``[[writer, n, seq, [[n, answer], ...]],
    ...]``. Raises StoreDecodeError for a malformed row."""
    applied = {}
    try:
        for w, n, seq, results in rows:
            if not (isinstance(w, str) and isinstance(n, int) and isinstance(seq, int)):
                raise StoreDecodeError("bad applied entry")
            applied[w] = _Applied(n, seq, {int(i): r for i, r in results})
    except (TypeError, ValueError, OverflowError) as exc:  # (int() of an infinity)
        raise StoreDecodeError(f"bad applied entry: {exc}") from exc
    return applied
