"""broker_mqtt.transport.mqtt shares paho's Properties lookup tables: same behaviour, less work."""

from __future__ import annotations

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import MQTTException, Properties

from broker_mqtt.transport import mqtt


def test_tables_are_shared_and_behaviour_is_paho_s() -> None:
    assert mqtt._share_paho_property_tables()  # applied at import; idempotent
    a, b = Properties(PacketTypes.PUBLISH), Properties(PacketTypes.CONNECT)
    assert a.names is b.names and a.properties is b.properties and a.types is b.types
    assert a.packetType == PacketTypes.PUBLISH and b.packetType == PacketTypes.CONNECT
    assert a.isEmpty() and str(a) == "[]"

    a.SubscriptionIdentifier = 5
    a.UserProperty = ("a", "b")
    a.UserProperty = ("c", "d")
    a.MessageExpiryInterval = 9
    a.CorrelationData = b"12"
    wire = a.pack()
    assert wire == b"\x1a\x02\x00\x00\x00\t\t\x00\x0212\x0b\x05&\x00\x01a\x00\x01b&\x00\x01c\x00\x01d"
    back = Properties(PacketTypes.PUBLISH)
    back.unpack(wire)
    assert back.json() == {"MessageExpiryInterval": 9, "CorrelationData": "3132", "SubscriptionIdentifier": [5],
                           "UserProperty": [("a", "b"), ("c", "d")]}
    assert str(back) == ("[MessageExpiryInterval : 9, CorrelationData : b'12', SubscriptionIdentifier : [5], "
                         "UserProperty : [('a', 'b'), ('c', 'd')]]")
    back.unpack(b"\x02\x0b\x07")  # unpack clears what was there first
    assert back.json() == {"SubscriptionIdentifier": [7]}
    back.clear()
    assert back.isEmpty()
    assert a.getIdentFromName("SubscriptionIdentifier") == 11 and a.getIdentFromName("Nope") == -1
    assert a.getNameFromIdent(11) == "Subscription Identifier" and a.getNameFromIdent(99) is None
    assert a.allowsMultiple("UserProperty") and not a.allowsMultiple("ContentType")
    with pytest.raises(MQTTException):
        a.Nope = 1
    with pytest.raises(MQTTException):
        b.TopicAlias = 3  # not a CONNECT property
    with pytest.raises(MQTTException):
        back.unpack(b"\x04\x03\x00\x00")  # malformed ContentType: too short
    assert len(Properties(PacketTypes.PUBLISH).names) == 27  # nothing leaked into the shared tables
