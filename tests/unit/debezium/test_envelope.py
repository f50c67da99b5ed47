"""The envelope contract and the PostgreSQL type mapping (no Spark)."""

from __future__ import annotations

import pytest

from changeflow.debezium import envelope as E
from changeflow.debezium import types as T
from changeflow.debezium.config import DebeziumSource


def test_op_enum_maps_every_code_and_refuses_unknown() -> None:
    assert [E.Op.of(c).command for c in "curdt"] == [
        "INSERT", "UPDATE", "INSERT", "DELETE", "TRUNCATE TABLE"]
    assert E.Op.of("d").key_image == "before" and E.Op.of("c").images == ("after",)
    for bad in ("x", None, "", "C"):
        with pytest.raises(E.EnvelopeError, match="unknown Debezium op code"):
            E.Op.of(bad)
    with pytest.raises(E.EnvelopeError, match="no Debezium operation"):
        E.Op.for_command("CREATE TABLE")


@pytest.mark.parametrize("pg, logical, codec, scale", [
    ("integer", "INTEGER", "int", None), ("bigint", "INTEGER", "int", None),
    ("numeric(12,4)", "NUMBER", "decimal", 4), ("numeric", "NUMBER", "varscale", None),
    ("money", "NUMBER", "decimal", 2), ("timestamp", "TIMESTAMP", "ts_us", None),
    ("timestamp(3)", "TIMESTAMP", "ts_ms", None),
    ("timestamp with time zone", "TIMESTAMP WITH TIME ZONE", "zoned", None),
    ("timestamptz", "TIMESTAMP WITH TIME ZONE", "zoned", None), ("date", "DATE", "date", None),
    ("bytea", "RAW", "bytes", None), ("character varying(20)", "VARCHAR2", "string", None),
    ("uuid", "VARCHAR2", "string", None), ("jsonb", "VARCHAR2", "string", None),
    ("double precision", "BINARY_DOUBLE", "double", None), ("boolean", "BOOLEAN", "bool", None),
    ("NUMBER", "NUMBER", "decimal", 10),
])
def test_published_postgres_mapping(pg: str, logical: str, codec: str, scale: int | None) -> None:
    assert T.from_postgres(pg) == T.FieldType(logical, codec, scale)


def test_connector_modes_change_the_codec() -> None:
    assert T.from_postgres("numeric(10,2)", decimal_handling_mode="string").codec == \
        "decimal_text"
    assert T.from_postgres("timestamp", time_precision_mode="connect").codec == "ts_ms"
    assert T.from_postgres("bytea", binary_handling_mode="hex").codec == "hex"


@pytest.mark.parametrize("bad", ["time", "interval", "point", "integer[]", "tsvector"])
def test_types_without_an_lcr_type_are_refused(bad: str) -> None:
    with pytest.raises(T.UnsupportedColumnTypeError, match="hr.t.c"):
        T.from_postgres(bad, where="hr.t.c")


def test_schema_fields_are_read_like_the_connector_writes_them() -> None:
    dec = {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
           "parameters": {"scale": "2", "connect.decimal.precision": "12"}}
    assert T.from_schema(dec) == T.FieldType("NUMBER", "decimal", 2)
    assert T.from_schema({"type": "int64", "name": "io.debezium.time.MicroTimestamp"}).logical \
        == "TIMESTAMP"
    with pytest.raises(T.UnsupportedColumnTypeError, match="MicroTime"):
        T.from_schema({"type": "int64", "name": "io.debezium.time.MicroTime"})
    # what an export declares reads back as the same type
    for logical in ("VARCHAR2", "INTEGER", "NUMBER", "BINARY_DOUBLE", "BOOLEAN", "DATE",
                    "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "RAW"):
        assert T.from_schema(T.for_logical(logical).schema()).logical == logical


def test_source_config_refuses_bad_tables() -> None:
    with pytest.raises(ValueError, match="schema.table"):
        DebeziumSource(type="debezium", database="D", root="/x", tables=[{"name": "nodot"}])
    src = DebeziumSource(type="debezium", database="D", root="/x",
                         tables=[{"name": "Inv.Customers", "key": ["id"]}])
    assert src.table("inv", "customers") is not None and src.table("inv", "x") is None
