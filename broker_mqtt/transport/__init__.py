"""The transport layer: how the endpoint reaches an MQTT 5 broker (base.py is the interface).

The aiomqtt client (mqtt.py) is the default; :class:`MemoryBroker` with :class:`MemoryConnector`
is a broker in this process, for tests and simulations without mosquitto
(``Endpoint(connector=MemoryConnector(MemoryBroker()))``). :class:`FailoverConnector` tries several
brokers in turn (``Endpoint("mqtt://node1:1883,mqtt://node2:1883")`` makes one).
"""

from .base import (
    ConnAck,
    Connection,
    ConnectionClosed,
    ConnectOptions,
    Connector,
    ConnectRefused,
    Received,
    TLSVerificationFailed,
    Will,
)
from .failover import FailoverConnector
from .memory import MemoryConnector
from .memory_broker import MemoryBroker

__all__ = [
    # an MQTT broker in this process, for tests and simulations
    "MemoryBroker", "MemoryConnector",
    # the interface a transport implements (docs/architecture.md, "Adding a transport")
    "Connector", "Connection", "ConnectOptions", "ConnAck", "Received", "Will",
    "ConnectionClosed", "ConnectRefused", "TLSVerificationFailed",
    # several brokers (a cluster's nodes) tried in turn
    "FailoverConnector",
]
