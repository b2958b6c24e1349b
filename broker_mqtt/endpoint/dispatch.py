"""Subscription identifiers: which local subscriber gets which PUBLISH, sans-io.

Every distinct MQTT filter an endpoint needs is one MQTT 5 subscription with its own
subscription identifier; local subscribers that ask for the same filter share it (MQTT would
replace a second subscription to the same filter). Incoming PUBLISH packets carry the
identifiers of the subscriptions they matched, and :meth:`SubscriptionTable.targets` maps them
to subscribers with dictionary look-ups only: no topic matching on the hot path.

mosquitto sends one copy of a message per matching subscription. Two level-prefixes match the
same topic only when one covers the other, so :meth:`SubscriptionTable.add` drops from each
subscriber the prefixes covered by its other prefixes: every subscriber then sits behind at most
one of the subscriptions a message matches, and never gets that message twice.

Table filters (data prefixes) are subscribed with MQTT's No Local option *on*, always: the broker
never sends an endpoint back what it published itself. Since every table filter has the same
options, mosquitto 2.0's rule that a filter subscribed again keeps its first options does not
matter. Subscribers that ask for their own messages (``local=``) get them from the endpoint
itself, at send time, matched with :meth:`SubscriptionTable.match`-style prefix matching (only
when such a subscriber exists; never on the receive path). An own message that still comes back
(a broker that ignores No Local) is dropped by sender id, so none is delivered twice. Raw MQTT
filters (``levels`` None) keep No Local off: raw subscribers get their own PUBLISHes from the
broker.

A broker without subscription identifiers (CONNACK ``Subscription Identifiers Available`` = 0)
is served by :meth:`SubscriptionTable.match`, which matches topics against filters instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ..wire.topics import covers, prefix_matches

__all__ = ["Filter", "SubscriptionTable", "Subscribe", "Unsubscribe"]

S = TypeVar("S")

MAX_SUBSCRIPTION_ID = 268_435_455


@dataclass(slots=True, eq=False)
class Filter(Generic[S]):
    mqtt_filter: str
    sub_id: int
    levels: tuple[str, ...] | None  #: broker prefix levels; None for raw MQTT filters
    subscribers: list[S] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Subscribe:
    mqtt_filter: str
    sub_id: int
    no_local: bool = False  #: True for data filters, False for raw ones (see the module docstring)


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    mqtt_filter: str


Change = Subscribe | Unsubscribe


def minimal_prefixes(prefixes: Iterable[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """Drop prefixes covered by another (and duplicates), keeping first-seen order."""
    unique = list(dict.fromkeys(prefixes))
    return [p for p in unique if not any(q != p and covers(q, p) for q in unique)]


class SubscriptionTable(Generic[S]):
    """Filters, their subscription ids and their subscribers. Returns the MQTT changes to make."""

    def __init__(self, first_id: int = 1) -> None:
        self._next_id = first_id
        self.by_filter: dict[str, Filter[S]] = {}
        self.by_id: dict[int, Filter[S]] = {}

    def _allocate(self) -> int:
        for _ in range(MAX_SUBSCRIPTION_ID):
            sid = self._next_id
            self._next_id = sid + 1 if sid < MAX_SUBSCRIPTION_ID else 1
            if sid not in self.by_id:
                return sid
        raise RuntimeError("no free subscription identifier")  # pragma: no cover

    def add(self, subscriber: S, filters: Iterable[tuple[str, tuple[str, ...] | None]]) -> list[Change]:
        """Register ``subscriber`` for ``(mqtt_filter, levels)`` pairs (already minimal)."""
        changes: list[Change] = []
        for mqtt_filter, levels in filters:
            f = self.by_filter.get(mqtt_filter)
            if f is None:
                f = Filter(mqtt_filter, self._allocate(), levels)
                self.by_filter[mqtt_filter] = self.by_id[f.sub_id] = f
                changes.append(Subscribe(mqtt_filter, f.sub_id, f.levels is not None))
            f.subscribers.append(subscriber)
        return changes

    def remove(self, subscriber: S) -> list[Change]:
        changes: list[Change] = []
        for f in list(self.by_filter.values()):
            if subscriber in f.subscribers:
                f.subscribers.remove(subscriber)
                if not f.subscribers:
                    del self.by_filter[f.mqtt_filter], self.by_id[f.sub_id]
                    changes.append(Unsubscribe(f.mqtt_filter))
        return changes

    def all_subscribes(self) -> list[Subscribe]:
        """What to subscribe after (re)connecting."""
        return [Subscribe(f.mqtt_filter, f.sub_id, f.levels is not None) for f in self.by_filter.values()]

    def targets(self, sub_ids: Iterable[int]) -> list[Filter[S]]:
        """The filters a PUBLISH matched, from its subscription identifiers (unknown ids skipped)."""
        by_id = self.by_id
        return [by_id[i] for i in sub_ids if i in by_id]

    def match(self, levels: tuple[str, ...], accept: Callable[[Filter[S]], bool] | None = None) -> list[Filter[S]]:
        """Fallback: the data filters whose prefix covers ``levels`` (topic matching)."""
        return [
            f
            for f in self.by_filter.values()
            if f.levels is not None and prefix_matches(f.levels, levels) and (accept is None or accept(f))
        ]
