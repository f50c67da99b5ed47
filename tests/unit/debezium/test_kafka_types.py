"""Kafka Connect's JsonConverter type names: read as it writes them, written as it reads them."""

from __future__ import annotations

import pytest

from changeflow.debezium import types as T
from changeflow.debezium.export import envelope_schema

#: The schema types Kafka Connect's JsonConverter reads and writes (JsonSchema)
JSON_CONVERTER_TYPES = {"boolean", "int8", "int16", "int32", "int64", "float", "double",
                        "bytes", "string", "array", "map", "struct"}


@pytest.mark.parametrize("name", ["float", "double", "float32", "float64"])
def test_floating_point_types_are_binary_double(name: str) -> None:
    assert T.from_schema({"type": name, "field": "x"}) == T.FieldType("BINARY_DOUBLE", "double")


def test_the_export_writes_only_types_json_converter_reads() -> None:
    cols = [(c, t) for c, t in zip("abcdefghi", ["VARCHAR2", "INTEGER", "NUMBER",
                                                   "BINARY_DOUBLE", "BOOLEAN", "DATE",
                                                   "TIMESTAMP", "TIMESTAMP WITH TIME ZONE",
                                                   "RAW"], strict=True)]
    schema = envelope_schema("p.s.t", cols, ["a"])

    def types(block: dict) -> set[str]:
        return {block["type"]} | {t for f in block.get("fields", []) for t in types(f)}

    assert types(schema) <= JSON_CONVERTER_TYPES
    assert T.for_logical("BINARY_DOUBLE").schema() == {"type": "double"}
