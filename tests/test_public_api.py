import broker_mqtt


def test_public_api_is_pinned() -> None:
    assert sorted(broker_mqtt.__all__) == sorted(
        [
            "__version__", "BrokerMQTTError", "BrokerURL", "BrokerUnavailable", "ConnectionLost",
            "ConnectionRestored", "Count", "DecodeError", "EmbeddedBroker", "EncodeError", "Endpoint",
            "EndpointStatistics", "EnumValue", "ErrorCode", "ErrorEvent", "Kind", "Message", "MosquittoNotFound",
            "PayloadTooLarge", "PeerAdded", "PeerInfo", "PeerLost", "PeerRemoved", "Port", "PortProtocol",
            "PublishQueueFull", "RawMessage", "RawSubscription", "StatusEvent", "Subscription",
            "TLSOptions", "TopicError", "TransportError", "UsageError", "decode", "encode",
        ]
    )
    for name in broker_mqtt.__all__:
        assert hasattr(broker_mqtt, name), name
