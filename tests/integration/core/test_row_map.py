"""``values.row_map``: one SQL expression gives the map the Column functions give."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

from changeflow import lcr, values

pytestmark = pytest.mark.spark


def test_row_map_equals_the_map_built_from_columns(spark) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    names = ["id", "it's", "back`tick", "back\\slash", "MixedCase", "amount", "ratio", "ok",
             "born", "seen", "local", "blob"]
    row = (7, "a 'quoted' \\ text", "b", "c", "d", decimal.Decimal("12.50"), 0.25, True,
           dt.date(2024, 2, 29), dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
           dt.datetime(2024, 1, 2, 3, 4, 5), b"\x00\xff")
    ddl = ("p_id bigint, `p_it's` string, `p_back``tick` string, `p_back\\slash` string, "
           "p_MixedCase string, p_amount decimal(10,2), p_ratio double, p_ok boolean, "
           "p_born date, p_seen timestamp, p_local timestamp_ntz, p_blob binary")
    df = spark.createDataFrame([row, tuple(None for _ in row)], ddl)
    schema = df.select(*[F.col("`" + c.name.replace("`", "``") + "`").alias(c.name[2:])
                         for c in df.schema]).schema
    assert [f.name for f in schema] == names
    reference = F.create_map(*[x for f in schema for x in (
        F.lit(lcr.canonical_identifier(f.name)),
        values.value_struct(F.col("`p_" + f.name.replace("`", "``") + "`"),
                            values.logical_type_for(f.dataType, column=f.name)))])
    out = df.select(values.row_map(schema, "p_").alias("m"), reference.alias("r"))
    assert out.schema["m"].dataType == out.schema["r"].dataType
    rows = out.collect()
    assert [r.m for r in rows] == [r.r for r in rows]
    assert rows[0].m["IT'S"].str == "a 'quoted' \\ text" and rows[0].m["ID"].int == 7
    assert rows[0].m["BACK\\SLASH"].str == "c" and rows[1].m["AMOUNT"].dec is None
