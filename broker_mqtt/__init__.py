"""broker_mqtt: Zeek Broker's model over MQTT 5.

Endpoints with unique ids exchange CBOR-encoded node messages through any MQTT 5 broker; each
subscriber's topic prefixes are MQTT subscriptions with their own subscription identifiers.
See docs/ for concepts, the wire format and guarantees.
"""

from ._version import __version__
from .collector import tune_garbage_collector
from .endpoint.attaching import Attaching
from .endpoint.endpoint import Endpoint
from .endpoint.event_stream import EventStream
from .endpoint.events import (
    ConnectionLost,
    ConnectionRestored,
    ErrorCode,
    ErrorEvent,
    Message,
    MessagesMissed,
    PeerAdded,
    PeerInfo,
    PeerLost,
    PeerRemoved,
    StatusEvent,
)
from .endpoint.statistics import EndpointStatistics
from .endpoint.subscription import Overflow, RawMessage, RawSubscription, Subscription
from .errors import (
    BrokerMQTTError,
    BrokerUnavailable,
    ForgedMessage,
    MosquittoNotFound,
    PayloadTooLarge,
    PublishQueueFull,
    TopicError,
    TransportError,
    UsageError,
)
from .transport.broker_url import BrokerURL, TLSOptions
from .transport.embedded import EmbeddedBroker
from .transport.keyfiles import load_private_key, load_trust_file
from .wire.codec import DecodeError, EncodeError, decode, encode
from .wire.data import Count, EnumValue, Port, PortProtocol
from .wire.message import Kind
from .wire.signing import KeyRecord, SignatureError, TrustStore, generate_private_key

__all__ = [
    "__version__",
    "tune_garbage_collector",
    "ForgedMessage",
    "SignatureError",
    "TrustStore",
    "KeyRecord",
    "generate_private_key",
    "load_private_key",
    "load_trust_file",
    "Attaching",
    "EventStream",
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
    "MessagesMissed",
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
    "Overflow",
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
