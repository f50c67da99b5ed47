"""Row images into LCR value maps, as SQL text (step 2 and 3 of :mod:`.convert`).

Each row image of an event becomes its LCR value map in one ``map(...)`` expression
per table, a ``CASE`` over the captured tables by the table number in ``cf_t``
(:func:`per_table_sql`); Decimal columns are decoded in slot columns of their own
first (:func:`with_decimals`); a partial image keeps the entries of the columns it
holds (:func:`image_map`); the checks read the built maps back and stop the job with
:data:`ERROR_PREFIX` and the file, table, column and value of the first value that
did not decode (:func:`bad_value`, :func:`checked`).

The expressions are SQL text, each parsed once by Spark: built as trees of ``Column``
objects they cost thousands of calls into the JVM.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from changeflow import lcr
from changeflow.debezium import types as T
from changeflow.debezium.reader import TableTypes

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

ERROR_PREFIX = "debezium value error: "
IMAGES = {"before": "cf_before", "after": "cf_after"}
ENTRIES = f"array<struct<`key`:string,`value`:{lcr.VALUE_DDL}>>"


def lit(text: str) -> str:
    """A SQL string literal.

    >>> lit("it's")
    "'it\\\\'s'"
    """
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def per_table(tables: dict[str, TableTypes], build: Any, default: Column | None = None
               ) -> Column:
    """``build(tt)`` for the row's table (by the number in ``cf_t``), one CASE."""
    from pyspark.sql import functions as F

    t = F.col("cf_t")
    out = None
    for i, tt in enumerate(tables.values()):
        out = F.when(t == i, build(tt)) if out is None else out.when(t == i, build(tt))
    if out is None:
        return F.lit(None) if default is None else default
    return out if default is None else out.otherwise(default)


def raw_value(img: str, name: str) -> str:
    return f"`{IMAGES[img]}`[{lit(name)}]"


def decimal_slots(tables: dict[str, TableTypes]) -> dict[str, dict[str, int]]:
    """Per table, the slot of each Decimal column: its rank among the table's Decimals.

    Slot ``j`` holds, for every row, the ``j``-th Decimal column of the row's table,
    so the steps of decoding Decimals (:func:`.types.decimal_hex_sql` ...) are
    columns of their own, each computed once per row, however many tables there are.
    """
    return {label: {name: j for j, name in enumerate(
        n for n, ft in tt.columns.items() if ft.codec in T.DECIMAL_CODECS)}
        for label, tt in tables.items()}


def with_decimals(df: DataFrame, tables: dict[str, TableTypes]) -> DataFrame:
    """Two projections: each Decimal slot's bytes as hex and its scale, then its digits.

    (Spark does not share a subexpression between the branches of a ``CASE``: pasted
    into the value maps, the bytes would be decoded once per use in the formula.)
    """
    from pyspark.sql import functions as F

    slots = decimal_slots(tables)
    width = max((len(s) for s in slots.values()), default=0)
    if not width:
        return df
    step1, step2 = [], []
    for img in IMAGES:
        for j in range(width):
            def pick(tt: TableTypes, j: int = j, img: str = img, scale: bool = False) -> Column:
                name = next((n for n, k in slots[tt.label].items() if k == j), None)
                if name is None:
                    return F.lit(None)
                ft = tt.columns[name]
                code = T.decimal_scale_sql if scale else T.decimal_hex_sql
                sql = code(raw_value(img, name), ft)
                return F.expr(sql)

            hexed, scale = f"cf_h_{img}_{j}", f"cf_s_{img}_{j}"
            step1 += [per_table(tables, pick).cast("string").alias(hexed),
                      per_table(tables, lambda tt, p=pick: p(tt, scale=True))
                      .cast("int").alias(scale)]
            step2.append(F.expr(T.decimal_digits_sql(f"`{hexed}`")).alias(f"cf_d_{img}_{j}"))
    keep = list(df.columns)
    stepped = df.select("*", *step1)
    return stepped.select(*keep, *[c for c in stepped.columns if c.startswith("cf_s_")],
                          *step2)


def value_sql(sql: str, logical: str) -> str:
    """SQL of a typed-value struct holding ``sql`` in the field of ``logical`` (as
    :func:`changeflow.values.value_struct` builds it).

    The conversion's expressions are written as SQL text, each parsed once by Spark:
    built as trees of ``Column`` objects they cost thousands of calls into the JVM,
    about a second of every capture run.
    """
    target = lcr.LOGICAL_TYPES[logical].field
    parts = []
    for name, ddl in lcr.VALUE_FIELDS:
        if name == "type":
            value = lit(logical)
        elif name == target:
            value = f"CAST(({sql}) AS {ddl})"
        else:
            value = f"CAST(NULL AS {ddl})"
        parts += [lit(name), value]
    return f"named_struct({', '.join(parts)})"


def _decoded(img: str, name: str, ft: T.FieldType, slot: int | None) -> str:
    if slot is not None:
        scale = str(ft.scale or 0) if ft.codec == "decimal" else f"`cf_s_{img}_{slot}`"
        sql = T.decimal_value_sql(f"`cf_d_{img}_{slot}`", scale)
    else:
        sql = T.decode_sql(raw_value(img, name), ft)
    return value_sql(sql, ft.logical)


