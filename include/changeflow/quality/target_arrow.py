"""The target check's per-table rollup computed on the driver with Arrow.

:func:`changeflow.quality.target._rollup` builds one Spark job per table: the looked-up
images and the new delta files of the changed keys, resolved per key with a window,
fully joined with what the applied LCRs say, then aggregated to one row. Its inputs are
small (about one row per changed key), so here the same facts are computed on the
driver: the new delta files are read back from disk with Arrow (their key and
bookkeeping columns; what was written, not what the apply meant to write), the
looked-up images and the expectations are collected as Arrow (a Spark job each, over
frames the pass has already computed), and the counts are the Spark path's.

:func:`rollup` returns None, and the Spark path runs, when it cannot show that its
counts are the Spark path's: a file that is not local or not held as Spark writes it
(:func:`changeflow.apply.arrow_files.open_checked`), a floating-point key (Spark
equates ``-0.0`` and ``0.0`` and every NaN), or a NULL key part anywhere (Spark's join
never matches NULLs while Arrow's grouping does; the Spark path counts such keys).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from changeflow.apply import arrow_files as af
from changeflow.apply import lookup_arrow

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from changeflow.quality.target import TargetWrite

log = logging.getLogger(__name__)



@dataclass
class ArrowFacts:
    """One table's per-key facts computed here (the Spark path's are a DataFrame)."""

    table: pa.Table
    keys: list[str]


ORDER_COLUMNS = ("_cf_seq", "_cf_scn", "_cf_pos", "_cf_deleted")
MAX_KEYS = 5_000_000


def rollup(spark: SparkSession, w: TargetWrite) -> tuple[dict[str, int], pa.Table] | None:
    """Counts of the ``target_changes`` facts of one table, and its per-key facts, or None.

    Returns:
        ``keys``, ``nn``, ``uq``, ``aa``, ``ins``, ``dels``, ``eins``, ``edels`` (the
        Spark path's aggregate) and a table of per-key facts (for samples), or None.
    """
    import pyarrow as pa

    keys = w.table.key_columns
    paths = af.local_paths(spark, w.files, allow_none=True)
    schema = af.arrow_schema(w.table.spark_schema())
    if paths is None or schema is None or not w.checks_rows or not af.exact_keys(
            schema, keys):
        return None
    want = pa.schema([schema.field(c) for c in [*keys, *ORDER_COLUMNS]])
    try:
        new = [_read(p, want, keys) for p in paths]
        if w.before_arrow is not None:
            before = [_typed(w.before_arrow.select(want.names), want)]
        else:
            before = [] if w.before is None else [
                _typed(w.before.select(*want.names).toArrow(), want)]
        parts = [*before, *new]
        images = pa.concat_tables(parts) if parts else want.empty_table()
        expected = _typed(
            w.expected_arrow.select([*keys, "before", "present"])
            if w.expected_arrow is not None
            else w.expected.select(*keys, "before", "present").toArrow(),  # type: ignore[union-attr]
            pa.schema([*(schema.field(k) for k in keys), pa.field("before", pa.bool_()),
                       pa.field("present", pa.bool_())]))
        if expected.num_rows > MAX_KEYS or _null_keys(images, keys) or _null_keys(expected,
                                                                                   keys):
            return None
        facts = _facts(_after(images, keys), expected, keys)
    except (af.Unproven, pa.ArrowInvalid, pa.ArrowNotImplementedError,
            pa.ArrowTypeError) as exc:
        log.info("target check of %s: the Spark path (%s)", w.table.name, exc)
        return None
    return _counts(facts, keys), facts


def _read(path: str, want: pa.Schema, keys: list[str]) -> pa.Table:
    pf, present = af.open_checked(path, want, [*keys, "_cf_scn", "_cf_pos", "_cf_deleted"])
    return af.as_wanted(pf.read(columns=present, use_threads=False), want)


def _typed(got: pa.Table, want: pa.Schema) -> pa.Table:
    import pyarrow as pa

    return pa.Table.from_arrays([got.column(f.name).cast(f.type) for f in want], schema=want)


def _null_keys(table: pa.Table, keys: list[str]) -> bool:
    return any(table.column(k).null_count for k in keys)


def _after(images: pa.Table, keys: list[str]) -> pa.Table:
    """Per key, whether its newest image (as reads order them,
    :func:`changeflow.apply.lookup_arrow.newest`) is a row, not a tombstone."""
    import pyarrow as pa
    import pyarrow.compute as pc

    newest = lookup_arrow.newest(images, keys)
    return pa.table({**{k: newest.column(k) for k in keys},
                     "_after": pc.invert(newest.column("_cf_deleted"))})


def _facts(after: pa.Table, expected: pa.Table, keys: list[str]) -> pa.Table:
    """The Spark path's per-key facts: a full outer join of the two sides on the key."""
    import pyarrow as pa
    import pyarrow.compute as pc

    joined = expected.join(after, keys, join_type="full outer", use_threads=False,
                           coalesce_keys=True)
    false = pa.scalar(False)
    after_present = pc.coalesce(joined.column("_after"), joined.column("before"), false)
    expect = pc.coalesce(joined.column("present"), joined.column("before"), false)
    before = pc.coalesce(joined.column("before"), false)
    counts = joined.select(keys).append_column("_n", pa.array([1] * joined.num_rows)) \
        .group_by(keys, use_threads=False).aggregate([("_n", "sum")])
    multi = counts.filter(pc.greater(counts.column("_n_sum"), 1))
    unique = pc.invert(af.member_mask(joined, multi, keys)) if multi.num_rows else \
        pa.array([True] * joined.num_rows)
    not_null = pa.array([True] * joined.num_rows)
    for k in keys:
        not_null = pc.and_(not_null, pc.is_valid(joined.column(k)))
    return pa.table({**{k: joined.column(k) for k in keys}, "key_not_null": not_null,
                     "key_unique": unique,
                     "as_applied": pc.equal(after_present, expect), "before": before,
                     "expected": expect, "after": after_present})


def _counts(facts: pa.Table, keys: list[str]) -> dict[str, int]:
    import pyarrow.compute as pc

    def n(mask: Any) -> int:
        return int(pc.sum(pc.cast(mask, "int64")).as_py() or 0)

    c = facts.column
    return {"keys": facts.num_rows, "nn": n(pc.invert(c("key_not_null"))),
            "uq": n(pc.invert(c("key_unique"))), "aa": n(pc.invert(c("as_applied"))),
            "ins": n(pc.and_(c("after"), pc.invert(c("before")))),
            "dels": n(pc.and_(pc.invert(c("after")), c("before"))),
            "eins": n(pc.and_(c("expected"), pc.invert(c("before")))),
            "edels": n(pc.and_(pc.invert(c("expected")), c("before")))}


def samples(facts: pa.Table, table_name: str, keys: list[str], column: str, k: int
            ) -> list[dict[str, Any]]:
    """Up to ``k`` keys failing a per-key check, shaped as the Spark path's samples."""
    import pyarrow.compute as pc

    bad = facts.filter(pc.invert(facts.column(column))).slice(0, k).to_pylist()
    out = []
    for r in bad:
        key = json.dumps({name: r.pop(name) for name in keys}, separators=(",", ":"),
                         default=str)
        out.append({"table_name": table_name, "key": key, **r})
    return out
