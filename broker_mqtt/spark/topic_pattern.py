"""Plain MQTT topics with named levels: ``site1/{device}/telemetry``.

Theory of operation. Ordinary devices put who they are into the topic. The source reads a
:class:`TopicPattern`: an MQTT filter in which a level may be written ``{name}``; it subscribes
the filter with ``+`` in that level and gives each received topic's level as column ``name``. The
sink writes through a :class:`TopicTemplate`: a topic in which ``{column}`` placeholders are
replaced by the row's values (``site1/{device}/cmd``). A value that would change the topic's
shape (a ``/``, a wildcard, a NUL, nothing at all) fails the row instead of being escaped, so a
device's topic is exactly what it subscribed. MQTT's rules (MQTT 5 §4.7): ``#`` only as the last
level, ``+`` only as a whole level, at most 65,535 bytes of UTF-8, no NUL. No pyspark here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import TopicError
from ..wire.topics import mqtt_filter_matches, validate_mqtt_filter, validate_mqtt_topic

__all__ = ["TopicPattern", "TopicTemplate", "level_columns"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True, slots=True)
class TopicPattern:
    """An MQTT filter whose ``{name}`` levels are also columns (``site1/{device}/+/#``)."""

    text: str  #: as the user wrote it
    mqtt_filter: str  #: what is subscribed: each ``{name}`` level as ``+``
    names: tuple[str, ...]  #: the named levels, in order
    positions: tuple[int, ...]  #: the level index of each name

    @classmethod
    def parse(cls, text: str) -> TopicPattern:
        """Raise :class:`TopicError` for what MQTT cannot subscribe or a malformed ``{name}``."""
        if text.startswith("$share/"):
            raise TopicError(f"topic filter {text!r}: shared subscriptions are not supported here")
        levels = text.split("/")
        names: list[str] = []
        positions: list[int] = []
        out: list[str] = []
        for i, level in enumerate(levels):
            if level.startswith("{") and level.endswith("}"):
                name = level[1:-1]
                if not _NAME.fullmatch(name):
                    raise TopicError(f"topic filter {text!r}: {level!r} must name a column: letters, digits, '_'")
                if name in names:
                    raise TopicError(f"topic filter {text!r} names level {name!r} twice")
                names.append(name)
                positions.append(i)
                out.append("+")
                continue
            if "{" in level or "}" in level:
                raise TopicError(f"topic filter {text!r}: a named level is a whole level, like {{device}}")
            out.append(level)
        return cls(text, validate_mqtt_filter("/".join(out)), tuple(names), tuple(positions))

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is one this pattern subscribes (MQTT 5 §4.7, ``$`` topics included)."""
        return mqtt_filter_matches(self.mqtt_filter, topic)

    def values(self, topic: str) -> tuple[str, ...] | None:
        """The named levels of ``topic``, or None when the pattern does not match it."""
        if not self.matches(topic):
            return None
        levels = topic.split("/")
        return tuple(levels[i] for i in self.positions)


def level_columns(patterns: Sequence[TopicPattern]) -> tuple[str, ...]:
    """The level columns of a source over ``patterns``: every name, in order of first appearance."""
    return tuple(dict.fromkeys(n for p in patterns for n in p.names))


@dataclass(frozen=True, slots=True)
class TopicTemplate:
    """A topic with ``{column}`` placeholders filled from each row (``site1/{device}/cmd``)."""

    text: str
    pieces: tuple[str, ...]  #: literal text around the placeholders (one more than columns)
    columns: tuple[str, ...]  #: the placeholders' columns, in order (a column may repeat)

    @classmethod
    def parse(cls, text: str) -> TopicTemplate:
        """Raise :class:`TopicError` for wildcards or malformed placeholders."""
        validate_mqtt_topic(text.replace("+", "_").replace("#", "_"))  # wildcards: said better below
        pieces: list[str] = []
        columns: list[str] = []
        last = 0
        for m in _PLACEHOLDER.finditer(text):
            if not _NAME.fullmatch(m.group(1)):
                raise TopicError(f"topic {text!r}: {m.group(0)!r} must name a column: letters, digits, '_'")
            pieces.append(text[last:m.start()])
            columns.append(m.group(1))
            last = m.end()
        pieces.append(text[last:])
        literal = "".join(pieces)
        if "{" in literal or "}" in literal:
            raise TopicError(f"topic {text!r}: unbalanced '{{' or '}}'")
        if "+" in literal or "#" in literal:
            raise TopicError(f"topic {text!r} holds an MQTT wildcard ('+' or '#'); a topic to publish on may not")
        return cls(text, tuple(pieces), tuple(columns))

    @property
    def constant(self) -> str | None:
        """The topic itself when the template has no placeholders."""
        return self.text if not self.columns else None

    def format(self, values: Mapping[str, Any]) -> str:
        """The topic for one row's ``values``; :class:`TopicError` names the column that cannot be a level."""
        if not self.columns:
            return self.text
        out = [self.pieces[0]]
        for column, piece in zip(self.columns, self.pieces[1:], strict=True):
            out.append(level_text(column, values.get(column)))
            out.append(piece)
        return "".join(out)


def level_text(column: str, value: Any) -> str:
    """``value`` as (part of) one topic level; :class:`TopicError` when it cannot be one."""
    if isinstance(value, bool) or value is None:
        raise TopicError(f"column {column!r} is {value!r}: a topic level needs a string or an integer")
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str):
        raise TopicError(f"column {column!r} holds a {type(value).__name__}: a topic level needs a string or an integer")
    if value == "" or "/" in value or "+" in value or "#" in value or "\0" in value:
        raise TopicError(f"column {column!r} value {value!r} cannot be a topic level "
                         "(empty, or holds '/', '+', '#' or NUL)")
    return value
