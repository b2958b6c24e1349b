from broker_mqtt.endpoint.dispatch import Subscribe, SubscriptionTable, Unsubscribe, minimal_prefixes


def test_minimal_prefixes_drop_covered_and_duplicates() -> None:
    got = minimal_prefixes([("a", "b"), ("a",), ("a",), ("c",), ("c", "d", "e")])
    assert got == [("a",), ("c",)]


def test_shared_filter_is_one_subscription() -> None:
    t: SubscriptionTable[str] = SubscriptionTable(first_id=3)
    assert t.add("s1", [("ns/d/a/#", ("a",))]) == [Subscribe("ns/d/a/#", 3, True)]
    assert t.add("s2", [("ns/d/a/#", ("a",))]) == []  # shares id 3
    assert [f.subscribers for f in t.targets([3])] == [["s1", "s2"]]
    assert t.remove("s1") == []
    assert t.remove("s2") == [Unsubscribe("ns/d/a/#")]
    assert t.targets([3]) == []


def test_ids_are_distinct_and_fallback_matching() -> None:
    t: SubscriptionTable[str] = SubscriptionTable(first_id=3)
    t.add("s1", [("ns/d/a/#", ("a",)), ("ns/d/b/#", ("b",))])
    t.add("raw", [("x/+", None)])
    ids = {f.sub_id for f in t.by_filter.values()}
    assert len(ids) == 3
    assert [f.mqtt_filter for f in t.match(("a", "z"))] == ["ns/d/a/#"]
    assert t.match(("x", "1")) == []  # raw filters are not data prefixes
    assert t.targets([999]) == []


def test_data_filters_are_no_local_and_raw_filters_are_not() -> None:
    """Own messages of data filters are delivered in-process (the broker must not echo them);
    raw subscribers get their own PUBLISHes from the broker. Same options on every resubscribe."""
    t: SubscriptionTable[str] = SubscriptionTable(first_id=3)
    assert t.add("data", [("ns/d/a/#", ("a",)), ("ns/d/#", ())]) == [
        Subscribe("ns/d/a/#", 3, no_local=True),
        Subscribe("ns/d/#", 4, no_local=True),
    ]
    assert t.add("raw", [("ns/actor", None)]) == [Subscribe("ns/actor", 5, no_local=False)]
    assert t.add("local", [("ns/d/a/#", ("a",))]) == []  # a second subscriber: the same options
    assert t.all_subscribes() == [
        Subscribe("ns/d/a/#", 3, True),
        Subscribe("ns/d/#", 4, True),
        Subscribe("ns/actor", 5, False),
    ]
