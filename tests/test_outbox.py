from broker_mqtt.endpoint.outbox import Outbox


def test_coalesces_per_topic_and_keeps_order() -> None:
    box = Outbox(max_batch_bytes=10)
    for i in range(5):
        box.add("a", 1, bytes([i]) * 3)
    box.add("b", 1, b"x")
    batches = []
    while (b := box.take()) is not None:
        batches.append(b)
        box.done(b)
    a = [bytes(b.data) for b in batches if b.topic == "a"]
    assert b"".join(a) == b"".join(bytes([i]) * 3 for i in range(5))
    assert all(len(x) <= 10 for x in a) and len(a) == 2
    assert box.pending_messages == 0 and box.pending_bytes == 0


def test_bounds_count_in_flight_until_done() -> None:
    box = Outbox(max_pending_messages=2)
    box.add("a", 1, b"1")
    box.add("a", 1, b"2")
    assert box.full
    batch = box.take()
    assert batch is not None and box.full  # in flight still counts
    box.done(batch)
    assert not box.full


def test_retry_goes_first_and_raw_messages_are_not_coalesced() -> None:
    box = Outbox()
    box.add("a", 1, b"1")
    first = box.take()
    assert first is not None
    box.add("a", 1, b"2")
    box.retry(first)
    box.add("r", 1, b"raw1", coalesce=False)
    box.add("r", 1, b"raw2", coalesce=False)
    order = []
    while (b := box.take()) is not None:
        order.append(bytes(b.data))
    assert order.index(b"1") < order.index(b"2")
    assert b"raw1" in order and b"raw2" in order  # two PUBLISHes, never merged


def test_inflight_releases_in_send_order_only() -> None:
    from broker_mqtt.endpoint.outbox import Batch, InFlight

    window = InFlight(limit=3)
    a, b, c = Batch("t", 1), Batch("t", 1), Batch("t", 1)
    assert window.sent(a, 1) == [] and window.sent(b, 2) == [] and window.sent(c, 3) == []
    assert window.full
    assert window.confirm(2) == []  # b waits for a
    assert window.confirm(1) == [a, b]
    assert window.confirm(99) == []  # unknown id: remembered as an early confirmation
    d = Batch("t", 1)
    assert window.sent(d, 99) == []  # c is still unconfirmed in front of d
    assert window.unconfirmed() == [c, d] and len(window) == 0


def test_inflight_confirmation_before_registration() -> None:
    from broker_mqtt.endpoint.outbox import Batch, InFlight

    window = InFlight()
    assert window.confirm(7) == []
    a = Batch("t", 0)
    assert window.sent(a, 7) == [a]


def _drain(box: Outbox) -> list[tuple[str, bytes, int]]:
    out = []
    while (b := box.take()) is not None:
        out.append((b.topic, bytes(b.data), b.count))
        box.done(b)
    return out


def test_add_many_builds_the_batches_add_would() -> None:
    import random

    rnd = random.Random(7)
    for _ in range(500):
        limit = rnd.randint(1, 40)
        before = [bytes([rnd.randrange(256)]) * rnd.randint(1, 12) for _ in range(rnd.randint(0, 4))]
        messages = [bytes([rnd.randrange(256)]) * rnd.randint(1, 15) for _ in range(rnd.randint(0, 30))]
        one, many = Outbox(max_batch_bytes=limit), Outbox(max_batch_bytes=limit)
        for box in (one, many):
            for m in before:
                box.add("t", 1, m)
            box.add("u", 0, b"other")
        for m in messages:
            one.add("t", 1, m)
        many.add_many("t", 1, messages)
        assert (many.pending_messages, many.pending_bytes) == (one.pending_messages, one.pending_bytes)
        assert _drain(many) == _drain(one)


def test_has_room_counts_a_whole_group_and_an_idle_outbox_takes_any() -> None:
    box = Outbox(max_pending_messages=10, max_pending_bytes=100)
    assert box.has_room(1000, 10_000)  # nothing pending: any group fits
    box.add_many("a", 1, [b"x" * 10] * 4)
    assert box.has_room(6, 60) and not box.has_room(7, 60) and not box.has_room(6, 61)
    batch = box.take()
    assert batch is not None and not box.has_room(7, 10)  # in flight still counts
    box.done(batch)
    assert box.has_room(10, 100)


def test_urgent_payloads_go_before_queued_batches_in_their_own_order() -> None:
    box = Outbox(max_batch_bytes=1024)
    box.add("t/a", 1, b"x" * 10)
    box.add("t/b", 1, b"y" * 10, coalesce=False)
    box.add("t/ping", 1, b"p1", urgent=True)
    box.add("t/ping", 1, b"p2", urgent=True)
    first = box.take()
    assert first is not None and first.urgent and bytes(first.data) == b"p1"
    box.retry(first)  # a failed send puts it back at the front of its lane
    order = []
    while (batch := box.take()) is not None:
        order.append((batch.topic, bytes(batch.data)))
        box.done(batch)
    assert order == [("t/ping", b"p1"), ("t/ping", b"p2"), ("t/b", b"y" * 10), ("t/a", b"x" * 10)]
    assert box.pending_messages == 0 and box.pending_bytes == 0 and not box
