"""Typed values in Spark: encoding table columns into LCR value maps and back.

The value struct is defined by :mod:`changeflow.lcr`; this module holds the Spark
expressions that build it from a typed column and read it back into one, so that a
number stays a number and a timestamp a timestamp across capture and apply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from changeflow import lcr
from changeflow.errors import SchemaMismatchError

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import DataType, StructType


def logical_type_for(dtype: DataType, *, column: str = "?") -> str:
    """The logical LCR type that holds values of a Spark type.

    Raises:
        SchemaMismatchError: for a type the contract cannot hold.
    """
    from pyspark.sql import types as T

    mapping: list[tuple[type, str]] = [
        (T.StringType, "VARCHAR2"),
        (T.CharType, "VARCHAR2"),
        (T.VarcharType, "VARCHAR2"),
        (T.BooleanType, "BOOLEAN"),
        (T.ByteType, "INTEGER"),
        (T.ShortType, "INTEGER"),
        (T.IntegerType, "INTEGER"),
        (T.LongType, "INTEGER"),
        (T.DecimalType, "NUMBER"),
        (T.FloatType, "BINARY_DOUBLE"),
        (T.DoubleType, "BINARY_DOUBLE"),
        (T.DateType, "DATE"),
        (T.TimestampNTZType, "TIMESTAMP"),
        (T.TimestampType, "TIMESTAMP WITH TIME ZONE"),
        (T.BinaryType, "RAW"),
    ]
    for cls, name in mapping:
        if isinstance(dtype, cls):
            return name
    raise SchemaMismatchError(
        f"column type {dtype.simpleString()} is not supported by the LCR contract", field=column
    )


def value_struct(col: Column, logical_type: str) -> Column:
    """A typed-value struct holding ``col`` in the field of ``logical_type``."""
    from pyspark.sql import functions as F

    target = lcr.LOGICAL_TYPES[logical_type]
    fields = []
    for name, ddl in lcr.VALUE_FIELDS:
        if name == "type":
            expr = F.lit(logical_type)
        elif name == target.field:
            expr = col.cast(lcr.spark_type(ddl))
        else:
            expr = F.lit(None).cast(lcr.spark_type(ddl))
        fields.append(expr.alias(name))
    return F.struct(*fields)


def row_map(schema: StructType, prefix: str = "") -> Column:
    """A ``map<string, value>`` of every column of a row, keyed by canonical name.

    Args:
        schema: the schema of the row's columns.
        prefix: a prefix the columns carry in the current DataFrame (e.g. ``"o_"``).
    """
    from pyspark.sql import functions as F

    if not schema.fields:
        return F.create_map()
    # One SQL expression, parsed in the JVM: built from Column calls, every field of every
    # value struct cost a few py4j round trips (about 0.1 s a table in a capture).
    parts = []
    for field in schema.fields:
        ltype = logical_type_for(field.dataType, column=field.name)
        target = lcr.LOGICAL_TYPES[ltype].field
        column = "`" + f"{prefix}{field.name}".replace("`", "``") + "`"
        values = ", ".join(
            f"'{name}', " + (sql_string(ltype) if name == "type" else
                             f"CAST({column if name == target else 'NULL'} AS {ddl})")
            for name, ddl in lcr.VALUE_FIELDS)
        parts.append(f"{sql_string(lcr.canonical_identifier(field.name))}, "
                     f"named_struct({values})")
    return F.expr(f"map({', '.join(parts)})")


def sql_string(text: str) -> str:
    r"""A Spark SQL string literal (backslash escapes, as Spark's parser reads them).

    >>> print(sql_string("it's a \\ name"))
    'it\'s a \\ name'
    """
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def read_value(values: Column, column: str, logical_type: str) -> Column:
    """Read one column back from a value map, as the Spark type of its logical type."""
    field = lcr.LOGICAL_TYPES[logical_type].field
    return values.getItem(column).getField(field)
