"""Actor configuration: one frozen, validated value, versioned so a group converges on one.

Theory of operation
-------------------
A :class:`Config` travels in ``vers`` messages.  The higher ``version`` wins everywhere
(docs/asyncactor.md §5); a node that sees a lower version answers with its own.  Validation happens
once, here: a caller's bad configuration is a ``ValueError`` raised at construction, a peer's bad
``vers`` is a :class:`~asyncactor.messages.DecodeError` (see :func:`Config.from_wire`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

__all__ = ["Config"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """Timing and membership parameters shared by the group.

    ``cycle``: seconds per slot; ``gap``: seconds a pinger waits before it is "it", also the unit
    of ping delays; ``nodes``: max history (chain) length, -1 unlimited; ``splits``: history
    entries carried on the wire; ``n_hosts``: rough group size; ``force_in``: off-chain nodes bid
    early; ``version``: higher wins.

    ``heal_beacon`` is this node's own setting, not sent in ``vers`` (a received configuration
    keeps it): while "it", send one mid-slot ``hist`` (two history entries) so that a healed split
    is noticed within about half a slot (docs/asyncactor.md §7).  Off by default: nodes of the
    established implementation on the same topic would read it as split recovery.
    """

    cycle: float = 10.0
    gap: float = 1.5
    nodes: int = 5
    splits: int = 4
    n_hosts: int = 10
    force_in: bool = False
    version: int = 0
    heal_beacon: bool = False

    def __post_init__(self) -> None:
        self.check(allow_short_cycle=True)

    def check(self, *, allow_short_cycle: bool = False) -> None:
        """Raise ``ValueError`` naming the bad field.  ``cycle < 3 * gap`` is refused unless
        ``allow_short_cycle``: the slot would be too short to resolve collisions and hand over."""
        if not (self.gap > 0):
            raise ValueError(f"gap must be > 0, not {self.gap!r}")
        if not (self.cycle > 0):
            raise ValueError(f"cycle must be > 0, not {self.cycle!r}")
        if not allow_short_cycle and self.cycle < 3 * self.gap * (1 - 1e-9):  # cycle=0.6, gap=0.2 is fine
            raise ValueError(
                f"cycle ({self.cycle}) must be at least 3 * gap ({3 * self.gap}); "
                "pass allow_short_cycle=True to override"
            )
        if self.nodes != -1 and self.nodes < 1:
            raise ValueError(f"nodes must be >= 1 or -1 (unlimited), not {self.nodes!r}")
        if self.splits < 2:
            raise ValueError(f"splits must be >= 2, not {self.splits!r}")
        if self.n_hosts < 1:
            raise ValueError(f"n_hosts must be >= 1, not {self.n_hosts!r}")

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any] | None = None, *, allow_short_cycle: bool = False) -> Config:
        """Build from a user's dict; unknown keys are a ``ValueError`` (likely typos)."""
        cfg = dict(cfg or {})
        known = set(cls.__dataclass_fields__)
        unknown = set(cfg) - known
        if unknown:
            raise ValueError(f"unknown config keys: {sorted(unknown)}")
        conf = cls(**cfg)
        conf.check(allow_short_cycle=allow_short_cycle)
        return conf

    def with_changes(self, **changes: Any) -> Config:
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def max_history(self) -> int | None:
        return None if self.nodes == -1 else self.nodes
