import pytest

from broker_mqtt import TopicError
from broker_mqtt.wire.topics import TopicLayout, prefix_matches, validate_prefix, validate_topic


def test_leading_slash_is_insignificant() -> None:
    assert validate_topic("/sensors/temp") == validate_topic("sensors/temp") == ("sensors", "temp")


@pytest.mark.parametrize(
    "bad", ["", "/", "a//b", "a/", "a/+/b", "a/#", "x+y", "#", "a\0b", "a/\udc80", 7, None]
)
def test_hostile_topics_are_rejected(bad: object) -> None:
    with pytest.raises(TopicError):
        validate_topic(bad)  # type: ignore[arg-type]


def test_dollar_and_unicode_are_carried() -> None:
    layout = TopicLayout("bm")
    assert layout.data("$SYS/x", "gw7") == "bm/d/gw7/$SYS/x"  # namespaced, so MQTT's $ rule does not apply
    assert layout.data("/größe/°C", "gw7") == "bm/d/gw7/größe/°C"


def test_prefix_semantics_are_by_level() -> None:
    assert prefix_matches(validate_prefix("/sensors"), validate_topic("/sensors/temp/1"))
    assert prefix_matches(validate_prefix("/sensors"), validate_topic("/sensors"))
    assert not prefix_matches(validate_prefix("/sensors"), validate_topic("/sensorsX"))
    assert prefix_matches(validate_prefix("/"), validate_topic("/anything/at/all"))


def test_layout() -> None:
    layout = TopicLayout("ns1")
    assert layout.data_filter("/sensors") == "ns1/d/+/sensors/#"  # from every sender
    assert layout.data_filter("/") == "ns1/d/#"
    assert layout.unicast("ab12", "gw7", "/x/y") == "ns1/u/ab12/gw7/x/y"
    assert layout.unicast_filter("ab12") == "ns1/u/ab12/#"
    assert layout.presence("gw7") == "ns1/p/gw7"
    assert layout.presence_client("ns1/p/gw7") == "gw7"
    assert layout.presence_client("ns1/d/gw7") is None
    assert layout.presence_client("ns1/p/gw7/x") is None
    assert layout.election("fleet") == "ns1/actor/store/fleet"
    assert layout.split_sender("ns1/d/gw7/a/b", "ns1/d/") == ("gw7", "a/b")
    for bad in ("ns1/d/gw7", "ns1/d/gw7/", "ns1/d//a", "ns1/x/gw7/a"):
        assert layout.split_sender(bad, "ns1/d/") is None
    with pytest.raises(TopicError):
        TopicLayout("$bad")
    with pytest.raises(TopicError):
        TopicLayout("a/#")


def test_client_ids_name_endpoints() -> None:
    import uuid

    from broker_mqtt.errors import UsageError
    from broker_mqtt.wire.identity import default_client_id, endpoint_id, validate_client_id

    u = uuid.uuid4()
    assert endpoint_id(default_client_id(u)) == u
    assert endpoint_id("gw7") == endpoint_id("gw7") != endpoint_id("gw8")
    assert endpoint_id("bm-" + u.hex.upper()) is None  # not the default form: names no endpoint
    assert endpoint_id("bm-xyz") is None
    assert endpoint_id("a/b") is None
    assert validate_client_id("gateway-7") == "gateway-7"
    for bad in ("", "a/b", "a+b", "a#", "$SYS", "bm-" + u.hex, "x" * 300):
        with pytest.raises(UsageError):
            validate_client_id(bad)
