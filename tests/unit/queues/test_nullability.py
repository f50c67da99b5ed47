"""The read check accepts batches whose nested values are written non-nullable."""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from changeflow import lcr
from changeflow.errors import SchemaMismatchError
from changeflow.queues.io import as_nullable_as


def _with(field: str, data_type: T.DataType) -> T.StructType:
    return T.StructType([T.StructField(f.name, data_type, f.nullable) if f.name == field else f
                         for f in lcr.spark_schema().fields])


def test_required_list_elements_are_read_as_the_contract() -> None:
    """What a Debezium capture wrote before issue 28: key_columns as array<string not null>."""
    found = _with("key_columns", T.ArrayType(T.StringType(), containsNull=False))
    with pytest.raises(SchemaMismatchError, match="key_columns"):
        lcr.check_schema(found)  # the contract compares element nullability
    lcr.check_schema(as_nullable_as(found, lcr.spark_schema()))


def test_required_map_values_and_struct_fields_too() -> None:
    value = T.StructType([T.StructField(f.name, f.dataType, False)
                          for f in lcr.value_spark_type().fields])
    found = _with("new_values", T.MapType(T.StringType(), value, valueContainsNull=False))
    lcr.check_schema(as_nullable_as(found, lcr.spark_schema()))


def test_another_type_is_still_refused() -> None:
    found = _with("key_columns", T.ArrayType(T.LongType(), containsNull=False))
    with pytest.raises(SchemaMismatchError, match="key_columns.*array<bigint>"):
        lcr.check_schema(as_nullable_as(found, lcr.spark_schema()))
