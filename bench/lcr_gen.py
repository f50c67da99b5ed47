"""Synthetic row LCRs for benchmarks: a realistic batch built with Spark, no Python rows.

Each message is an UPDATE, INSERT or DELETE of ``HR.EMPLOYEES`` with four typed column
values; transactions hold ``txn_size`` messages and commit in SCN order.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from changeflow import lcr

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


def _typed(type_name: str, value: Column) -> Column:
    from pyspark.sql import functions as F

    field = lcr.LOGICAL_TYPES[type_name].field
    parts = [F.lit(type_name).alias("type")]
    for name, ddl in lcr.VALUE_FIELDS[1:]:
        v = value if name == field else F.lit(None)
        parts.append(v.cast(lcr.spark_type(ddl)).alias(name))
    return F.struct(*parts)


def _row_map(salt: str) -> Column:
    from pyspark.sql import functions as F

    rid = F.col("id")
    return F.create_map(
        F.lit("EMPLOYEE_ID"), _typed("INTEGER", rid),
        F.lit("LAST_NAME"),
        _typed("VARCHAR2", F.concat(F.lit(f"name{salt}-"), rid.cast("string"))),
        F.lit("SALARY"), _typed("NUMBER", (rid % 9000 + 1000).cast("decimal(38,10)")),
        F.lit("HIRE_DATE"),
        _typed("DATE", F.date_add(F.lit(dt.date(2000, 1, 1)), (rid % 5000).cast("int"))),
    )


def lcr_batch(
    spark: SparkSession, n: int, *, txn_size: int = 100, partitions: int = 8
) -> DataFrame:
    """``n`` valid row LCRs following the contract, in ``n / txn_size`` transactions."""
    from pyspark.sql import functions as F

    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    df = spark.range(0, n, 1, partitions)
    txn = (F.col("id") / txn_size).cast("bigint")
    cmd = F.element_at(F.array(F.lit("INSERT"), F.lit("UPDATE"), F.lit("DELETE")),
                       (F.col("id") % 3 + 1).cast("int"))
    given = {
        "schema_version": F.lit(lcr.SCHEMA_VERSION),
        "msg_id": F.substring(F.sha2(F.col("id").cast("string"), 256), 1, 32),
        "kind": F.lit("ROW"),
        "origin": F.lit("CAPTURED"),
        "source_database_name": F.lit("DBS1.EXAMPLE.COM"),
        "command_type": cmd,
        "object_owner": F.lit("HR"),
        "object_name": F.lit("EMPLOYEES"),
        "transaction_id": F.concat(F.lit("tx"), txn.cast("string")),
        "commit_scn": txn + 1,
        "commit_time": (F.lit(base).cast("long") + txn).cast("timestamp"),
        "position": F.col("id") % txn_size,
        "key_columns": F.array(F.lit("EMPLOYEE_ID")),
        "old_values": F.when(cmd != "INSERT", _row_map("o")),
        "new_values": F.when(cmd != "DELETE", _row_map("n")),
    }
    cols = [
        given.get(name, F.lit(None)).cast(lcr.spark_type(ddl)).alias(name)
        for name, ddl, _ in lcr.LCR_FIELDS
    ]
    return df.select(*cols)
