"""DDL LCRs on Parquet targets: the DDL handler, or CREATE/DROP/TRUNCATE and ADD COLUMN.

A pass ends at the first transaction that holds DDL (:mod:`.passes`), so the DDL of
a pass belongs to its last transaction. :class:`DdlPlan` runs the apply's DDL handler
on each DDL LCR (what the handler executes is executed) or takes the LCR as it is,
parses it (:mod:`.ddl`) and keeps, per table, the operations in order:

* ``create_table``: a new, empty table (key from the PRIMARY KEY);
* ``add_column``: new columns (older files read them as NULL);
* ``truncate`` / ``drop_table``: every existing file goes; the table's row images of
  the same pass that come *before* the statement are not written (the *cutoff*);
  a dropped table is remembered, so later changes to it fail clearly.

Anything else (DROP/RENAME COLUMN, indexes, ...) fails the transaction into the error
queue, with a message pointing at the DDL handler.
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
from changeflow.apply.target import TargetCatalog, TargetTable
from changeflow.config import ApplySpec
from changeflow.errors import TargetError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

PARQUET_OPS = ("create_table", "drop_table", "truncate", "add_column")
Order = tuple[Any, ...]


class DdlPlan:
    """The DDL of one pass, per table, and its effect on the table headers."""

    def __init__(self, catalog: TargetCatalog, spec: ApplySpec, handlers: Handlers):
        self.catalog, self.spec, self.handlers = catalog, spec, handlers
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
                if op.op not in PARQUET_OPS:
                    raise parser.DdlError(
                        f"{op.op.replace('_', ' ')} is not executed on Parquet targets (they "
                        "create, drop and truncate tables and add columns); give the apply a "
                        "DDL handler to deal with it")
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
        followed by a CREATE TABLE). A TRUNCATE drops nothing, even of a table the
        target does not have yet."""
        last = [op.op for _, _, op in self.ops.get(name, [])
                if op.op in ("create_table", "drop_table")]
        return bool(last) and last[-1] == "drop_table"

    def cutoff(self, name: str) -> Order | None:
        """The position of the table's last TRUNCATE or DROP TABLE in this pass."""
        cuts = [o for o, _, op in self.ops.get(name, []) if op.op in ("truncate", "drop_table")]
        return max(cuts) if cuts else None

    def header(self, name: str, shape: TableShape | None, buckets: int
               ) -> tuple[TargetTable, bool]:
        """The table header once the DDL and the pass's LCR columns are applied.

        Returns:
            The header and whether the table is new (no files to look up).

        Raises:
            TargetError: the table was dropped (and not re-created), or the LCRs
                disagree with it (key, column types).
        """
        current = self.catalog.get(name)
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

    def _apply(self, name: str, current: TargetTable | None, op: parser.DdlOp,
               buckets: int) -> tuple[TargetTable | None, bool]:
        if op.op == "create_table":
            if not op.primary_key:
                raise TargetError(f"CREATE TABLE {name}: a Parquet target table needs a "
                                  "PRIMARY KEY")
            cols = [(c.name.lower(), c.logical_type) for c in op.columns]
            return self.catalog.new_table(name, [k.lower() for k in op.primary_key], cols,
                                          buckets), True
        if op.op == "drop_table":
            return None, True
        if current is None:
            if op.op == "truncate" or op.if_exists:
                return None, True
            raise TargetError(f"{op.op.replace('_', ' ').upper()} on {name}: the table does "
                              "not exist")
        if op.op == "truncate":
            return current, True
        known = {c for c, _ in current.columns}
        added = [(c.name.lower(), c.logical_type) for c in op.columns
                 if c.name.lower() not in known]
        return current.with_columns(added), False

    def _evolve(self, name: str, current: TargetTable | None, shape: TableShape,
                buckets: int) -> TargetTable | None:
        if current is None and not self.dropped(name):
            # Not there yet (a TRUNCATE of it, if any, had nothing to empty): the
            # LCRs create it, as they do without DDL.
            return self.catalog.evolve(name, shape.key_columns, shape.columns, buckets)
        if current is None:
            raise TargetError(f"target table {name} was dropped earlier in its transaction")
        if shape.key_columns and current.key_columns != shape.key_columns:
            raise TargetError(f"target table {name}: key columns {shape.key_columns} differ "
                              f"from the table's {current.key_columns}")
        known = dict(current.columns)
        for col, ltype in shape.columns:
            if col in known and known[col] != ltype:
                raise TargetError(f"target table {name}: column {col!r} is {known[col]}, the "
                                  f"change has {ltype}")
        return current.with_columns([(c, t) for c, t in shape.columns if c not in known])

    def check_alone(self, name: str) -> None:
        """Plan a table that only DDL touches (no row changes in the pass)."""
        if name in self.headers:
            return
        current = self.catalog.get(name)
        for _, _, op in self.ops.get(name, []):
            current, _ = self._apply(name, current, op, self.spec.buckets)
        self.headers[name] = current

    def commit(self, conn: Connection, written: set[str]) -> list[str]:
        """Commit what the DDL did to tables; returns files to delete after the commit."""
        gone: list[str] = []
        for name, ops in self.ops.items():
            last = ops[-1][2].op if ops else None
            if last == "drop_table":
                gone.extend(self.catalog.drop(conn, name, source=ops[-1][1].source,
                                              commit_scn=ops[-1][1].scn))
                continue
            if name in written:
                continue
            header = self.headers.get(name)
            if header is None:
                continue
            remove = []
            if self.cutoff(name) is not None:
                remove = [f.path for f in self.catalog.files(name)]
                gone.extend(remove)
            self.catalog.commit(conn, header, [], remove,
                                rows=0 if remove or header.version == 0 else None)
        return gone


def order_of(row: dict[str, Any]) -> Order:
    """The run order of an LCR (as :data:`changeflow.apply.images.ORDER`)."""
    return tuple(row[c] for c in ORDER)
