"""One look at a pass's messages before applying them: transactions and table shapes.

Two small aggregations over the changes (cached, or read again: :func:`cache_batches`),
collected to the driver:

* per source transaction: commit time, number of LCRs, the tables it touches, whether
  it holds DDL, and its first LCR with a command type the contract does not know;
* per target table: key columns and (column, logical type) in source order, which
  columns UPDATEs leave out (partial images), and which columns old values carry
  (what conflict detection can compare).

Rows are grouped by their *shape* (names and types of their values), of which a
batch holds a handful, so the pass costs a hash aggregate, not an explode.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from changeflow import lcr
from changeflow.apply.positions import TxnId
from changeflow.spark import worth_caching

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from changeflow.queues.model import Batch


@dataclass
class TxnInfo:
    """One source transaction of the pass."""

    id: TxnId
    commit_time: dt.datetime | None
    n: int
    tables: set[str]
    has_ddl: bool
    bad_command: tuple[int, str, str | None, str] | None  # position, msg id, command, kind


@dataclass
class TableShape:
    """What the pass's LCRs say about one target table."""

    name: str
    key_columns: list[str] = field(default_factory=list)
    columns: list[tuple[str, str]] = field(default_factory=list)
    update_sets: list[set[str]] = field(default_factory=list)
    old_columns: set[str] = field(default_factory=set)
    n: int = 0

    def partial(self, columns: list[str]) -> bool:
        """Whether some UPDATE lacks one of ``columns`` (the table's, after evolution)."""
        every = set(columns)
        return any(not every <= s for s in self.update_sets)


def valid_command() -> Column:
    """Whether a message's command type is one the contract allows for its kind."""
    from pyspark.sql import functions as F

    kind, cmd = F.col("kind"), F.col("command_type")
    return (((kind == "ROW") & cmd.isin(*lcr.DML_COMMANDS))
            | ((kind == "DDL") & cmd.isin(*lcr.DDL_COMMANDS)))


def transactions(messages: DataFrame) -> tuple[list[TxnInfo], int]:
    """Per source transaction of the ROW/DDL messages (see the module docstring), and
    how many user messages there are besides.

    One group per transaction and table it touches: the tables are the groups' keys,
    folded per transaction on the driver (a handful of rows per transaction), not a
    ``collect_set``, an aggregate Spark generates no code for, which costs a fresh
    JVM (a spark-submit apply) about two seconds before the JIT has compiled it.
    """
    from pyspark.sql import functions as F

    user = F.col("kind") == "USER"
    table = F.lower(F.concat_ws(".", "object_owner", "object_name"))
    bad = F.when(~user & ~F.coalesce(valid_command(), F.lit(False)),
                 F.struct(F.col("position"), F.col("msg_id"), F.col("command_type"),
                          F.col("kind")))
    rows = messages.groupBy("source_database_name", "commit_scn", "transaction_id",
                            user.alias("user"),
                            F.when(F.col("kind") == "ROW", table).alias("table")).agg(
        F.max("commit_time").alias("t"), F.count(F.lit(1)).alias("n"),
        F.max((F.col("kind") == "DDL").cast("int")).alias("ddl"),
        F.min(bad).alias("bad"),
    ).collect()
    groups: dict[tuple[Any, Any, Any], list[Any]] = {}
    users = 0
    for r in rows:
        if r.user:
            users += int(r.n)
        else:
            groups.setdefault((r.source_database_name, r.commit_scn, r.transaction_id),
                              []).append(r)
    out = []
    for (source, scn, txn), parts in groups.items():
        times = [r.t for r in parts if r.t is not None]
        bads = [r.bad for r in parts if r.bad is not None]
        b = min(bads, key=_struct_order) if bads else None
        out.append(TxnInfo(
            TxnId(source, int(scn or 0), txn), max(times) if times else None,
            sum(int(r.n) for r in parts), {r.table for r in parts if r.table is not None},
            any(r.ddl for r in parts),
            (int(b.position or 0), b.msg_id, b.command_type, b.kind) if b is not None else None))
    return sorted(out, key=lambda t: (t.id.scn, t.id.source, t.id.txn)), users


def _struct_order(row: Any) -> tuple[tuple[bool, Any], ...]:
    """Spark's ascending order of a struct's values: field by field, NULL first."""
    return tuple((v is not None, v) for v in row)


def tables(changes: DataFrame) -> dict[str, TableShape]:
    """Per target table of the ROW messages (see the module docstring)."""
    from pyspark.sql import functions as F

    rows = changes.where(F.col("kind") == "ROW").groupBy(
        "object_owner", "object_name", "key_columns", "command_type",
        F.map_keys("new_values").alias("cols"),
        F.map_values("new_values").getField("type").alias("types"),  # no lambda: codegen
        F.map_keys("old_values").alias("ocols"),
        F.map_values("old_values").getField("type").alias("otypes"),
    ).agg(F.count(F.lit(1)).alias("n")).collect()
    out: dict[str, TableShape] = {}
    for r in sorted(rows, key=lambda r: (r.object_owner, r.object_name)):
        name = f"{r.object_owner}.{r.object_name}".lower()
        shape = out.setdefault(name, TableShape(name))
        shape.n += int(r.n)
        if not shape.key_columns and r.key_columns:
            shape.key_columns.extend(k.lower() for k in r.key_columns)
        known = {c for c, _ in shape.columns}
        # The maps keep insertion order, so columns keep the order the source listed them.
        for names, types in ((r.cols, r.types), (r.ocols, r.otypes)):
            for col, ltype in zip(names or [], types or [], strict=True):
                if col.lower() not in known and ltype:
                    shape.columns.append((col.lower(), ltype))
                    known.add(col.lower())
        shape.old_columns.update(c.lower() for c in (r.ocols or []))
        if r.command_type == "UPDATE":
            shape.update_sets.append({c.lower() for c in (r.cols or [])})
    return out


def summary_of(txns: list[TxnInfo]) -> dict[str, Any]:
    """Counts for logs."""
    return {"transactions": len(txns), "lcrs": sum(t.n for t in txns),
            "with_ddl": sum(t.has_ddl for t in txns)}


#: the messages per batch, on average, from which a pass reads its batches again instead
#: of caching them (see :func:`cache_batches`). Measured with warm applies in ABBA order:
#: one batch of 100,000 changes applied 0.3-0.5 s faster read again, 200 batches of 100
#: changes 0.25 s faster cached
REREAD_FROM = 2_000


def cache_batches(batches: list[Batch], messages: DataFrame) -> bool:
    """Whether a pass caches the messages it reads three times (the survey, the tables'
    shapes, the effects) rather than reading its batches' Parquet again.

    Reading again skips building a cache of the value maps, which costs more than two
    more reads of large batches; each read of a batch file costs its own footer and
    task, so small batches (fewer than :data:`REREAD_FROM` messages each, on average)
    are cached, as are the error queue's entries a re-execution reads (no batches).
    Computing the messages may run Python (a rule's transform function is called once
    per message) or be nondeterministic: then they are cached whatever their size
    (:func:`changeflow.spark.worth_caching`).
    """
    if not batches or sum(b.n_messages for b in batches) < REREAD_FROM * len(batches):
        return True
    return worth_caching(messages)
