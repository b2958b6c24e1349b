"""An endpoint's keys: what seals its PUBLISHes, what checks its peers', and key records (docs/signing.md).

:class:`EndpointKeys` wires :mod:`broker_mqtt.wire.signing` into one endpoint:

* with a ``signing_key``, the :class:`~.send.Sender` seals every PUBLISH on the layout's topics;
* with a ``trust`` store, the :class:`~.receive.Receiver` drops what its sender's trusted key did not
  seal (and :meth:`EndpointKeys.verify` checks raw PUBLISHes, for bound elections);
* with a fleet key in the trust store, the endpoint also learns keys from **key records**: retained
  messages on ``<ns>/k/<client id>``, each a :class:`~broker_mqtt.wire.signing.KeyRecord` signed by
  the fleet key, for the identity its topic names; and with a ``key_record`` of its own it publishes
  that record there, retained, when it connects (before its presence, so peers learn its key first).

A key record is checked against the fleet key, not sealed: it proves itself. Clearing a retained record
revokes nothing (peers keep the key until its ``not_after``): retire a key with a newer record.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..wire.signing import SignatureError, Signer, TrustStore, Verifier
from ..wire.topics import TopicLayout
from .dispatch import Subscribe
from .events import ErrorCode, ErrorEvent, StatusEvent
from .receive import KEYS_SID, Receiver
from .send import Sender
from .statistics import EndpointStatistics

__all__ = ["EndpointKeys"]


class EndpointKeys:
    """The signing key, trust store and key record of one endpoint (see the module docstring)."""

    def __init__(self, layout: TopicLayout, client_id: str, *, signing_key: Ed25519PrivateKey | None,
                 trust: TrustStore | None, key_record: bytes | None, stats: EndpointStatistics,
                 report: Callable[[StatusEvent], None]) -> None:
        self._layout = layout
        self._stats = stats
        self._report = report
        self.signer = Signer(signing_key, client_id, clock=lambda: time.time_ns() // 1000) if signing_key else None
        self.trust = trust
        self.verifier = Verifier(trust) if trust is not None else None
        self.key_record = key_record
        self._head = f"{layout.namespace}/k/"

    def attach(self, sender: Sender, receiver: Receiver) -> None:
        """Make ``sender`` seal and ``receiver`` check (and take key records) as configured."""
        if self.signer is not None:
            sender.signer = self.signer
            sender.signed_prefixes = self._layout.signed_prefixes()
        receiver.verifier = self.verifier
        if self.trust is not None and self.trust.fleet_key is not None:
            receiver.on_key_record = self.record_in

    def subscriptions(self) -> list[Subscribe]:
        """What to subscribe on every connect: the key records, when a fleet key can check them."""
        if self.trust is None or self.trust.fleet_key is None:
            return []
        return [Subscribe(self._head + "+", KEYS_SID, True)]

    def own_record(self) -> tuple[str, bytes] | None:
        """``(topic, payload)`` of this endpoint's key record, to publish retained on connect."""
        if self.key_record is None or self.signer is None:
            return None
        return self._head + self.signer.identity, self.key_record

    def record_in(self, topic: str, payload: bytes) -> None:
        """Take a key record received on ``topic``; a bad one is dropped, counted and reported."""
        trust = self.trust
        if not payload or trust is None:
            return  # a cleared record revokes nothing (see the module docstring)
        try:  # the fleet's signature binds identity and key, wherever the record was published
            now = time.time()
            trust.expire(now)
            trust.add_record(payload, now=now)
        except SignatureError as exc:
            self._stats.bad_signatures += 1
            self._report(ErrorEvent(ErrorCode.BAD_SIGNATURE, f"key record: {exc}", topic=topic))

    def verify(self, mqtt_topic: str, payload: bytes, *, sender: str, retained: bool) -> bytes:
        """See :meth:`broker_mqtt.Endpoint.verify`."""
        if self.verifier is None:
            return payload
        try:
            return self.verifier.open(mqtt_topic, payload, sender=sender, retained=retained)
        except SignatureError:
            self._stats.bad_signatures += 1
            raise
