"""The survey reads an event's ``schema`` block as text and parses each distinct one once."""

import json

from changeflow.debezium.reader import after_fields

SCHEMA = {"type": "struct", "fields": [
    {"type": "struct", "field": "before", "fields": [{"type": "int64", "field": "old"}]},
    {"type": "struct", "field": "after", "fields": [
        {"type": "int64", "optional": False, "field": "id"},
        {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
         "parameters": {"scale": 2, "connect.decimal.precision": "12"}, "field": "amount"}]},
    {"type": "string", "field": "op"}]}


def test_the_after_image_fields_keep_what_the_types_need() -> None:
    got = json.loads(after_fields(json.dumps(SCHEMA)) or "null")
    assert got == [
        {"field": "id", "type": "int64"},
        {"field": "amount", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
         "parameters": {"scale": "2", "connect.decimal.precision": "12"}}]


def test_blocks_that_are_not_a_struct_schema_give_none() -> None:
    for text in (None, "", "not json", '"a string"', "[1, 2]", '{"fields": 3}',
                 '{"fields": [{"field": "before", "fields": []}]}',
                 '{"fields": [{"field": "after", "fields": null}]}'):
        assert after_fields(text) is None, text
