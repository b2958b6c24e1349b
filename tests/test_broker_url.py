import pytest

from broker_mqtt import BrokerURL, UsageError


def test_parse() -> None:
    u = BrokerURL.parse("mqtt://alice:s%40cret@example.org:1884")
    assert (u.host, u.port, u.tls, u.username, u.password) == ("example.org", 1884, False, "alice", "s@cret")
    assert "s@cret" not in str(u) and "secret" not in str(u)
    assert BrokerURL.parse("mqtts://h").port == 8883
    assert BrokerURL.parse("mqtt://h").port == 1883


@pytest.mark.parametrize("bad", ["http://h", "mqtt://", "mqtt://h:99999", "mqtt://h/path", "h:1883"])
def test_bad_urls(bad: str) -> None:
    with pytest.raises(UsageError):
        BrokerURL.parse(bad)
