"""Broker topics and how they map onto MQTT topics (docs/wire-format.md §2).

A broker topic is a ``/``-separated path such as ``/sensors/temp/1`` or ``zeek/events``. One
leading ``/`` is insignificant (``/a/b`` and ``a/b`` name the same topic); every level must be
non-empty and must not hold the MQTT wildcards ``+`` or ``#`` or a NUL character. Such topics are
*rejected* with :class:`TopicError`, never escaped, so that what a subscriber sees is exactly what
was published.

Subscriptions use Zeek Broker's prefix semantics *by level*: a subscription to ``/sensors``
receives ``/sensors`` and ``/sensors/temp/1`` but not ``/sensorsX``. The MQTT filter for prefix
``P`` is ``<ns>/d/P/#`` (``#`` also matches the parent level itself), and the prefix ``/`` (or
the empty string) subscribes to every data topic.

Layout under a namespace ``ns`` (default ``bm``). Every topic an endpoint publishes to names its
own MQTT client id ``S`` (:mod:`.identity`), so that a broker ACL can let it write as itself only,
and receivers drop what claims another sender (docs/security.md)::

    ns/d/S/<topic>          data: batches of node messages that S published on <topic>
    ns/u/<D hex>/S/<topic>  unicast: node messages from S on <topic> for endpoint D only
    ns/p/S                  presence of S: retained announcement; empty retained payload = lost
    ns/actor/store/<name>/S election messages of S for elected store <name>

A subscription to prefix ``P`` is ``ns/d/+/P/#``; an endpoint receives its unicasts on
``ns/u/<own id hex>/#``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..errors import TopicError

__all__ = ["TopicLayout", "validate_topic", "validate_prefix", "prefix_matches", "validate_mqtt_filter",
           "validate_mqtt_topic", "mqtt_filter_matches"]

_MAX_TOPIC_BYTES = 60_000  # MQTT topics are at most 65,535 bytes of UTF-8, namespace included


def _split(topic: str, *, what: str, allow_root: bool) -> tuple[str, ...]:
    if not isinstance(topic, str):
        raise TopicError(f"{what} must be a str, not {type(topic).__name__}")
    body = topic[1:] if topic.startswith("/") else topic
    if body == "":
        if allow_root:
            return ()
        raise TopicError(f"{what} {topic!r} is empty")
    if len(body.encode("utf-8", "surrogatepass")) > _MAX_TOPIC_BYTES:
        raise TopicError(f"{what} is longer than {_MAX_TOPIC_BYTES} bytes")
    levels = tuple(body.split("/"))
    for level in levels:
        if level == "":
            raise TopicError(f"{what} {topic!r} has an empty level ('//' or a trailing '/')")
        if "+" in level or "#" in level:
            raise TopicError(f"{what} {topic!r} contains an MQTT wildcard ('+' or '#')")
        if "\0" in level:
            raise TopicError(f"{what} {topic!r} contains a NUL character")
    try:
        body.encode("utf-8")
    except UnicodeEncodeError:
        raise TopicError(f"{what} {topic!r} is not valid UTF-8 (lone surrogate)") from None
    return levels


@lru_cache(maxsize=4096)
def validate_topic(topic: str) -> tuple[str, ...]:
    """Return the levels of a publishable topic; raise :class:`TopicError` if MQTT cannot carry it."""
    return _split(topic, what="topic", allow_root=False)


@lru_cache(maxsize=4096)
def validate_prefix(prefix: str) -> tuple[str, ...]:
    """Return the levels of a subscription prefix (``()`` for ``/``, i.e. everything)."""
    return _split(prefix, what="topic prefix", allow_root=True)


def prefix_matches(prefix: tuple[str, ...], topic: tuple[str, ...]) -> bool:
    """True when ``topic`` lies under ``prefix`` (level-wise, Zeek Broker's prefix semantics)."""
    return topic[: len(prefix)] == prefix


# -- plain MQTT topics and filters (MQTT 5 §4.7), for raw subscriptions and ordinary devices ------------

_MQTT_MAX_BYTES = 65_535


def _check_mqtt_text(text: object, what: str) -> str:
    if not isinstance(text, str):
        raise TopicError(f"{what} must be a str, not {type(text).__name__}")
    if text == "":
        raise TopicError(f"{what} must not be empty")
    if "\0" in text:
        raise TopicError(f"{what} {text!r} contains a NUL character")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise TopicError(f"{what} {text!r} is not valid UTF-8 (lone surrogate)") from None
    if size > _MQTT_MAX_BYTES:
        raise TopicError(f"{what} is longer than {_MQTT_MAX_BYTES} bytes in UTF-8")
    return text


def validate_mqtt_filter(mqtt_filter: str) -> str:
    """``mqtt_filter`` if MQTT accepts it as a topic filter (``+`` only as a whole level, ``#`` only
    as the whole last level); :class:`TopicError` saying why not."""
    _check_mqtt_text(mqtt_filter, "MQTT filter")
    levels = mqtt_filter.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            raise TopicError(f"MQTT filter {mqtt_filter!r}: '#' must be a whole level, and the last one")
        if "+" in level and level != "+":
            raise TopicError(f"MQTT filter {mqtt_filter!r}: '+' must be a whole level")
    return mqtt_filter


def validate_mqtt_topic(topic: str) -> str:
    """``topic`` if MQTT accepts it as a topic to publish on (no wildcards); :class:`TopicError`."""
    _check_mqtt_text(topic, "MQTT topic")
    if "+" in topic or "#" in topic:
        raise TopicError(f"MQTT topic {topic!r}: cannot publish on a wildcard ('+' or '#')")
    return topic


def mqtt_filter_matches(mqtt_filter: str, topic: str) -> bool:
    """Whether the (valid) ``mqtt_filter`` matches ``topic``, per MQTT 5 §4.7: ``#`` also matches the
    parent level, and wildcards in the first level do not match topics that begin with ``$``."""
    if topic.startswith("$") and mqtt_filter[:1] in ("+", "#"):
        return False
    f_levels, t_levels = mqtt_filter.split("/"), topic.split("/")
    for i, level in enumerate(f_levels):
        if level == "#":
            return True
        if i >= len(t_levels) or (level != "+" and level != t_levels[i]):
            return False
    return len(f_levels) == len(t_levels)


def covers(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """True when every topic under prefix ``b`` is also under prefix ``a``."""
    return prefix_matches(a, b)


@dataclass(frozen=True, slots=True)
class TopicLayout:
    """The MQTT topics of one namespace. ``namespace`` must itself be a valid topic."""

    namespace: str = "bm"

    def __post_init__(self) -> None:
        validate_topic(self.namespace)
        if self.namespace.startswith(("/", "$")):
            raise TopicError("namespace must not start with '/' or '$'")

    def data(self, topic: str, sender: str) -> str:
        """MQTT topic that carries messages client ``sender`` publishes on broker ``topic``."""
        return f"{self.namespace}/d/{sender}/" + "/".join(validate_topic(topic))

    def data_filter(self, prefix: str) -> str:
        """MQTT filter that receives every topic under broker ``prefix``, from every sender."""
        levels = validate_prefix(prefix)
        if not levels:
            return self.namespace + "/d/#"
        return self.namespace + "/d/+/" + "".join(level + "/" for level in levels) + "#"

    def unicast(self, endpoint_hex: str, sender: str, topic: str) -> str:
        """MQTT topic of a unicast from client ``sender`` on broker ``topic`` to the endpoint whose
        id in hex is ``endpoint_hex``."""
        return f"{self.namespace}/u/{endpoint_hex}/{sender}/" + "/".join(validate_topic(topic))

    def unicast_filter(self, endpoint_hex: str) -> str:
        """MQTT filter of every unicast to the endpoint whose id in hex is ``endpoint_hex``."""
        return f"{self.namespace}/u/{endpoint_hex}/#"

    def presence(self, client_id: str) -> str:
        return f"{self.namespace}/p/{client_id}"

    def presence_filter(self) -> str:
        return f"{self.namespace}/p/+"

    def presence_client(self, mqtt_topic: str) -> str | None:
        """The client id of a presence topic, or None if ``mqtt_topic`` is not one."""
        head = f"{self.namespace}/p/"
        if not mqtt_topic.startswith(head):
            return None
        client = mqtt_topic[len(head):]
        return client if client and "/" not in client else None

    def election(self, store: str) -> str:
        """Base of elected store ``store``'s election topics: each node publishes on
        ``<base>/<its client id>`` (``MQTTTransport(..., bound=True)``)."""
        return f"{self.namespace}/actor/store/{store}"

    def signed_prefixes(self) -> tuple[str, ...]:
        """Heads of the topics whose PUBLISHes a signing endpoint seals (all of the layout's)."""
        ns = self.namespace
        return (f"{ns}/d/", f"{ns}/u/", f"{ns}/p/", f"{ns}/actor/store/")

    def split_sender(self, mqtt_topic: str, head: str) -> tuple[str, str] | None:
        """``(sender, broker topic)`` of an MQTT topic ``head + S + "/" + topic``; None if not one."""
        if not mqtt_topic.startswith(head):
            return None
        sender, slash, topic = mqtt_topic[len(head):].partition("/")
        if not sender or not slash or not topic:
            return None
        return sender, topic
