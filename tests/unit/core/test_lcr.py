"""The LCR contract: typed values and schema checks."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

from changeflow import lcr
from changeflow.errors import SchemaMismatchError


@pytest.mark.parametrize(
    ("value", "type_name"),
    [
        (2, "INTEGER"),
        (decimal.Decimal("12.50"), "NUMBER"),
        (1.5, "BINARY_DOUBLE"),
        ("Europe", "VARCHAR2"),
        (True, "BOOLEAN"),
        (dt.date(2024, 2, 29), "DATE"),
        (dt.datetime(2024, 1, 1, 12, 0), "TIMESTAMP"),
        (dt.datetime(2024, 1, 1, 12, 0, tzinfo=dt.UTC), "TIMESTAMP WITH TIME ZONE"),
        (b"\x02", "RAW"),
    ],
)
def test_values_keep_their_type(value: object, type_name: str) -> None:
    encoded = lcr.encode_value(value)
    assert encoded["type"] == type_name
    assert lcr.decode_value(encoded) == value
    populated = [k for k, v in encoded.items() if v is not None and k != "type"]
    assert populated == [lcr.LOGICAL_TYPES[type_name].field]


def test_null_keeps_its_type() -> None:
    encoded = lcr.encode_value(None, "NUMBER")
    assert encoded["type"] == "NUMBER"
    assert lcr.decode_value(encoded) is None


def test_unsupported_python_type_is_refused() -> None:
    with pytest.raises(SchemaMismatchError, match="not supported"):
        lcr.encode_value(object())


def test_schema_check_names_field_and_file() -> None:
    from pyspark.sql import types as T

    schema = lcr.spark_schema()
    lcr.check_schema(schema)
    broken = T.StructType([f for f in schema.fields if f.name != "commit_scn"])
    with pytest.raises(SchemaMismatchError, match=r"q/batch-1.*'commit_scn'.*missing"):
        lcr.check_schema(broken, path="q/batch-1")
    retyped = T.StructType(
        [T.StructField(f.name, T.StringType()) if f.name == "position" else f for f in schema.fields]
    )
    with pytest.raises(SchemaMismatchError, match="'position'.*string.*bigint"):
        lcr.check_schema(retyped, path="x")
    extra = T.StructType([*schema.fields, T.StructField("surprise", T.StringType())])
    with pytest.raises(SchemaMismatchError, match="'surprise'"):
        lcr.check_schema(extra)


def test_message_id_is_stable_and_distinct() -> None:
    a = lcr.message_id("DBS1", 10, "t1", 0)
    assert a == lcr.message_id("DBS1", 10, "t1", 0)
    assert a != lcr.message_id("DBS1", 10, "t1", 1)
    assert len(a) == 32
