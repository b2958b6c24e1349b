"""The endpoint: pub/sub of node messages, presence and dispatch over one MQTT connection.

- :mod:`.endpoint`: :class:`~.endpoint.Endpoint`, its lifecycle and public API (the thin anyio layer);
- :mod:`.send` and :mod:`.outbox`: the outgoing side (coalescing into PUBLISHes, the in-flight window);
- :mod:`.receive` and :mod:`.dispatch`: which local subscriber gets each PUBLISH (by subscription id);
- :mod:`.presence`: the peer table, sans-io; :mod:`.events`: what the application receives;
- :mod:`.subscription`: the subscriber streams; :mod:`.statistics`: the counters;
- :mod:`.attaching`: how stores and queues (layers above, which the endpoint never imports) attach.

It talks to the broker only through :mod:`broker_mqtt.transport` (docs/architecture.md).
"""
