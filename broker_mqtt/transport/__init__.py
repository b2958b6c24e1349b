"""The transport layer: how the endpoint reaches an MQTT 5 broker (base.py is the interface).

The aiomqtt client (mqtt.py) is the default; :class:`MemoryBroker` with :class:`MemoryConnector`
is a broker in this process, for tests and simulations without mosquitto
(``Endpoint(connector=MemoryConnector(MemoryBroker()))``).
"""

from .memory import MemoryConnector
from .memory_broker import MemoryBroker

__all__ = ["MemoryBroker", "MemoryConnector"]
