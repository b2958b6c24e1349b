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
    assert layout.data("$SYS/x") == "bm/d/$SYS/x"  # namespaced, so MQTT's $ rule does not apply
    assert layout.data("/größe/°C") == "bm/d/größe/°C"


def test_prefix_semantics_are_by_level() -> None:
    assert prefix_matches(validate_prefix("/sensors"), validate_topic("/sensors/temp/1"))
    assert prefix_matches(validate_prefix("/sensors"), validate_topic("/sensors"))
    assert not prefix_matches(validate_prefix("/sensors"), validate_topic("/sensorsX"))
    assert prefix_matches(validate_prefix("/"), validate_topic("/anything/at/all"))


def test_layout() -> None:
    layout = TopicLayout("ns1")
    assert layout.data_filter("/sensors") == "ns1/d/sensors/#"
    assert layout.data_filter("/") == "ns1/d/#"
    assert layout.unicast("ab") == "ns1/u/ab"
    assert layout.presence_id("ns1/p/ab") == "ab"
    assert layout.presence_id("ns1/d/ab") is None
    with pytest.raises(TopicError):
        TopicLayout("$bad")
    with pytest.raises(TopicError):
        TopicLayout("a/#")
