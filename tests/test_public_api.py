import pytest

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


def test_api_reference_is_current() -> None:
    pytest.importorskip("pyarrow", reason="docs/gen_api.py documents the Spark bridge too: needs the spark extra")
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "docs" / "gen_api.py"
    out = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr + " (run: python docs/gen_api.py)"
