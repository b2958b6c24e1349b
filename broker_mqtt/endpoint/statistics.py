"""The endpoint's counters: what :meth:`Endpoint.statistics() <broker_mqtt.Endpoint.statistics>` returns."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EndpointStatistics"]


@dataclass(slots=True)
class EndpointStatistics:
    """Counters since the endpoint started (see :meth:`Endpoint.statistics`)."""

    published: int = 0  #: node messages accepted by publish/unicast
    publishes_sent: int = 0  #: PUBLISH packets handed to the MQTT client
    received: int = 0  #: data node messages received
    publishes_received: int = 0  #: PUBLISH packets received
    delivered: int = 0  #: messages handed to subscribers
    malformed: int = 0  #: undecodable PUBLISHes or node messages
    forged: int = 0  #: node messages dropped: their sender is not the one their topic names
    bad_signatures: int = 0  #: PUBLISHes dropped: unsigned, unknown signer, bad signature or a replay
    rejected: int = 0  #: PUBLISHes the broker refused (PUBACK reason >= 0x80)
    qos0_lost: int = 0  #: QoS 0 messages on the wire when a connection dropped
    missed: int = 0  #: numbered messages that never came (gaps: lost by the broker, or QoS 0)
    duplicates: int = 0  #: numbered messages dropped as repeats (resent after a reconnect, redelivered)
    late: int = 0  #: numbered messages delivered after being reported missed
    reconnects: int = 0
    status_dropped: int = 0  #: status events a full status stream could not take
    subscriber_dropped: int = 0  #: messages full subscriptions dropped (their overflow policy: drop_oldest/newest)
    pending: int = 0  #: messages queued or in flight now
