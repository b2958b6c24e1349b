"""Elections over MQTT: the transport that runs an :class:`asyncactor.Actor` on an endpoint.

``asyncactor`` stands alone (it imports nothing from ``broker_mqtt``); this package is where the two
meet: ``Actor(MQTTTransport(ep, topic), ...)``.
"""

from .transport import MQTTTransport

__all__ = ["MQTTTransport"]
