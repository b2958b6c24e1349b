"""Several brokers for one endpoint: the nodes of a clustered broker, or bridged brokers.

Theory of operation. A :class:`FailoverConnector` holds one connector per broker URL, in the order
given, and connects through the current one. Whenever a connection attempt fails, or an open
connection ends, the next one becomes current, so the endpoint's next attempt (after its usual
backoff) goes to the next broker, and round the list. A broker that refuses for good (bad
credentials, not authorized) fails only that attempt: the others may accept. What a session held
on the broker that died (QoS 1 messages queued for this client) is that broker's: a cluster may
carry the session over or not, so whatever must not be lost travels on channels, stores or queues,
which resend after reconnecting. No I/O of its own: the connectors it holds do the work.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

from ..errors import UsageError
from .base import Connection, ConnectOptions, Connector

__all__ = ["FailoverConnector"]


class FailoverConnector:
    """Connects through ``connectors`` in turn: the next one after each failure or lost connection."""

    def __init__(self, connectors: Sequence[Connector]) -> None:
        if not connectors:
            raise UsageError("FailoverConnector needs at least one connector")
        self.connectors = list(connectors)
        self.current = 0  #: index of the connector the next attempt uses
        self.failovers = 0  #: times the current connector changed

    def __str__(self) -> str:
        if len(self.connectors) == 1:
            return str(self.connectors[0])
        return f"{self.connectors[self.current]} (of {', '.join(str(c) for c in self.connectors)})"

    @asynccontextmanager
    async def connect(
        self,
        options: ConnectOptions,
        on_confirmed: Callable[[int], None],
        on_rejected: Callable[[int, str], None],
    ) -> AsyncIterator[Connection]:
        connector = self.connectors[self.current]
        try:
            async with connector.connect(options, on_confirmed, on_rejected) as connection:
                yield connection
        finally:
            # Failed, dropped or closed: the next attempt goes to the next broker. (A clean close
            # moves it too; the endpoint does not reconnect after one.)
            if len(self.connectors) > 1:
                self.current = (self.current + 1) % len(self.connectors)
                self.failovers += 1
