"""Prometheus metrics of a node: its endpoint, elected stores, their elections and work queues.

Theory of operation
-------------------

Nothing here counts anything. The endpoint, the stores, the election transport and the queues
already keep their counters (:meth:`Endpoint.statistics`, :meth:`ElectedStore.statistics`,
``MQTTTransport.forged``, :meth:`WorkQueue.statistics`, ...); :class:`NodeCollector` is a
``prometheus_client`` custom collector that reads them when Prometheus scrapes, and turns each
into a metric family. So there is no background polling and no cost on the hot path: a scrape
costs one pass over the counters, plus one pass over each queue's local replica (its depth is
counted from the records, see :meth:`WorkQueue.statistics`).

The scrape runs on the node's event loop, not in a thread: :func:`serve_metrics` is a small HTTP
server on anyio (``GET /metrics``, and ``/``), so the collector reads the stores (whose SQLite
connections belong to the loop's thread) and the counters between two steps of the loop, never
in the middle of one. ``prometheus_client`` only formats (text or OpenMetrics, as the scraper
asks).

Names follow Prometheus' conventions: ``broker_mqtt_<subsystem>_<what>_<unit>``, ``_total`` on
counters; labels are ``endpoint`` (the endpoint's name), ``store``, ``queue`` and a few small
enumerations (``role``, ``state``, ``outcome``), never a topic or a peer. ``docs/operations.md``
lists every metric; ``docs/grafana-dashboard.json`` graphs them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING

import anyio
import anyio.abc
from anyio.abc import SocketAttribute
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry

from ._version import __version__
from .queue.errors import QueueError
from .store.replica_events import Role

if TYPE_CHECKING:
    from .endpoint.endpoint import Endpoint
    from .queue.attached import WorkQueue
    from .store.elected import ElectedStore

__all__ = ["NodeCollector", "node_registry", "open_metrics_listener", "serve_metrics", "ENDPOINT_COUNTERS"]

log = logging.getLogger("broker_mqtt.metrics")

#: ``EndpointStatistics`` field -> (metric name without ``_total``, help); all but ``pending`` (a gauge)
ENDPOINT_COUNTERS: dict[str, tuple[str, str]] = {
    "published": ("broker_mqtt_endpoint_messages_published",
                  "Node messages accepted by publish and unicast."),
    "publishes_sent": ("broker_mqtt_endpoint_publishes_sent",
                       "MQTT PUBLISH packets handed to the MQTT client (node messages are batched into them)."),
    "received": ("broker_mqtt_endpoint_messages_received",
                 "Node messages received (every kind: data, and the stores' and queues' traffic)."),
    "publishes_received": ("broker_mqtt_endpoint_publishes_received", "MQTT PUBLISH packets received."),
    "delivered": ("broker_mqtt_endpoint_messages_delivered", "Messages handed to local subscribers."),
    "malformed": ("broker_mqtt_endpoint_malformed_messages",
                  "Undecodable PUBLISHes or node messages, dropped."),
    "forged": ("broker_mqtt_endpoint_forged_messages",
               "Node messages dropped because their sender is not the one their topic names."),
    "bad_signatures": ("broker_mqtt_endpoint_bad_signatures",
                       "PUBLISHes dropped: unsigned, unknown signer, bad signature or a replay."),
    "rejected": ("broker_mqtt_endpoint_publishes_rejected",
                 "PUBLISHes the broker refused (PUBACK reason code >= 0x80)."),
    "qos0_lost": ("broker_mqtt_endpoint_qos0_messages_lost",
                  "QoS 0 messages on the wire when a connection dropped."),
    "missed": ("broker_mqtt_endpoint_messages_missed",
               "Numbered node messages that never came (gaps in a publisher's sequence: lost by the broker, or QoS 0)."),
    "duplicates": ("broker_mqtt_endpoint_messages_duplicates_dropped",
                   "Numbered node messages dropped as repeats (resent after a reconnect, redelivered)."),
    "late": ("broker_mqtt_endpoint_messages_late", "Numbered node messages delivered after being reported missed."),
    "reconnects": ("broker_mqtt_endpoint_reconnects", "Connections to the broker re-established."),
    "status_dropped": ("broker_mqtt_endpoint_status_events_dropped",
                       "Status events a full status stream could not take."),
    "subscriber_dropped": ("broker_mqtt_endpoint_subscriber_messages_dropped",
                           "Messages full subscriptions dropped by their overflow policy (drop_oldest, drop_newest)."),
}

#: ``ReplicaStatistics`` field -> (metric name without ``_total``, help)
STORE_COUNTERS: dict[str, tuple[str, str]] = {
    "records_applied": ("broker_mqtt_store_records_applied", "Log records applied here (as master or follower)."),
    "claims": ("broker_mqtt_store_claims", "Mastership claims this node started."),
    "masterships": ("broker_mqtt_store_masterships", "Claims that made this node the master."),
    "merges": ("broker_mqtt_store_merges", "Masterships that merged diverged histories."),
    "records_fetched": ("broker_mqtt_store_records_fetched", "Log records received by tail while catching up."),
    "snapshots_installed": ("broker_mqtt_store_snapshots_installed",
                            "Snapshots installed (or fetched for a merge)."),
    "snapshot_entries": ("broker_mqtt_store_snapshot_entries", "Entries (tombstones included) in those snapshots."),
    "malformed": ("broker_mqtt_store_malformed_messages", "Replication messages that did not decode, dropped."),
    "answers_lost": ("broker_mqtt_store_answers_lost",
                     "Writes of this node whose answer was lost (a later one showed the gap): sent again."),
    "writes_lost": ("broker_mqtt_store_writes_lost",
                    "Writes passed over for their writer: lost with an earlier master, or given up (NoMaster)."),
    "resolver_errors": ("broker_mqtt_store_resolver_errors",
                        "Keys whose custom resolver answer a merge here refused (last writer wins decided them)."),
}

#: asyncactor ``CoreStats`` field -> (metric name without ``_total``, help)
ELECTION_COUNTERS: dict[str, tuple[str, str]] = {
    "received": ("broker_mqtt_election_messages_received", "Election messages received."),
    "bad_messages": ("broker_mqtt_election_bad_messages", "Election messages the protocol refused."),
    "pings_sent": ("broker_mqtt_election_pings_sent", "Pings sent while holding the tag."),
    "splits_healed": ("broker_mqtt_election_splits_healed", "Split elections healed."),
}


def _counter(name: str, doc: str, labels: dict[str, str], value: float) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


def _gauge(name: str, doc: str, labels: dict[str, str], value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


class _Families:
    """Metric families by name, so that every store (or queue) adds its samples to one family."""

    def __init__(self) -> None:
        self._by_name: dict[str, Metric] = {}

    def add(self, kind: Callable[..., Metric], name: str, doc: str, labels: dict[str, str], value: float) -> None:
        family = self._by_name.get(name)
        if family is None:
            family = self._by_name[name] = kind(name, doc, labels=list(labels))
        family.add_metric(list(labels.values()), value)  # type: ignore[attr-defined]  # Counter/GaugeMetricFamily

    def counter(self, name: str, doc: str, labels: dict[str, str], value: float) -> None:
        self.add(CounterMetricFamily, name, doc, labels, value)

    def gauge(self, name: str, doc: str, labels: dict[str, str], value: float) -> None:
        self.add(GaugeMetricFamily, name, doc, labels, value)

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._by_name.values())


class NodeCollector(Collector):
    """Reads ``endpoint``'s counters, and those of ``stores`` (elected stores) and ``queues`` (work
    queues), at each scrape; see the module docstring. Stores and queues may be added later
    (:meth:`add_store`, :meth:`add_queue`); a queue's own store (``queue-<name>``) is reported
    among the stores."""

    def __init__(self, endpoint: Endpoint, stores: Iterable[ElectedStore] = (),
                 queues: Iterable[WorkQueue] = ()) -> None:
        self.endpoint = endpoint
        self.stores: list[ElectedStore] = list(stores)
        self.queues: list[WorkQueue] = list(queues)

    def add_store(self, store: ElectedStore) -> None:
        self.stores.append(store)

    def add_queue(self, queue: WorkQueue) -> None:
        self.queues.append(queue)

    def describe(self) -> Iterable[Metric]:
        return []  # registered without a dry run: the families depend on what is attached

    def collect(self) -> Iterable[Metric]:
        yield InfoMetricFamily("broker_mqtt_build", "The broker-mqtt version.", value={"version": __version__})
        yield from self._endpoint()
        families = _Families()
        for store in self._all_stores():
            if not store.closed:  # a closed store's copy is gone: it is no longer reported
                self._store(families, store)
        for queue in self.queues:
            if not queue.closed:
                self._queue(families, queue)
        yield from families

    # -- the parts ------------------------------------------------------------------------------------

    def _endpoint(self) -> Iterator[Metric]:
        ep = self.endpoint
        labels = {"endpoint": ep.name}
        stats = ep.statistics()
        for field, (name, doc) in ENDPOINT_COUNTERS.items():
            yield _counter(name, doc, labels, getattr(stats, field))
        yield _gauge("broker_mqtt_endpoint_messages_pending", "Messages queued or in flight now.", labels,
                     stats.pending)
        yield _gauge("broker_mqtt_endpoint_connected", "1 while connected to the broker, else 0.", labels,
                     1 if ep.connected else 0)
        yield _gauge("broker_mqtt_endpoint_peers", "Peers known now (announced, not lost or removed).", labels,
                     len(ep.peers()))

    def _all_stores(self) -> list[ElectedStore]:
        stores = list(self.stores)
        for queue in self.queues:
            if queue.store is not None and all(queue.store is not s for s in stores):
                stores.append(queue.store)
        return stores

    def _store(self, families: _Families, store: ElectedStore) -> None:
        labels = {"endpoint": self.endpoint.name, "store": store.name}
        replica = store.replica
        for role in Role:
            families.gauge("broker_mqtt_store_role", "1 for this replica's role (follower, claiming, master).",
                           {**labels, "role": role.value}, 1 if replica.role is role else 0)
        epoch = store.epoch
        families.gauge("broker_mqtt_store_epoch_term", "The term of the mastership this replica follows (0: none yet).",
                       labels, epoch[0] if epoch is not None else 0)
        families.gauge("broker_mqtt_store_has_master", "1 while a master is active and known here, else 0.", labels,
                       0 if store.master is None else 1)
        families.gauge("broker_mqtt_store_stale", "1 while this copy is stale (electing, catching up), else 0.",
                       labels, 1 if store.stale else 0)
        families.gauge("broker_mqtt_store_log_sequence",
                       "Sequence number of the last log record this replica holds.", labels, replica.state.last_seq)
        lag = replica.lag
        if lag is not None:
            families.gauge("broker_mqtt_store_replica_lag_records",
                           "At the master: records the live replica furthest behind has yet to acknowledge.",
                           labels, lag)
        families.gauge("broker_mqtt_store_members", "Live replicas this one hears from.", labels,
                       len(replica.members()))
        families.gauge("broker_mqtt_store_writes_pending", "Writes from this node not yet answered.", labels,
                       replica.pending_writes)
        families.gauge("broker_mqtt_store_keys", "Keys in the local copy.", labels, len(store))
        stats = store.statistics()
        for field, (name, doc) in STORE_COUNTERS.items():
            families.counter(name, doc, labels, getattr(stats, field))
        families.counter("broker_mqtt_store_forged_messages",
                         "Replication messages dropped: they claim another endpoint than their topic names.",
                         labels, store.forged)
        self._election(families, store, labels)

    def _election(self, families: _Families, store: ElectedStore, labels: dict[str, str]) -> None:
        transport = store.election_transport
        if transport is not None:
            families.counter("broker_mqtt_election_forged_messages",
                             "Election messages dropped: not sealed by, or not of, the client their topic names.",
                             labels, transport.forged)
            families.counter("broker_mqtt_election_malformed_messages",
                             "Election payloads that were not a CBOR map, dropped.", labels, transport.malformed)
        actor = store.election
        if actor is None:
            return
        families.gauge("broker_mqtt_election_tag_held", "1 while this node holds the election's tag, else 0.",
                       labels, 1 if actor.is_it else 0)
        core, _ = actor.statistics()
        for field, (name, doc) in ELECTION_COUNTERS.items():
            families.counter(name, doc, labels, getattr(core, field))
        for outcome in ("won", "lost"):
            families.counter("broker_mqtt_election_collisions", "Tag collisions with another node, by outcome.",
                             {**labels, "outcome": outcome}, getattr(core, f"collisions_{outcome}"))

    def _queue(self, families: _Families, queue: WorkQueue) -> None:
        try:
            stats = queue.statistics()
        except QueueError:  # a handle without a replica (replica=False) has no counts
            return
        labels = {"endpoint": self.endpoint.name, "queue": queue.name}
        families.gauge("broker_mqtt_queue_ready_messages", "Messages waiting for a consumer (the queue's depth).",
                       labels, stats.ready)
        families.gauge("broker_mqtt_queue_in_flight_messages", "Messages a consumer holds, not yet settled.",
                       labels, stats.acquired)
        families.gauge("broker_mqtt_queue_dead_letters", "Messages in the dead-letter queue.", labels, stats.dead)
        families.gauge("broker_mqtt_queue_retained_messages",
                       "Accepted messages kept until every log reader has read past them.", labels, stats.retained)
        families.gauge("broker_mqtt_queue_redeliveries",
                       "Deliveries beyond the first of the messages not yet accepted.", labels, stats.redeliveries)


def node_registry(endpoint: Endpoint, stores: Sequence[ElectedStore] = (), queues: Sequence[WorkQueue] = (), *,
                  process: bool = True) -> tuple[CollectorRegistry, NodeCollector]:
    """A registry with a :class:`NodeCollector` for the node (and, with ``process``, the standard
    ``process_*``, ``python_info`` and ``python_gc_*`` metrics)."""
    from prometheus_client import GCCollector, PlatformCollector, ProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    collector = NodeCollector(endpoint, stores, queues)
    registry.register(collector)
    if process:
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
    return registry, collector


_MAX_REQUEST = 16 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 500: "Internal Server Error"}


async def serve_metrics(registry: CollectorRegistry, listener: anyio.abc.Listener[anyio.abc.SocketStream]) -> None:
    """Answer ``GET /metrics`` (and ``GET /``) on ``listener`` with ``registry``'s metrics, in the
    format the scraper's ``Accept`` header asks for, until cancelled (then ``listener`` is closed).
    One request per connection."""
    async with listener:
        await listener.serve(partial(_answer, registry))


async def open_metrics_listener(host: str, port: int) -> tuple[anyio.abc.Listener[anyio.abc.SocketStream], int]:
    """A TCP listener on ``host``:``port`` (0: any free port) and the port it got. Raises OSError."""
    listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    return listener, int(listener.extra(SocketAttribute.local_port))


async def _answer(registry: CollectorRegistry, stream: anyio.abc.SocketStream) -> None:
    async with stream:
        try:
            with anyio.fail_after(10):
                status, headers, body = _respond(registry, await _read_head(stream))
                head = f"HTTP/1.1 {status} {_REASONS[status]}\r\n" + "".join(
                    f"{k}: {v}\r\n" for k, v in {**headers, "Content-Length": str(len(body)),
                                                  "Connection": "close"}.items()) + "\r\n"
                await stream.send(head.encode("latin-1") + body)
        except (TimeoutError, OSError, anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the scraper went away or sent too little: nothing to answer
        except Exception:  # never let one request take the node down
            log.exception("metrics: answering a request failed")


async def _read_head(stream: anyio.abc.SocketStream) -> bytes | None:
    """The request's head (request line and headers), or None when it is too long."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > _MAX_REQUEST:
            return None
        data += await stream.receive(4096)
    return data.split(b"\r\n\r\n", 1)[0]


def _respond(registry: CollectorRegistry, head: bytes | None) -> tuple[int, dict[str, str], bytes]:
    text = {"Content-Type": "text/plain; charset=utf-8"}
    if head is None:
        return 431, text, b"request too large\n"
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split()
    if len(parts) != 3:
        return 400, text, b"bad request\n"
    method, target, _ = parts
    if method != "GET":
        return 405, {**text, "Allow": "GET"}, b"only GET\n"
    if target.split("?", 1)[0] not in ("/metrics", "/"):
        return 404, text, b"metrics are at /metrics\n"
    accept = next((line.split(":", 1)[1].strip() for line in lines[1:] if line.lower().startswith("accept:")), "")
    encoder, content_type = choose_encoder(accept)
    try:
        body = encoder(registry)
    except Exception:
        log.exception("metrics: collecting failed")
        return 500, text, b"collecting the metrics failed (see the node's log)\n"
    return 200, {"Content-Type": content_type}, body
