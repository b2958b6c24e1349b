import importlib

import pytest

import broker_mqtt

#: every package's user API (``__all__``): wire and protocol types stay in their modules
PACKAGES = {
    "broker_mqtt.election": ["MQTTTransport"],
    "broker_mqtt.transport": [
        "MemoryBroker", "MemoryConnector", "Connector", "Connection", "ConnectOptions", "ConnAck", "Received",
        "Will", "ConnectionClosed", "ConnectRefused", "TLSVerificationFailed", "FailoverConnector",
    ],
    "broker_mqtt.store": [
        "attach_master", "attach_clone", "attach_store", "MasterStore", "CloneStore", "ElectedStore",
        "StoreWriter", "Backend", "MemoryBackend", "SQLiteBackend", "Entry", "Inserted", "Updated", "Erased",
        "Expired", "EventsDropped", "StaleChanged", "MasterChanged", "MasterConflict", "WriteRejected",
        "CloneAttached", "CloneLost", "RemoteWriteFailed", "WritesLost", "ConflictResolved", "StoreFailed", "StoreEvent",
        "StoreStatus", "ElectedEvent", "StoreStatistics", "ReplicaStatistics", "ReplicaConfig", "Durability", "Faults",
        "DEFAULT_CHANNEL", "last_writer_wins", "MergeHook", "Version", "ComputedCommand", "register_command", "StoreError", "AnswerForgotten",
        "BackendError", "MasterExists", "NoMaster", "NoSuchKey", "Stale", "StoreDecodeError",
        "StoreProtocolError", "Timeout", "TypeClash", "WriteBufferFull",
    ],
    "broker_mqtt.queue": [
        "attach_queue", "WorkQueue", "Consumer", "Delivery", "DeadLetter", "LogReader", "LogEntry",
        "MessageState", "QueueStatistics", "QueueError", "AlreadySettled", "NotHeld", "UnknownReader", "MessageTooLarge",
    ],
    "broker_mqtt.spark": [
        "BrokerMQTTDataSource", "Deduplicated", "Deduplicator", "DeduplicatorStatistics", "JavaNotFound",
        "MetricRow", "READ_SCHEMA", "ROW_ID_KEY", "RowId", "SparkplugDecoder", "SparkplugStatistics",
        "SparkplugTopic", "dedup", "ensure_java", "find_java_home", "register", "row_id", "to_json", "to_jsonable",
    ],
    "asyncactor": [
        "Actor", "ActorCore", "ActorEvent", "Config", "CoreStats", "DecodeError", "DetagEvent", "EventQueue",
        "GoodNodeEvent", "LocalProtocolError", "MemoryHub", "MemoryTransport", "Phase", "PingEvent",
        "ProtocolError", "QueueStats", "RawMsgEvent", "RecoverEvent", "SetupEvent", "TagEvent", "Transport",
        "UntagEvent", "canonical_key", "default_has_priority", "default_ping_delay",
    ],
}


def test_public_api_is_pinned() -> None:
    assert sorted(broker_mqtt.__all__) == sorted(
        [
            "__version__", "tune_garbage_collector", "Attaching", "EventStream", "BrokerMQTTError", "BrokerURL", "BrokerUnavailable", "ConnectionLost",
            "ConnectionRestored", "Count", "DecodeError", "EmbeddedBroker", "EncodeError", "Endpoint",
            "EndpointStatistics", "EnumValue", "ErrorCode", "ErrorEvent", "Kind", "Message", "MessagesMissed", "MosquittoNotFound",
            "PayloadTooLarge", "PeerAdded", "PeerInfo", "PeerLost", "PeerRemoved", "Port", "PortProtocol",
            "PublishQueueFull", "Overflow", "RawMessage", "RawSubscription", "StatusEvent", "Subscription",
            "TLSOptions", "TopicError", "TransportError", "UsageError", "decode", "encode",
            "ForgedMessage", "SignatureError", "TrustStore", "KeyRecord", "generate_private_key",
            "load_private_key", "load_trust_file",
        ]
    )
    for name in broker_mqtt.__all__:
        assert hasattr(broker_mqtt, name), name


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_package_api_is_pinned(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(PACKAGES[package])
    assert len(set(module.__all__)) == len(module.__all__)
    if package == "broker_mqtt.spark":
        pytest.importorskip("pyspark", reason="the Spark data source needs pyspark")
    for name in module.__all__:
        assert hasattr(module, name), name


def test_api_reference_is_current() -> None:
    pytest.importorskip("pyarrow", reason="docs/gen_api.py documents the Spark bridge too: needs the spark extra")
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "docs" / "gen_api.py"
    out = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr + " (run: python docs/gen_api.py)"
