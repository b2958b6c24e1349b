"""The channel's errors: whose fault it is (the peer's wire data, the peer's protocol, the caller)."""

from __future__ import annotations

from ..errors import DecodeError

__all__ = ["ChannelError", "ChannelDecodeError", "ChannelProtocolError", "ChannelUsageError"]


class ChannelError(Exception):
    """Base class of every error raised by this module."""


class ChannelDecodeError(ChannelError, DecodeError):
    """Wire data that is not a well-formed channel message (the sending peer's fault). A
    :class:`broker_mqtt.DecodeError`: one ``except DecodeError`` catches every malformed input."""


class ChannelProtocolError(ChannelError):
    """A well-formed message that breaks the protocol (the peer's fault).

    The receiving object is left exactly as it was before the call.
    """


class ChannelUsageError(ChannelError):
    """The caller misused the API (e.g. a negative time step). State is unchanged."""
