"""The lowest layer: what travels on the wire, with no I/O.

- :mod:`.data`: the Zeek Broker data-model types Python has no native type for;
- :mod:`.codec`: CBOR encode and decode of data-model values (one path each);
- :mod:`.message`: node messages, the envelope of every message on our MQTT topics;
- :mod:`.topics`: Broker topics and the MQTT topic layout they map onto;
- :mod:`.signing`: Ed25519-signed PUBLISH payloads, trust stores and key records.

It imports only :mod:`broker_mqtt.errors`. See docs/architecture.md for the layers above.
"""
