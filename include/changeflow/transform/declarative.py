"""Declarative transformations as Spark expressions (no Python per message).

Each :class:`~changeflow.rules.transforms.Step` rewrites the LCR columns of the rows
whose selected rule (column :data:`RULE`) is the step's rule and whose table (or
schema) is the step's; every other row passes unchanged. A step naming a column
the row does not have (in a full row image: an INSERT or UPDATE's new values) stops
the job with an error naming the rule, the table and the column, as does adding a
column the row already has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from changeflow import values
from changeflow.rules.transforms import Step

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

RULE = "_cf_transform_rule"
ERROR_PREFIX = "transformation error: "


def _applies(rule: str, step: Step) -> Column:
    from pyspark.sql import functions as F

    mine = F.col(RULE) == F.lit(rule)
    if step.kind == "rename_schema":
        return mine & (F.col("object_owner") == step.table)
    owner, name = step.table.split(".", 1)
    return mine & (F.col("object_owner") == owner) & (F.col("object_name") == name)


def _images(step: Step) -> list[str]:
    return [c for c, vt in (("old_values", "OLD"), ("new_values", "NEW"))
            if step.value_type in ("*", vt)]


def _fail(rule: str, step: Step, text: str) -> Column:
    from pyspark.sql import functions as F

    return F.raise_error(F.concat(F.lit(f"{ERROR_PREFIX}rule {rule}: {step.describe()}: "),
                                  F.lit(text), F.lit(" (message "), F.col("msg_id"),
                                  F.lit(")")))


def _missing(step: Step, column: str) -> Column:
    """A full row image (INSERT/UPDATE new values) without ``column``."""
    from pyspark.sql import functions as F

    return (F.col("command_type").isin("INSERT", "UPDATE") & F.col("new_values").isNotNull()
            & ~F.map_contains_key(F.col("new_values"), F.lit(column)))


def apply_step(df: DataFrame, rule: str, step: Step) -> DataFrame:
    """Rewrite the rows ``step`` applies to; the same columns come out."""
    from pyspark.sql import functions as F

    cond = _applies(rule, step)
    cols: dict[str, Column] = {}
    if step.kind in ("rename_table", "rename_schema"):
        assert step.to_table is not None
        if step.kind == "rename_table":
            owner, name = step.to_table.split(".", 1)
            cols["object_name"] = F.when(cond, F.lit(name)).otherwise(F.col("object_name"))
        else:
            owner = step.to_table
        cols["object_owner"] = F.when(cond, F.lit(owner)).otherwise(F.col("object_owner"))
    elif step.kind in ("delete_column", "rename_column"):
        col = step.from_column
        assert col is not None
        guard = F.when(cond & _missing(step, col), _fail(
            rule, step, f"the row has no column {col}"))
        for image in _images(step):
            m = F.col(image)
            if step.kind == "delete_column":
                new = F.map_filter(m, lambda k, _v: k != F.lit(col))
            else:
                new = F.transform_keys(m, lambda k, _v: F.when(k == F.lit(col), F.lit(
                    step.to_column)).otherwise(k))
            cols[image] = F.coalesce(guard, F.when(cond, new).otherwise(m))
        if step.kind == "rename_column":
            cols["key_columns"] = F.when(cond, F.transform(
                "key_columns", lambda k: F.when(k == F.lit(col), F.lit(step.to_column))
                .otherwise(k))).otherwise(F.col("key_columns"))
    else:
        col = step.to_column
        assert col is not None and step.value_sql is not None and step.logical_type
        value = values.value_struct(F.expr(step.value_sql), step.logical_type)
        for image in _images(step):
            m = F.col(image)
            exists = F.when(cond & m.isNotNull() & F.map_contains_key(m, F.lit(col)), _fail(
                rule, step, f"the row already has column {col}"))
            added = F.map_concat(m, F.create_map(F.lit(col), value))
            cols[image] = F.coalesce(exists, F.when(cond & m.isNotNull(), added).otherwise(m))
    return df.select(*[cols[c].alias(c) if c in cols else F.col(f"`{c}`") for c in df.columns])


def apply_steps(df: DataFrame, rule: str, steps: list[Step]) -> DataFrame:
    """Every step of a rule, in order."""
    for step in steps:
        df = apply_step(df, rule, step)
    return df
