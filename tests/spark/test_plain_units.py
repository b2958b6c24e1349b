"""The plain-topic pieces of the Spark bridge without Spark: topic patterns and templates, JSON rows
against a schema, the source's columns and the sink's options (issue 22)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_mqtt.errors import TopicError, UsageError
from broker_mqtt.spark.json_rows import JsonRowParser, json_payload
from broker_mqtt.spark.options import SinkOptions, SourceOptions
from broker_mqtt.spark.plain_rows import PlainRows, plain_schema_ddl
from broker_mqtt.spark.topic_pattern import TopicPattern, TopicTemplate

URL = "mqtt://127.0.0.1:1883"


# -- topic patterns -------------------------------------------------------------------------------

def test_a_pattern_subscribes_plus_and_names_its_levels() -> None:
    p = TopicPattern.parse("site1/{device}/+/{kind}/#")
    assert p.mqtt_filter == "site1/+/+/+/#"
    assert p.names == ("device", "kind")
    assert p.values("site1/d7/x/temp/a/b") == ("d7", "temp")
    assert p.values("site1/d7/x/temp") == ("d7", "temp")  # '#' also matches the parent level
    assert p.values("site2/d7/x/temp") is None
    assert p.values("site1/d7") is None


def test_patterns_follow_mqtts_wildcard_rules() -> None:
    assert TopicPattern.parse("#").matches("a/b")
    assert not TopicPattern.parse("#").matches("$SYS/broker")  # '$' topics are not matched by wildcards
    assert not TopicPattern.parse("+/x").matches("$SYS/x")
    assert TopicPattern.parse("$SYS/#").matches("$SYS/broker")


@pytest.mark.parametrize("bad", ["", "a/#/b", "a/b#", "a/+b", "a/{dev", "a/{dev}x", "a/{1dev}", "a/{}",
                                 "a/{d}/{d}", "$share/g/a", "a\0b"])
def test_malformed_patterns_are_refused(bad: str) -> None:
    with pytest.raises(TopicError):
        TopicPattern.parse(bad)


def test_a_template_fills_levels_from_a_row() -> None:
    t = TopicTemplate.parse("site1/{device}/cmd-{n}")
    assert t.columns == ("device", "n")
    assert t.format({"device": "d1", "n": 4}) == "site1/d1/cmd-4"
    assert TopicTemplate.parse("plain/topic").constant == "plain/topic"


@pytest.mark.parametrize("value", [None, "", "a/b", "+", "x#", "a\0", True, 1.5, b"x"])
def test_a_value_that_would_change_the_topics_shape_fails(value: Any) -> None:
    with pytest.raises(TopicError, match="device"):
        TopicTemplate.parse("s/{device}/cmd").format({"device": value})


@pytest.mark.parametrize("bad", ["a/+/cmd", "a/#", "a/{dev", "a/{de-v}", "a}b", ""])
def test_malformed_templates_are_refused(bad: str) -> None:
    with pytest.raises(TopicError):
        TopicTemplate.parse(bad)


# -- JSON rows ------------------------------------------------------------------------------------

def _struct(*fields: tuple[str, Any]) -> dict[str, Any]:
    return {"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields]}


def test_json_fields_are_converted_like_sparks_permissive_reader() -> None:
    parser = JsonRowParser(_struct(
        ("s", "string"), ("i", "integer"), ("d", "double"), ("b", "boolean"), ("t", "timestamp"),
        ("day", "date"), ("m", "decimal(5,2)"), ("raw", "binary"),
        ("xs", {"type": "array", "elementType": "long", "containsNull": True}),
        ("kv", {"type": "map", "keyType": "string", "valueType": "double", "valueContainsNull": True}),
        ("st", _struct(("a", "integer"), ("b", "string")))))
    doc = {"s": {"nested": 1}, "i": 7, "d": 2, "b": True, "t": "2026-11-26T10:00:00+01:00", "day": "2026-11-26",
           "m": "12.345", "raw": "AAE=", "xs": [1, None, 3], "kv": {"x": 1.5}, "st": {"a": 1, "b": "z", "c": 0}}
    values, corrupt = parser.parse(json.dumps(doc).encode())
    assert corrupt is None
    assert values == ('{"nested":1}', 7, 2.0, True, dt.datetime(2026, 11, 26, 9, tzinfo=dt.UTC),
                      dt.date(2026, 11, 26), decimal.Decimal("12.35"), b"\x00\x01", [1, None, 3], {"x": 1.5},
                      (1, "z"))


@pytest.mark.parametrize(("doc", "field"), [
    ({"i": 2**31}, "i"), ({"i": True}, "i"), ({"i": 1.5}, "i"), ({"d": "x"}, "d"), ({"b": 1}, "b"),
    ({"t": "yesterday"}, "t"), ({"m": 12345.0}, "m"), ({"xs": [1, "a"]}, "xs"), ({"xs": 3}, "xs"),
])
def test_a_field_that_does_not_fit_is_null_and_the_row_corrupt(doc: dict[str, Any], field: str) -> None:
    parser = JsonRowParser(_struct(("i", "integer"), ("d", "double"), ("b", "boolean"), ("t", "timestamp"),
                                   ("m", "decimal(4,2)"), ("xs", {"type": "array", "elementType": "long"}),
                                   ("ok", "string")))
    payload = json.dumps({**doc, "ok": "yes"}).encode()
    values, corrupt = parser.parse(payload)
    row = dict(zip(parser.names, values, strict=True))
    assert row[field] is None and row["ok"] == "yes"
    assert corrupt == payload.decode()


@given(st.binary(max_size=200))
def test_no_payload_escapes_as_an_exception(payload: bytes) -> None:
    parser = JsonRowParser(_struct(("a", "long"), ("b", {"type": "array", "elementType": "string"})))
    values, corrupt = parser.parse(payload)
    assert len(values) == 2
    assert corrupt is None or isinstance(corrupt, str)


def test_deeply_nested_json_is_a_corrupt_record_not_a_crash() -> None:
    parser = JsonRowParser(_struct(("a", "string")))
    payload = b"[" * 100_000 + b"]" * 100_000
    assert parser.parse(payload) == ((None,), payload.decode())


def test_types_json_cannot_fill_are_refused_on_the_driver() -> None:
    with pytest.raises(UsageError, match="interval"):
        JsonRowParser(_struct(("x", "interval day to second")))
    with pytest.raises(UsageError, match="string keys"):
        JsonRowParser(_struct(("x", {"type": "map", "keyType": "integer", "valueType": "long"})))


def test_rows_become_compact_json() -> None:
    row = {"at": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC), "d": dt.date(2026, 1, 2), "m": decimal.Decimal("1.10"),
           "b": b"\x01", "nested": {"xs": [dt.datetime(2026, 1, 1)]}, "n": None}
    assert json.loads(json_payload(row)) == {"at": "2026-01-02T03:04:05Z", "d": "2026-01-02", "m": "1.10",
                                             "b": "AQ==", "nested": {"xs": ["2026-01-01T00:00:00Z"]}, "n": None}


# -- the source's columns and rows ----------------------------------------------------------------

def _source(**options: str) -> SourceOptions:
    return SourceOptions.parse({"broker": URL, **options})


def test_the_source_names_a_column_per_level_across_patterns() -> None:
    options = _source(payload="raw", topics="a/{site}/{device}/t,b/{device}/t")
    assert plain_schema_ddl(options) == ("topic STRING, `site` STRING, `device` STRING, payload BINARY, "
                                         "qos INT, retain BOOLEAN, received TIMESTAMP")
    rows = PlainRows(options)
    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert rows.row(("b/d9/t", b"x", 1, False, when)) == ("b/d9/t", None, "d9", b"x", 1, False, when)
    assert rows.row(("a/s/d1/t", b"", 0, True, when)) == ("a/s/d1/t", "s", "d1", b"", 0, True, when)


def test_json_without_a_schema_is_text_and_with_one_fields_and_the_corrupt_record() -> None:
    assert "payload STRING" in plain_schema_ddl(_source(payload="json", topics="x/#"))
    ddl = plain_schema_ddl(_source(payload="json", topics="x/{d}", jsonSchema="t DOUBLE",
                                   columnNameOfCorruptRecord="bad"))
    assert ddl == "topic STRING, `d` STRING, t DOUBLE, `bad` STRING, qos INT, retain BOOLEAN, received TIMESTAMP"


@pytest.mark.parametrize(("options", "message"), [
    ({"payload": "mqtt", "topics": "a"}, "payload"),
    ({"payload": "json"}, "topics"),
    ({"payload": "raw", "topics": "a/#/b"}, "'#'"),
    ({"payload": "raw", "topics": "a", "jsonSchema": "x INT"}, "jsonSchema"),
    ({"payload": "json", "topics": "a", "jsonSchema": " "}, "empty"),
    ({"topics": "/a", "jsonSchema": "x INT"}, "jsonSchema"),
    ({"payload": "sparkplug", "topics": "spBv1.0/{g}/#"}, "plain filters"),
])
def test_bad_source_options_fail_on_the_driver(options: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        _source(**options)


def test_a_level_named_like_a_fixed_column_is_refused() -> None:
    with pytest.raises(UsageError, match="clash"):
        plain_schema_ddl(_source(payload="raw", topics="a/{qos}"))


def test_sparkplug_reads_everything_by_default() -> None:
    options = _source(payload="sparkplug")
    assert [p.mqtt_filter for p in options.patterns] == ["spBv1.0/#"]
    assert plain_schema_ddl(options).startswith("topic STRING, `group` STRING, message_type STRING")


# -- the sink's options ---------------------------------------------------------------------------

def _sink(columns: list[str], **options: str) -> SinkOptions:
    return SinkOptions.parse({"broker": URL, **options}, columns)


def test_plain_sink_options() -> None:
    opts = _sink(["device", "v"], payload="json", topic="s/{device}/cmd", retain="true", qos="0")
    assert opts.template is not None and opts.template.columns == ("device",)
    assert (opts.payload, opts.retain, opts.connection.qos, opts.id_key) == ("json", True, 0, "")
    assert _sink(["group", "edge_node", "metric", "value"], payload="sparkplug").template is None


@pytest.mark.parametrize(("columns", "options", "message"), [
    (["v"], {"payload": "json", "topic": "s/{device}/cmd"}, "device"),
    (["v"], {"payload": "json"}, "exactly one"),
    (["t", "v"], {"payload": "json", "topic": "a", "topicColumn": "t"}, "exactly one"),
    (["v"], {"payload": "raw", "topic": "a"}, "payload"),
    (["v"], {"payload": "json", "topic": "a", "store": "s"}, "store"),
    (["group", "edge_node", "metric", "value"], {"payload": "sparkplug", "topic": "x"}, "no 'topic'"),
    (["group", "metric", "value"], {"payload": "sparkplug"}, "edge_node"),
    (["v"], {"topic": "/a", "retain": "true"}, "plain topics"),
])
def test_bad_sink_options_fail_on_the_driver(columns: list[str], options: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        _sink(columns, **options)


def test_ddl_field_names_at_the_top_level_only() -> None:
    from broker_mqtt.spark.plain_rows import ddl_field_names

    ddl = "a INT, `b, c` STRING, s STRUCT<x: INT, y: ARRAY<STRING>>, m MAP<STRING, DECIMAL(10, 2)>, d: DATE,"
    assert ddl_field_names(ddl) == ["a", "b, c", "s", "m", "d"]


@pytest.mark.parametrize("schema", ["device STRING, temp DOUBLE", "temp DOUBLE, `Device` STRING", "qos INT"])
def test_a_json_field_named_like_a_level_or_a_fixed_column_is_refused_at_load(schema: str) -> None:
    with pytest.raises(UsageError, match="leave it out of jsonSchema"):
        plain_schema_ddl(_source(payload="json", topics="s/{device}/t", jsonSchema=schema))
