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
from ..transport.broker_url import BrokerURL, TLSOptions
from ..wire.topics import validate_prefix, validate_topic
from .rowid import ROW_ID_KEY

__all__ = ["Connection", "SinkOptions", "SourceOptions"]

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
        parsed = BrokerURL.parse(url)
        username, password = _get(options, "username"), _get(options, "password")
        if username is not None or password is not None:
            user = quote(username if username is not None else (parsed.username or ""), safe="")
            pw = password if password is not None else parsed.password
            auth = user + (f":{quote(pw, safe='')}" if pw is not None else "")
            url = f"{'mqtts' if parsed.tls else 'mqtt'}://{auth}@{parsed.host}:{parsed.port}"
            parsed = BrokerURL.parse(url)
        tls_keys = ("tlsCaFile", "tlsCertFile", "tlsKeyFile", "tlsVerify")
        tls: TLSOptions | None = None
        if parsed.tls or any(_get(options, k) is not None for k in tls_keys):
            if not parsed.tls:
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
        return f"Connection({BrokerURL.parse(self.broker)}, namespace={self.namespace!r}, qos={self.qos})"


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

    @classmethod
    def parse(cls, options: Mapping[str, str], column_names: list[str] | None = None) -> SinkOptions:
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


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Options of ``spark.readStream`` (docs/spark.md has the table)."""

    connection: Connection
    topics: tuple[str, ...]
    partitions: int  #: Spark partitions per micro-batch
    max_buffered: int  #: received rows held for Spark at most; beyond it the receiver waits

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        raw = _get(options, "topics")
        if not raw:
            raise UsageError("option 'topics' (comma-separated topic prefixes) is required")
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        for t in topics:
            validate_prefix(t)
        return cls(
            connection=Connection.parse(options, default_name="spark-source"),
            topics=topics,
            partitions=int(_number(options, "numPartitions", 1, low=1)),
            max_buffered=int(_number(options, "maxBufferedRows", 1_000_000, low=1)),
        )
