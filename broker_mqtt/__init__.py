"""broker_mqtt: Zeek Broker's model over MQTT 5.

Endpoints with unique ids exchange CBOR-encoded node messages through any MQTT 5 broker; each
subscriber's topic prefixes are MQTT subscriptions with their own subscription identifiers.
See docs/ for concepts, the wire format and guarantees.
"""

from ._version import __version__
from .broker_url import BrokerURL, TLSOptions
from .codec import DecodeError, EncodeError, decode, encode
from .data import Count, EnumValue, Port, PortProtocol
from .embedded import EmbeddedBroker
from .endpoint import Endpoint, EndpointStatistics
from .errors import (
    BrokerMQTTError,
    BrokerUnavailable,
    MosquittoNotFound,
    PayloadTooLarge,
    PublishQueueFull,
    TopicError,
    TransportError,
    UsageError,
)
from .events import (
    ConnectionLost,
    ConnectionRestored,
    ErrorCode,
    ErrorEvent,
    Message,
    PeerAdded,
    PeerInfo,
    PeerLost,
    PeerRemoved,
    StatusEvent,
)
from .message import Kind
from .subscription import RawMessage, RawSubscription, Subscription

__all__ = [
    "__version__",
    "BrokerMQTTError",
    "BrokerURL",
    "BrokerUnavailable",
    "ConnectionLost",
    "ConnectionRestored",
    "Count",
    "DecodeError",
    "EmbeddedBroker",
    "EncodeError",
    "Endpoint",
    "EndpointStatistics",
    "EnumValue",
    "ErrorCode",
    "ErrorEvent",
    "Kind",
    "Message",
    "MosquittoNotFound",
    "PayloadTooLarge",
    "PeerAdded",
    "PeerInfo",
    "PeerLost",
    "PeerRemoved",
    "Port",
    "PortProtocol",
    "PublishQueueFull",
    "RawMessage",
    "RawSubscription",
    "StatusEvent",
    "Subscription",
    "TLSOptions",
    "TopicError",
    "TransportError",
    "UsageError",
    "decode",
    "encode",
]
