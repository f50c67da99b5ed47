"""DDL LCRs on Iceberg targets: the DDL handler, or Iceberg's own schema evolution.

A pass ends at the first transaction that holds DDL (:mod:`.passes`), so the DDL of a
pass belongs to its last transaction. :class:`DdlPlan` runs the apply's DDL handler on
each DDL LCR (what the handler executes is executed) or takes the LCR as it is, parses
it (:mod:`.ddl`) and keeps, per table, the operations in order:

* ``create_table``: a new table (key from the PRIMARY KEY); a table that exists keeps
  its rows and gains the columns it lacks;
* ``add_column``: new columns (older rows read them as NULL);
* ``drop_column``, ``rename_column``: Iceberg's schema evolution, after the pass's rows
  are written (rows of the pass before the statement use the old names); rows of the
  same table after the statement in the same transaction fail it;
* ``truncate`` / ``drop_table``: every existing row goes; the table's changes of the
  same pass that come *before* the statement are not written (the *cutoff*); a dropped
  table is remembered, so later changes to it fail clearly.

Statements are run so that running them again is harmless (see
:mod:`changeflow.targets.tables`): a retried pass may.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from changeflow.apply import ddl as parser
from changeflow.apply.errorq import FailedTxn
from changeflow.apply.handlers import Handlers
from changeflow.apply.images import ORDER
from changeflow.apply.positions import TxnId
from changeflow.apply.records import DdlLCR
from changeflow.apply.survey import TableShape
from changeflow.config import ApplySpec
from changeflow.errors import TargetError
from changeflow.targets import tables as ddl_sql
from changeflow.targets.catalog import IcebergTargets, TargetTable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

ICEBERG_OPS = ("create_table", "drop_table", "truncate", "add_column", "drop_column",
               "rename_column")
#: operations run after the pass's rows are written
LATE_OPS = ("drop_column", "rename_column")
Order = tuple[Any, ...]


class DdlPlan:
    """The DDL of one pass, per table, and its effect on the table headers."""

    def __init__(self, spark: SparkSession, targets: IcebergTargets, spec: ApplySpec,
                 handlers: Handlers):
        self.spark, self.targets, self.spec, self.handlers = spark, targets, spec, handlers
        self.ops: dict[str, list[tuple[Order, TxnId, parser.DdlOp]]] = {}
        self.headers: dict[str, TargetTable | None] = {}
        self.executed = 0

    def collect(self, work: DataFrame, fail: Callable[[FailedTxn], None]) -> None:
        """Read the pass's DDL LCRs (few) and plan them; failures fail their transaction."""
        from pyspark.sql import functions as F

        rows = [r.asDict(recursive=True) for r in
                work.where(F.col("kind") == "DDL").collect()]
        rows.sort(key=lambda r: (r["commit_scn"], r["source_database_name"],
                                 r["transaction_id"], r["position"]))
        failed: set[TxnId] = set()
        for row in rows:
            txn = TxnId(row["source_database_name"], int(row["commit_scn"]),
                        row["transaction_id"])
            if txn in failed:
                continue
            error = self._one(row, txn)
            if error is not None:
                failed.add(txn)
                fail(FailedTxn(txn.key, error[0], error[1], txn.source, txn.txn, txn.scn,
                               None, row["msg_id"], row["position"]))
                for ops in self.ops.values():
                    ops[:] = [o for o in ops if o[1] != txn]

    def _one(self, row: dict[str, Any], txn: TxnId) -> tuple[str, str] | None:
        order = (row["commit_scn"], row["source_database_name"], row["transaction_id"],
                 row["position"], 0)
        todo = [row]
        if self.handlers.ddl is not None:
            rec = DdlLCR(row)
            try:
                self.handlers.ddl(rec)
            except Exception as exc:  # noqa: BLE001  (a handler error fails its transaction)
                return "handler", (f"DDL handler {self.handlers.ddl_path} raised on "
                                   f"{row['command_type']}: {type(exc).__name__}: {exc}")
            todo = rec.executed
        for r in todo:
            try:
                op = parser.parse(r.get("ddl_text") or "")
                if op.op not in ICEBERG_OPS:
                    raise parser.DdlError(
                        f"{op.op.replace('_', ' ')} is not executed on Iceberg targets (they "
                        "create, drop and truncate tables and add, drop and rename columns); "
                        "give the apply a DDL handler to deal with it")
            except parser.DdlError as exc:
                return "ddl", f"DDL LCR {r['msg_id']} ({r['command_type']}): {exc}"
            owner = op.owner or r.get("base_table_owner") or r.get("object_owner") or ""
            name = f"{owner}.{op.table}".lower()
            self.ops.setdefault(name, []).append((order, txn, op))
            self.executed += 1
        return None

    def txns_of(self, name: str) -> list[TxnId]:
        """The transactions whose DDL touches a table."""
        return sorted({t for _, t, _ in self.ops.get(name, [])})

    def forget(self, name: str) -> None:
        """Drop a table's operations (their transaction failed)."""
        self.ops.pop(name, None)
        self.headers.pop(name, None)

    def tables(self) -> list[str]:
        """Tables the pass's DDL touches."""
        return sorted(self.ops)

    def dropped(self, name: str) -> bool:
        """Whether the pass's DDL leaves a table dropped (its last DROP TABLE is not
        followed by a CREATE TABLE). A TRUNCATE drops nothing."""
        last = [op.op for _, _, op in self.ops.get(name, [])
                if op.op in ("create_table", "drop_table")]
        return bool(last) and last[-1] == "drop_table"

    def cutoff(self, name: str) -> Order | None:
        """The position of the table's last TRUNCATE or DROP TABLE in this pass."""
        cuts = [o for o, _, op in self.ops.get(name, []) if op.op in ("truncate", "drop_table")]
        return max(cuts) if cuts else None

    def late_from(self, name: str) -> Order | None:
        """The position of the table's first DROP or RENAME COLUMN (rows after it in the
        same transaction cannot be applied)."""
        late = [o for o, _, op in self.ops.get(name, []) if op.op in LATE_OPS]
        return min(late) if late else None

    def header(self, name: str, shape: TableShape | None, buckets: int
               ) -> tuple[TargetTable, bool]:
        """The table header once the DDL and the pass's LCR columns are applied.

        Returns:
            The header and whether the table is new (nothing to look up).

        Raises:
            TargetError: the table was dropped (and not re-created), or the LCRs
                disagree with it (key, column types).
        """
        current = self.current(name)
        is_new = current is None
        for _, _, op in self.ops.get(name, []):
            current, fresh = self._apply(name, current, op, buckets)
            is_new = is_new or fresh
        if shape is not None:
            current = self._evolve(name, current, shape, buckets)
        if current is None:
            raise TargetError(f"target table {name} does not exist")
        self.headers[name] = current
        return current, is_new

    def current(self, name: str) -> TargetTable | None:
        """The table as the catalog has it now (None: it does not exist)."""
        return self.targets.get(self.spark, name)

    def _apply(self, name: str, current: TargetTable | None, op: parser.DdlOp,
               buckets: int) -> tuple[TargetTable | None, bool]:
        if op.op == "create_table":
            if not op.primary_key:
                raise TargetError(f"CREATE TABLE {name}: an Iceberg target table needs a "
                                  "PRIMARY KEY")
            cols = [(c.name.lower(), c.logical_type) for c in op.columns]
            keys = [k.lower() for k in op.primary_key]
            if current is None:
                return TargetTable(name, keys, cols, buckets, None, exists=False), True
            known = dict(current.columns)
            return current.with_columns([(c, t) for c, t in cols if c not in known]), False
        if op.op == "drop_table":
            return None, True
        if current is None:
            if op.op == "truncate" or op.if_exists:
                return None, True
            raise TargetError(f"{op.op.replace('_', ' ').upper()} on {name}: the table does "
                              "not exist")
        if op.op == "truncate" or op.op in LATE_OPS:
            return current, op.op == "truncate"
        known = {c for c, _ in current.columns}
        added = [(c.name.lower(), c.logical_type) for c in op.columns
                 if c.name.lower() not in known]
        return current.with_columns(added), False

    def _evolve(self, name: str, current: TargetTable | None, shape: TableShape,
                buckets: int) -> TargetTable | None:
        if current is None and not self.dropped(name):
            return evolve(self.targets, name, None, shape, buckets)
        if current is None:
            raise TargetError(f"target table {name} was dropped earlier in its transaction")
        return evolve(self.targets, name, current, shape, buckets)

    def check_alone(self, name: str) -> None:
        """Plan a table that only DDL touches (no row changes in the pass)."""
        if name in self.headers:
            return
        current = self.current(name)
        for _, _, op in self.ops.get(name, []):
            current, _ = self._apply(name, current, op, self.spec.buckets)
        self.headers[name] = current

    def prepare(self, written: set[str]) -> None:
        """Create the tables and add the columns the pass's DDL declares (before rows are
        written), for tables no row of the pass goes to (the others are made ready by
        the write)."""
        for name in self.ops:
            header = self.headers.get(name)
            if name in written or header is None or self.dropped(name):
                continue
            ensure(self.spark, self.targets, header)

    def finish(self, written: set[str], pass_props: dict[str, str]) -> None:
        """What DDL does after the rows are published: truncates of tables no row went
        to, dropped and renamed columns, dropped tables."""
        from changeflow.targets.commit import snapshot_properties

        for name, ops in self.ops.items():
            if self.dropped(name):
                ddl_sql.drop_table(self.spark, self.targets, name)
                continue
            if self.cutoff(name) is not None and name not in written \
                    and self.current(name) is not None:
                with snapshot_properties(self.spark, pass_props):
                    self.spark.sql(f"DELETE FROM {self.targets.ident(name)} WHERE true")
            for _, _, op in ops:
                if op.op == "drop_column":
                    for col in op.names:
                        ddl_sql.drop_column(self.spark, self.targets, name, col.lower())
                elif op.op == "rename_column":
                    ddl_sql.rename_column(self.spark, self.targets, name,
                                          op.names[0].lower(), op.names[1].lower())

    def commit(self, conn: Connection) -> None:
        """Remember dropped tables (and forget re-created ones) in the state store."""
        for name, ops in self.ops.items():
            if self.dropped(name):
                self.targets.mark_dropped(conn, name, source=ops[-1][1].source,
                                          commit_scn=ops[-1][1].scn)
            elif any(op.op == "create_table" for _, _, op in ops):
                self.targets.unmark_dropped(conn, name)


