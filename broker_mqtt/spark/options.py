"""The data source's options, parsed once on the driver into small picklable dataclasses.

Spark hands options over as a case-insensitive map of strings. They are checked on the driver
(when the writer or reader is created), so a bad option fails the query before any task runs;
executors receive only these dataclasses (pickled with the writer), never a driver-side object.
No pyspark here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

from ..errors import UsageError
from ..transport.broker_url import TLSOptions, parse_broker_urls
from ..wire.topics import validate_prefix, validate_topic
from .rowid import ROW_ID_KEY
from .topic_pattern import TopicPattern, TopicTemplate

__all__ = ["PAYLOAD_FORMATS", "SPARKPLUG_COLUMNS", "Connection", "SinkOptions", "SourceOptions"]

#: ``payload``: this project's node messages, or what ordinary devices send on plain MQTT topics
PAYLOAD_FORMATS = ("node", "json", "raw", "sparkplug")
#: the columns a Sparkplug B command sink reads (``device`` may be absent or null: a node command)
SPARKPLUG_COLUMNS = ("group", "edge_node", "device", "metric", "value")
_SPARKPLUG_ALL = "spBv1.0/#"

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _get(options: Mapping[str, str], key: str) -> str | None:
    # Spark's CaseInsensitiveDict lower-cases keys; accept plain dicts (tests) in any case too.
    value = options.get(key)
    if value is None:
        value = options.get(key.lower())
    return value


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    value = _get(options, key)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise UsageError(f"option {key!r} must be true or false, got {value!r}")


def _payload(options: Mapping[str, str]) -> str:
    payload = (_get(options, "payload") or "node").lower()
    if payload not in PAYLOAD_FORMATS:
        raise UsageError(f"option 'payload' must be one of {', '.join(PAYLOAD_FORMATS)}; got {payload!r}")
    return payload


def _number(options: Mapping[str, str], key: str, default: float, *, low: float, kind: type = int) -> float:
    value = _get(options, key)
    if value is None:
        return default
    try:
        number: float = kind(value)
    except ValueError:
        raise UsageError(f"option {key!r} must be a {kind.__name__}, got {value!r}") from None
    if number < low:
        raise UsageError(f"option {key!r} must be at least {low}, got {value!r}")
    return number


@dataclass(frozen=True, slots=True)
class Connection:
    """How an executor (or the driver, for reading) reaches the broker."""

    broker: str  #: URL incl. credentials (never printed: see :meth:`__repr__`)
    namespace: str
    tls: TLSOptions | None
    qos: int
    name: str
    connect_timeout: float

    @classmethod
    def parse(cls, options: Mapping[str, str], *, default_name: str) -> Connection:
        url = _get(options, "broker") or os.environ.get("BROKER_MQTT_URL")
        if not url:
            raise UsageError("option 'broker' (mqtt://host:port or mqtts://...) is required "
                             "(or set $BROKER_MQTT_URL on the driver)")
        urls = parse_broker_urls(url)  # several, separated by commas: a clustered broker's nodes
        username, password = _get(options, "username"), _get(options, "password")
        if username is not None or password is not None:
            rebuilt = []
            for parsed in urls:
                user = quote(username if username is not None else (parsed.username or ""), safe="")
                pw = password if password is not None else parsed.password
                auth = user + (f":{quote(pw, safe='')}" if pw is not None else "")
                rebuilt.append(f"{'mqtts' if parsed.tls else 'mqtt'}://{auth}@{parsed.host}:{parsed.port}")
            url = ",".join(rebuilt)
            urls = parse_broker_urls(url)
        parsed = urls[0]
        tls_keys = ("tlsCaFile", "tlsCertFile", "tlsKeyFile", "tlsVerify")
        tls: TLSOptions | None = None
        if any(u.tls for u in urls) or any(_get(options, k) is not None for k in tls_keys):
            if not all(u.tls for u in urls):
                raise UsageError("TLS options need an mqtts:// broker URL")
            tls = TLSOptions(
                ca_file=_get(options, "tlsCaFile"),
                cert_file=_get(options, "tlsCertFile"),
                key_file=_get(options, "tlsKeyFile"),
                verify=_bool(options, "tlsVerify", True),
            )
        qos = int(_number(options, "qos", 1, low=0))
        if qos not in (0, 1):
            raise UsageError(f"option 'qos' must be 0 or 1, got {qos}")
        return cls(
            broker=url,
            namespace=_get(options, "namespace") or "bm",
            tls=tls,
            qos=qos,
            name=_get(options, "name") or default_name,
            connect_timeout=_number(options, "connectTimeout", 10.0, low=0.1, kind=float),
        )

    def __repr__(self) -> str:
        brokers = ",".join(str(u) for u in parse_broker_urls(self.broker))
        return f"Connection({brokers}, namespace={self.namespace!r}, qos={self.qos})"


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """Options of ``df.write`` / ``df.writeStream`` (docs/spark.md has the table)."""

    connection: Connection
    topic: str | None  #: every row on this topic ...
    topic_column: str | None  #: ... or each row on the topic in this string column
    keep_topic_column: bool  #: include the topic column in the emitted map too
    id_key: str  #: reserved key for the row id; "" = emit no row ids
    decimals: str  #: "string" (exact) or "float"
    batch_bytes: int  #: largest PUBLISH the endpoint coalesces messages into
    max_pending: int  #: bound on messages queued or unacknowledged per task
    flush_timeout: float  #: a task fails if its messages are not acknowledged within this
    store: str | None = None  #: put rows into this elected store instead of publishing them ...
    key: tuple[str, ...] | None = None  #: ... keyed by these columns (the rest is the value)
    payload: str = "node"  #: node messages, or plain PUBLISHes: "json", "raw" or "sparkplug" commands
    template: TopicTemplate | None = None  #: plain topics: the topic, ``{column}`` placeholders filled per row
    retain: bool = False  #: plain topics: PUBLISH with the retain flag
    payload_column: str = "payload"  #: ``payload=raw``: the binary or string column sent as is

    @classmethod
    def parse(cls, options: Mapping[str, str], column_names: list[str] | None = None) -> SinkOptions:
        payload = _payload(options)
        if payload != "node":
            return cls._parse_plain(options, column_names, payload)
        for plain_only in ("retain", "payloadColumn"):
            if _get(options, plain_only) is not None:
                raise UsageError(f"option {plain_only!r} is for plain topics (payload json, raw or sparkplug)")
        topic, topic_column = _get(options, "topic"), _get(options, "topicColumn")
        store, key = _get(options, "store"), _get(options, "key")
        if sum(x is not None for x in (topic, topic_column, store)) != 1:
            raise UsageError("give exactly one of the options 'topic', 'topicColumn' and 'store'")
        keys: tuple[str, ...] | None = None
        if store is not None:
            if not store or "/" in store or "+" in store or "#" in store:
                raise UsageError(f"option 'store' must be a store name, got {store!r}")
            if not key:
                raise UsageError("option 'store' needs option 'key' (the key column, or comma-separated columns)")
            keys = tuple(k.strip() for k in key.split(",") if k.strip())
            missing = [k for k in keys if column_names is not None and k not in column_names]
            if missing:
                raise UsageError(f"key columns {missing} are not columns of the DataFrame ({column_names})")
        elif key is not None:
            raise UsageError("option 'key' is for the store sink: give option 'store' too")
        if topic is not None:
            validate_topic(topic)
        if topic_column is not None and column_names is not None and topic_column not in column_names:
            raise UsageError(f"topicColumn {topic_column!r} is not a column of the DataFrame ({column_names})")
        decimals = (_get(options, "decimals") or "string").lower()
        if decimals not in ("string", "float"):
            raise UsageError(f"option 'decimals' must be 'string' or 'float', got {decimals!r}")
        id_key = _get(options, "idKey")
        return cls(
            connection=Connection.parse(options, default_name="spark-sink"),
            topic=topic,
            topic_column=topic_column,
            keep_topic_column=_bool(options, "keepTopicColumn", False),
            id_key=ROW_ID_KEY if id_key is None else id_key,
            decimals=decimals,
            batch_bytes=int(_number(options, "batchBytes", 256 * 1024, low=1024)),
            max_pending=int(_number(options, "maxPendingMessages", 50_000, low=1)),
            flush_timeout=_number(options, "flushTimeout", 60.0, low=0.1, kind=float),
            store=store,
            key=keys,
        )

    @classmethod
    def _parse_plain(cls, options: Mapping[str, str], column_names: list[str] | None, payload: str) -> SinkOptions:
        for node_only in ("store", "key", "idKey", "decimals"):
            if _get(options, node_only) is not None:
                raise UsageError(f"option {node_only!r} is for node messages, not payload={payload}")
        topic, topic_column = _get(options, "topic"), _get(options, "topicColumn")
        template: TopicTemplate | None = None
        payload_column = _get(options, "payloadColumn") or "payload"
        needed: list[str] = []
        if payload == "sparkplug":
            if topic is not None or topic_column is not None:
                raise UsageError("payload=sparkplug builds each topic from the columns group, edge_node and "
                                 "device (NCMD without a device, DCMD with one): give no 'topic' or 'topicColumn'")
            needed = [c for c in SPARKPLUG_COLUMNS if c != "device"]
        else:
            if (topic is None) == (topic_column is None):
                raise UsageError(f"payload={payload} needs exactly one of the options 'topic' (a topic, "
                                 "'{column}' placeholders allowed, e.g. site1/{device}/cmd) and 'topicColumn'")
            if topic is not None:
                template = TopicTemplate.parse(topic)
                needed += template.columns
            else:
                assert topic_column is not None
                needed.append(topic_column)
            if payload == "raw":
                needed.append(payload_column)
        missing = [c for c in dict.fromkeys(needed) if column_names is not None and c not in column_names]
        if missing:
            raise UsageError(f"payload={payload}: columns {missing} are not columns of the DataFrame ({column_names})")
        return cls(
            connection=Connection.parse(options, default_name="spark-sink"),
            topic=None,
            topic_column=topic_column,
            keep_topic_column=_bool(options, "keepTopicColumn", False),
            id_key="",
            decimals="string",
            batch_bytes=int(_number(options, "batchBytes", 256 * 1024, low=1024)),
            max_pending=int(_number(options, "maxPendingMessages", 50_000, low=1)),
            flush_timeout=_number(options, "flushTimeout", 60.0, low=0.1, kind=float),
            payload=payload,
            template=template,
            retain=_bool(options, "retain", False),
            payload_column=payload_column,
        )


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Options of ``spark.readStream`` (docs/spark.md has the table)."""

    connection: Connection
    topics: tuple[str, ...]  #: node: topic prefixes; plain payloads: MQTT filters, ``{name}`` levels allowed
    partitions: int  #: Spark partitions per micro-batch
    max_buffered: int  #: received rows held for Spark at most; beyond it the receiver waits
    payload: str = "node"  #: node messages, or plain PUBLISHes: "json", "raw" or "sparkplug"
    patterns: tuple[TopicPattern, ...] = ()  #: plain payloads: the parsed ``topics``
    json_schema: str | None = None  #: ``payload=json``: DDL of the document's fields (None: the text as is)
    corrupt_column: str = "_corrupt_record"  #: ``payload=json`` with a schema: what failed to parse
    read_seconds: float = 2.0  #: batch reads: how long to collect messages after subscribing
    rebirth: bool = True  #: ``payload=sparkplug``: ask edge nodes whose births were missed to send them again

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        payload = _payload(options)
        raw = _get(options, "topics")
        if payload == "sparkplug" and not raw:
            raw = _SPARKPLUG_ALL
        if not raw:
            raise UsageError("option 'topics' is required: comma-separated topic prefixes (payload=node) "
                             "or MQTT topic filters (payload json or raw; e.g. site1/{device}/telemetry)")
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        patterns: tuple[TopicPattern, ...] = ()
        if payload == "node":
            for t in topics:
                validate_prefix(t)
            for plain_only in ("jsonSchema", "columnNameOfCorruptRecord"):
                if _get(options, plain_only) is not None:
                    raise UsageError(f"option {plain_only!r} is for payload=json")
        else:
            patterns = tuple(TopicPattern.parse(t) for t in topics)
            if payload == "sparkplug" and any(p.names for p in patterns):
                raise UsageError("payload=sparkplug has its own level columns (group, edge_node, device): "
                                 "give plain filters such as spBv1.0/plant1/#")
        if _get(options, "rebirth") is not None and payload != "sparkplug":
            raise UsageError("option 'rebirth' is for payload=sparkplug")
        json_schema = _get(options, "jsonSchema")
        if json_schema is not None and payload != "json":
            raise UsageError("option 'jsonSchema' is for payload=json")
        if json_schema is not None and not json_schema.strip():
            raise UsageError("option 'jsonSchema' is empty: give the document's fields as DDL, e.g. 'temp DOUBLE'")
        return cls(
            connection=Connection.parse(options, default_name="spark-source"),
            topics=topics,
            partitions=int(_number(options, "numPartitions", 1, low=1)),
            max_buffered=int(_number(options, "maxBufferedRows", 1_000_000, low=1)),
            payload=payload,
            patterns=patterns,
            json_schema=json_schema,
            corrupt_column=_get(options, "columnNameOfCorruptRecord") or "_corrupt_record",
            read_seconds=_number(options, "readSeconds", 2.0, low=0.0, kind=float),
            rebirth=_bool(options, "rebirth", True),
        )