def per_table_sql(tables: dict[str, TableTypes], build: Any) -> str:
    """SQL of ``build(tt)`` (SQL text) for the row's table (by its number in ``cf_t``)."""
    branches = [f"WHEN cf_t = {i} THEN {build(tt)}" for i, tt in enumerate(tables.values())]
    return f"CASE {' '.join(branches)} END" if branches else "NULL"


def full_map(img: str, tt: TableTypes, slots: dict[str, int] | None = None) -> str:
    """SQL of every column of a row image of table ``tt`` decoded into one value map.

    A column the image does not hold is a value struct with a NULL typed field there;
    :func:`image_map` keeps only the columns the image holds. ``slots``: the table's
    Decimal slots (:func:`decimal_slots`), whose digits are columns.
    """
    pairs = [f"{lit(lcr.canonical_identifier(name))}, "
             f"{_decoded(img, name, ft, (slots or {}).get(name))}"
             for name, ft in tt.columns.items()]
    return f"map({', '.join(pairs)})" if pairs else "NULL"


def image_map(img: str, full: str, tt: TableTypes) -> str:
    """SQL of the LCR value map of a row image of table ``tt`` (NULL: no image).

    ``full`` names the column holding :func:`full_map`. An image holding every column
    (what the connector writes with schemas) is that map; a partial one (schemaless
    files, an export's key-only old values) keeps only the entries of the columns it
    holds, read from that map, so an absent column stays absent and no value is
    decoded twice in the generated code. A column that held the unchanged-TOAST
    placeholder is absent from the image already (:func:`without_unchanged`).
    """
    ref = f"`{IMAGES[img]}`"
    entries = []
    for name in tt.columns:
        key = lit(lcr.canonical_identifier(name))
        # one entry or none (flatten, not array_compact: a lambda, not code-generated)
        entries.append(f"CASE WHEN map_contains_key({ref}, {lit(name)}) THEN "
                       f"array(named_struct('key', {key}, 'value', `{full}`[{key}])) "
                       f"ELSE CAST(array() AS {ENTRIES}) END")
    if not entries:
        return "NULL"
    return (f"CASE WHEN {ref} IS NULL THEN NULL WHEN size({ref}) = {len(tt.columns)} "
            f"THEN `{full}` ELSE map_from_entries(flatten(array({', '.join(entries)}))) END")


def bad_value(img: str, built: str, tt: TableTypes) -> str:
    """SQL of ``<table>.<column>`` of the first value of image ``img`` that did not
    decode (else NULL).

    ``built`` names the column holding the image's map: a value that is present in
    the image but NULL in its typed field there did not decode. Only the column's
    name is a per-column branch; :func:`checked` describes it from literal maps, so
    the generated code stays small.
    """
    branches = []
    for name, ft in tt.columns.items():
        field = lcr.LOGICAL_TYPES[ft.logical].field
        branches.append(
            f"WHEN {raw_value(img, name)} IS NOT NULL AND "
            f"`{built}`[{lit(lcr.canonical_identifier(name))}].`{field}` IS NULL "
            f"THEN {lit(f'{tt.label}.{name}')}")
    return f"CASE {' '.join(branches)} END" if branches else "CAST(NULL AS STRING)"


def _descriptions(tables: dict[str, TableTypes]) -> tuple[str, str]:
    """SQL of literal maps from ``<table>.<column>`` to the column's name in the images
    and to what its value should have been."""
    names: list[str] = []
    wanted: list[str] = []
    for tt in tables.values():
        for name, ft in tt.columns.items():
            label = lit(f"{tt.label}.{name}")
            names.append(f"{label}, {lit(name)}")
            wanted.append(f"{label}, {lit(f' is not a {ft.logical} (Debezium codec {ft.codec})')}")
    empty = "CAST(map() AS map<string,string>)"
    return (f"map({', '.join(names)})" if names else empty,
            f"map({', '.join(wanted)})" if wanted else empty)


def checked(img: str, built: str, bad: str, tables: dict[str, TableTypes]) -> Column:
    """The map in column ``built``, or a job failure naming the first bad value, whose
    ``<table>.<column>`` is in column ``bad`` (:func:`bad_value`)."""
    from pyspark.sql import functions as F

    names, wanted = _descriptions(tables)
    return F.expr(
        f"CASE WHEN `{bad}` IS NOT NULL THEN raise_error(concat({lit(ERROR_PREFIX)}, file, "
        f"': ', `{bad}`, ': value ', substring(`{IMAGES[img]}`[{names}[`{bad}`]], 1, 60), "
        f"{wanted}[`{bad}`])) ELSE `{built}` END")


def key_of(tt: TableTypes, built: str) -> Column:
    """The key columns of the map in column ``built`` (an update's old values when the
    event has no ``before``: the key did not change)."""
    from pyspark.sql import functions as F

    keys = [lcr.canonical_identifier(k) for k in tt.key]
    if not keys:
        return F.lit(None)
    m = F.col(built)
    return F.create_map(*[x for k in keys for x in (F.lit(k), m[k])])