def evolve(targets: IcebergTargets, name: str, current: TargetTable | None,
           shape: TableShape, buckets: int) -> TargetTable:
    """The header after the pass's LCR columns: a new table, or new columns appended.

    Raises:
        TargetError: the table was dropped by DDL, its key differs, or a column's type
            differs from the table's (Iceberg cannot change it: to the error queue).
    """
    if current is None:
        gone = targets.dropped(name)
        if gone is not None:
            raise TargetError(
                f"target table {name} was dropped (DROP TABLE from "
                f"{gone['source_database']} at commit position {gone['commit_scn']}); "
                "its changes cannot be applied until a CREATE TABLE re-creates it")
        if not shape.key_columns:
            raise TargetError(f"target table {name}: its LCRs name no key columns")
        missing = [k for k in shape.key_columns if k not in {c for c, _ in shape.columns}]
        if missing:
            raise TargetError(f"target table {name}: key column {missing[0]!r} is missing")
        return TargetTable(name, shape.key_columns, shape.columns, buckets, None, exists=False)
    if shape.key_columns and current.key_columns != shape.key_columns:
        raise TargetError(f"target table {name}: key columns {shape.key_columns} differ "
                          f"from the table's {current.key_columns}")
    known = dict(current.columns)
    for col, ltype in shape.columns:
        if col in known and known[col] != ltype:
            raise TargetError(f"target table {name}: column {col!r} is {known[col]}, the "
                              f"change has {ltype}; Iceberg cannot change a column's type "
                              "this way")
    return current.with_columns([(c, t) for c, t in shape.columns if c not in known])


def ensure(spark: SparkSession, targets: IcebergTargets, header: TargetTable) -> None:
    """Make the catalog's table match a header: create it, or add its new columns."""
    if not header.exists and targets.get(spark, header.name) is None:
        ddl_sql.create(spark, targets, header)
        return
    ddl_sql.add_columns(spark, targets, header.name, header.columns)


def order_of(row: dict[str, Any]) -> Order:
    """The run order of an LCR (as :data:`changeflow.apply.images.ORDER`)."""
    return tuple(row[c] for c in ORDER)
