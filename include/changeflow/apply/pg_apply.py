"""Applying source transactions through one PostgreSQL connection (see :mod:`.postgres`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from changeflow import faults
from changeflow import lcr as contract
from changeflow.apply import errorq, pg_bulk, pg_columnar, pg_resolve
from changeflow.apply.config import ConflictHandlerSpec
from changeflow.apply.ddl import DdlError
from changeflow.apply.errorq import FailedTxn
from changeflow.apply.handlers import Handlers, load
from changeflow.apply.pg_statements import TXN_SQL, StatementBuilder, ensure_bookkeeping
from changeflow.apply.pg_txns import SourceTxn, decoded, source_transactions
from changeflow.apply.positions import TxnId
from changeflow.apply.records import Commit, DdlLCR, HandlerError, RowLCR, UserMessage
from changeflow.config import ApplySpec, PostgresTarget
from changeflow.errors import ConfigError, TransientError
from changeflow.pgconn import int_to_lsn
from changeflow.sites import SiteRuntime
from changeflow.state import utcnow

if TYPE_CHECKING:
    import psycopg

    from changeflow.state.leases import Lease

log = logging.getLogger(__name__)


class TxnFailed(Exception):
    """One transaction cannot be applied (its error-queue record is attached)."""

    def __init__(self, failed: FailedTxn):
        super().__init__(failed.error_message)
        self.failed = failed


class TargetUnavailableError(TransientError):
    """The target database failed in a way a retry may fix (connection, deadlock)."""


def origin_name(spec: ApplySpec, source: str | None = None) -> str:
    """The replication origin an apply's session uses: the apply tag and source database.

    >>> from changeflow.config import ApplySpec
    >>> origin_name(ApplySpec(name="a", queue="q.q"), "DBS1.EXAMPLE.COM")
    'changeflow_00_a~DBS1.EXAMPLE.COM'
    """
    base = f"changeflow_{spec.apply_tag.lower()}_{spec.name}"
    return f"{base}~{source}" if source else base


class PgApplier:
    """Applies source transactions through one target connection."""

    def __init__(self, conn: psycopg.Connection[Any], spec: ApplySpec, rt: SiteRuntime,
                 handlers: Handlers, conflict_handlers: list[ConflictHandlerSpec],
                 lease: Lease | None, result: Any):
        assert spec.target is not None
        self.conn, self.spec, self.rt, self.handlers = conn, spec, rt, handlers
        self.target: PostgresTarget = spec.target
        self.conflict_handlers = conflict_handlers
        self.lease, self.result = lease, result
        ensure_bookkeeping(conn)
        self.builder = StatementBuilder(conn, self.target.schema_map, self.target.import_tables,
                                        detect=spec.conflicts.detect,
                                        compare={k: v for k, v in spec.conflicts.compare.items()})
        self._origin: str | None = None
        self._failing: str | None = None
        self._known_errors = errorq.keys(rt.store, spec.name)
        plain = not handlers.dml and handlers.ddl is None and handlers.precommit is None
        self.bulk = pg_bulk.BulkApplier(conn, self.builder) \
            if plain and spec.conflicts.detect else None

    # -- setup ---------------------------------------------------------------------------
    def check_handlers(self) -> None:
        """Refuse conflict handlers naming a column their (existing) table does not have.

        Raises:
            ConfigError: naming the handler and the column.
        """
        from changeflow.apply.conflicts import check_columns

        for h in self.conflict_handlers:
            owner, name = h.table.split(".", 1)
            rows = self.conn.execute(
                "SELECT column_name::text FROM information_schema.columns WHERE "
                "table_schema = %s AND table_name = %s",
                (self.builder.schema_of(owner.upper()), name)).fetchall()
            if rows:
                check_columns(h, [r[0] for r in rows])

    def _use_origin(self, source: str) -> None:
        if not self.target.tag_origin:
            return
        name = origin_name(self.spec, source)
        if name == self._origin:
            return
        if self._origin is not None:
            self.conn.execute("SELECT pg_replication_origin_session_reset()")
        self.conn.execute(
            "SELECT pg_replication_origin_create(%s) WHERE pg_replication_origin_oid(%s) IS NULL",
            (name, name))
        self.conn.execute("SELECT pg_replication_origin_session_setup(%s)", (name,))
        self._origin = name

    # -- positions -----------------------------------------------------------------------
    def done(self, txns: list[TxnId]) -> set[TxnId]:
        """The transactions done before (exactly, or at or below the watermark)."""
        out: set[TxnId] = set()
        by: dict[str, list[TxnId]] = {}
        for t in txns:
            by.setdefault(t.source, []).append(t)
        for source, ts in by.items():
            mark = self.conn.execute(
                "SELECT commit_scn FROM changeflow.apply_progress WHERE apply_name = %s AND "
                "source_database = %s", (self.spec.name, source)).fetchone()
            if mark is not None:
                out.update(t for t in ts if t.scn <= mark[0])
            rows = self.conn.execute(
                "SELECT commit_scn, transaction_id FROM changeflow.applied_txns WHERE "
                "apply_name = %s AND source_database = %s AND commit_scn BETWEEN %s AND %s",
                (self.spec.name, source, min(t.scn for t in ts), max(t.scn for t in ts)),
            ).fetchall()
            seen = {(int(r[0]), r[1]) for r in rows}
            out.update(t for t in ts if (t.scn, t.txn) in seen)
        self.conn.commit()
        return out

    def prune(self) -> None:
        """Collapse done-transaction entries older than the history into the watermark."""
        with self.conn.transaction():
            self.conn.execute("""
                WITH newest AS (
                    SELECT source_database, max(commit_time) AS t FROM changeflow.applied_txns
                     WHERE apply_name = %(a)s GROUP BY source_database),
                old AS (
                    DELETE FROM changeflow.applied_txns x USING newest n
                     WHERE x.apply_name = %(a)s AND x.source_database = n.source_database
                       AND x.commit_time < n.t - make_interval(secs => %(s)s)
                    RETURNING x.source_database, x.commit_scn, x.commit_time)
                INSERT INTO changeflow.apply_progress AS p
                    (apply_name, source_database, commit_scn, commit_time, applied_at)
                SELECT %(a)s, source_database, max(commit_scn), max(commit_time), now()
                  FROM old GROUP BY source_database
                ON CONFLICT (apply_name, source_database) DO UPDATE
                   SET commit_scn = excluded.commit_scn, commit_time = excluded.commit_time,
                       applied_at = now() WHERE p.commit_scn < excluded.commit_scn
            """, {"a": self.spec.name, "s": self.spec.positions.history_days * 86400.0})

    # -- applying ------------------------------------------------------------------------
    def apply(self, txns: list[SourceTxn]) -> None:
        """Apply transactions in order, grouped by source without splitting any."""
        group: list[SourceTxn] = []
        size = 0
        for txn in txns:
            if self.result.stopped:
                return
            if group and (size + txn.size > self.target.group_changes
                          or txn.database != group[0].database):
                self._group(group)
                group, size = [], 0
            group.append(txn)
            size += txn.size
        if group and not self.result.stopped:
            self._group(group)

    def _group(self, group: list[SourceTxn]) -> None:
        import psycopg

        if self.bulk is not None and self._bulk(group, self.bulk):
            return
        ready: list[tuple[SourceTxn, list[Any]]] = []
        for txn in group:
            try:
                ready.append((txn, self._statements(txn)))
            except TxnFailed as exc:
                if not self._set_aside(txn, exc.failed):
                    return
        if not ready:
            return
        try:
            self._commit(ready, pipeline=True)
        except psycopg.OperationalError as exc:
            raise self._transient(exc) from exc
        except psycopg.Error as exc:
            log.info("apply %s: a group of %s transactions failed (%s); retrying one by one",
                     self.spec.name, len(ready), _first_line(exc))
            for txn, statements in ready:
                if not self._alone(txn, statements):
                    return
            return
        self._done([t for t, _ in ready])

    def _bulk(self, group: list[SourceTxn], bulk: pg_bulk.BulkApplier) -> bool:
        """Apply a group set-based (:mod:`.pg_bulk`); False: it goes statement by statement."""
        import psycopg

        try:
            columnar = pg_columnar.net(self.builder, group)
            tables = pg_bulk.net(self.builder, group) if columnar is None else {}
            with self.conn.transaction():
                self._begin(group[-1])
                if columnar is not None:
                    pg_columnar.apply(bulk, columnar, group, self.spec.name)
                else:
                    bulk.apply(tables, group, self.spec.name)
                if self.lease is not None:
                    self.lease.check()
                faults.point("apply.before_commit")
            faults.point("apply.after_commit")
        except pg_bulk.NotBulk as exc:
            log.debug("apply %s: group of %s transactions one by one: %s", self.spec.name,
                      len(group), exc)
            return False
        except psycopg.OperationalError as exc:
            raise self._transient(exc) from exc
        except psycopg.Error as exc:
            log.debug("apply %s: group of %s transactions one by one: %s", self.spec.name,
                      len(group), _first_line(exc))
            return False
        self._done(group)
        self.result.set_based += len(group)
        return True

    def _alone(self, txn: SourceTxn, statements: list[Any]) -> bool:
        failed = self.attempt(txn, statements)
        if failed is None:
            self._done([txn])
            return True
        return self._set_aside(txn, failed)

    def attempt(self, txn: SourceTxn, statements: list[Any] | None = None) -> FailedTxn | None:
        """Apply one transaction alone, resolving conflicts if it has handlers for them.

        Returns:
            None when it committed, else why it failed (nothing of it is committed).
        """
        import psycopg

        self._failing = None
        try:
            if statements is None:
                statements = self._statements(txn)
            self._commit([(txn, statements)], pipeline=False)
        except TxnFailed as exc:
            return exc.failed
        except psycopg.OperationalError as exc:
            raise self._transient(exc) from exc
        except psycopg.Error as exc:
            tables = {f"{m['object_owner']}.{m['object_name']}".lower() for m in txn.lcrs}
            if pg_resolve.is_conflict(exc) and any(h.table in tables
                                                   for h in self.conflict_handlers):
                return self._careful(txn)
            return self._failure(txn, exc, "conflict" if pg_resolve.is_conflict(exc)
                                 else "target")
        return None

    def _careful(self, txn: SourceTxn) -> FailedTxn | None:
        """Replay a transaction statement by statement, resolving conflicts."""
        import psycopg

        try:
            with self.conn.transaction():
                self._begin(txn)
                for m in self._handled(txn):
                    self._failing = m["msg_id"]
                    st = self.builder.statement(m)
                    try:
                        with self.conn.transaction():
                            self.conn.execute(st.sql, st.params)
                    except psycopg.Error as exc:
                        if not pg_resolve.is_conflict(exc):
                            raise
                        handlers = [h for h in self.conflict_handlers if h.table ==
                                    f"{m['object_owner']}.{m['object_name']}".lower()]
                        for fix in pg_resolve.resolve(self.builder, self.conn, m, handlers):
                            self.conn.execute(fix.sql, fix.params)
                        self.result.conflicts_resolved += 1
                self._finish(txn)
        except psycopg.OperationalError as exc:
            raise self._transient(exc) from exc
        except TxnFailed as exc:
            return exc.failed
        except (psycopg.Error, pg_resolve.UnresolvedConflictError) as exc:
            kind = "conflict" if isinstance(exc, pg_resolve.UnresolvedConflictError) \
                else "target"
            return self._failure(txn, exc, kind)
        return None

    def _statements(self, txn: SourceTxn) -> list[Any]:
        """Statements for a transaction after its handlers (failures raise TxnFailed)."""
        out = []
        for m in self._handled(txn):
            self._failing = m["msg_id"]
            try:
                out.append(self.builder.statement(m))
            except (contract.UnknownCommandTypeError, DdlError) as exc:
                kind = "command_type" if isinstance(exc, contract.UnknownCommandTypeError) \
                    else "ddl"
                raise TxnFailed(self._failure(txn, exc, kind)) from exc
        self._precommit(txn)
        return out

    def _handled(self, txn: SourceTxn) -> list[dict[str, Any]]:
        """The transaction's LCRs after the DML and DDL handlers."""
        if not self.handlers.dml and self.handlers.ddl is None:
            return txn.lcrs
        out: list[dict[str, Any]] = []
        for raw, m in zip(txn.raw, txn.lcrs, strict=True):
            table = f"{m['object_owner']}.{m['object_name']}".lower()
            path = None
            if m["kind"] == "ROW":
                path = self.handlers.dml.get((table, m["command_type"])) or \
                    self.handlers.dml.get((table, "DEFAULT"))
            if m["kind"] == "DDL" and self.handlers.ddl is not None:
                rec: Any = DdlLCR(raw)
                fn, label = self.handlers.ddl, self.handlers.ddl_path
            elif path is not None:
                rec, fn, label = RowLCR(raw), load(path, "DML"), path
            else:
                out.append(m)
                continue
            try:
                fn(rec)
            except Exception as exc:  # noqa: BLE001  (a handler error fails its transaction)
                self._failing = m["msg_id"]
                raise TxnFailed(self._failure(txn, HandlerError(
                    f"{'DDL' if m['kind'] == 'DDL' else 'DML'} handler {label} raised on "
                    f"{table} {m['command_type']}: {type(exc).__name__}: {exc}"), "handler")
                ) from exc
            out.extend(decoded(r) for r in rec.executed)
        return out

    def _precommit(self, txn: SourceTxn) -> None:
        fn = self.handlers.precommit
        if fn is None:
            return
        try:
            fn(Commit(txn.database, txn.transaction_id, txn.commit_scn, txn.commit_time,
                      len(txn.lcrs), tuple(sorted({f"{m['object_owner']}.{m['object_name']}"
                                                   .lower() for m in txn.lcrs}))))
        except Exception as exc:  # noqa: BLE001  (a handler error fails its transaction)
            raise TxnFailed(self._failure(txn, HandlerError(
                f"precommit handler {self.handlers.precommit_path} raised: "
                f"{type(exc).__name__}: {exc}"), "handler")) from exc

    def _begin(self, txn: SourceTxn) -> None:
        self._use_origin(txn.database)
        if self.target.tag_origin:
            self.conn.execute("SELECT pg_replication_origin_xact_setup(%s::pg_lsn, %s)",
                              (int_to_lsn(txn.commit_scn), txn.commit_time))

    def _finish(self, txn: SourceTxn, outcome: str = "applied") -> None:
        self.conn.execute(TXN_SQL, (self.spec.name, txn.database, txn.commit_scn,
                                    txn.transaction_id, txn.commit_time, outcome))
        if self.lease is not None:
            self.lease.check()

    def _commit(self, ready: list[tuple[SourceTxn, list[Any]]], *, pipeline: bool) -> None:
        from contextlib import nullcontext

        faults.point("apply.before_commit")
        with self.conn.transaction():
            self._begin(ready[-1][0])
            with self.conn.pipeline() if pipeline else nullcontext():
                cur = self.conn.cursor()
                for _, statements in ready:
                    for st in statements:
                        self._failing = st.msg_id
                        cur.execute(st.sql, st.params)
                for txn, _ in ready:
                    cur.execute(TXN_SQL, (self.spec.name, txn.database, txn.commit_scn,
                                          txn.transaction_id, txn.commit_time, "applied"))
            if self.lease is not None:
                self.lease.check()
            self._failing = None
        faults.point("apply.after_commit")

    def _done(self, group: list[SourceTxn]) -> None:
        r = self.result
        r.transactions += len(group)
        r.changes += sum(t.size for t in group)
        ddl = sum(t.count("DDL") for t in group)
        r.ddl += ddl
        if ddl and self.bulk is not None:
            self.bulk.forget()
        resolved = [self._known_errors.pop(t.id.key) for t in group
                    if t.id.key in self._known_errors]
        if resolved:
            errorq.delete_entries(self.rt.store, self.spec.name, resolved)
        now = utcnow()
        if len(r.lags) < 100_000:
            r.lags.extend((now - t.commit_time).total_seconds() for t in group
                          if t.commit_time is not None)

    # -- failures ------------------------------------------------------------------------
    def _failure(self, txn: SourceTxn, exc: BaseException, kind: str) -> FailedTxn:
        failing = self._failing or (txn.lcrs[0]["msg_id"] if txn.lcrs else None)
        pos = next((m["position"] for m in txn.lcrs if m["msg_id"] == failing), None)
        tables = sorted({f"{m['object_owner']}.{m['object_name']}".lower() for m in txn.lcrs})
        return FailedTxn(txn.id.key, kind, _first_line(exc, 2000), txn.database,
                         txn.transaction_id, txn.commit_scn, txn.commit_time, failing, pos,
                         tables)

    def _set_aside(self, txn: SourceTxn, failed: FailedTxn) -> bool:
        """Put a transaction in the error queue whole and mark it done in the target.

        Returns whether the apply goes on (False: ``stop_on_error``).
        """
        import pyarrow as pa

        log.warning("apply %s: transaction %s (%s at %s) goes to the error queue: %s",
                    self.spec.name, txn.transaction_id, txn.database, txn.commit_scn,
                    failed.error_message)
        path = errorq.lcr_file(self.rt.spec.staging_root, self.spec.name)
        errorq.write_lcrs(path, pa.Table.from_pylist(
            [{k: v for k, v in m.items() if k in contract.FIELD_NAMES} for m in txn.raw],
            schema=contract.arrow_schema()))
        with self.rt.store.begin() as conn:
            entry, old = errorq.record(conn, self.spec.name, failed, path, len(txn.raw))
        errorq.delete_file(old)
        self._known_errors[txn.id.key] = entry
        with self.conn.transaction():
            self._finish(txn, "error")
        self.result.errors += 1
        self.result.error_ids.append(entry)
        if self.spec.errors.stop_on_error:
            self.result.stopped = (
                f"apply {self.spec.name} stopped at transaction {txn.transaction_id} of "
                f"{txn.database} (commit position {txn.commit_scn}): "
                f"{failed.error_message}; it is in the error queue (stop_on_error)")
            return False
        return True

    def messages(self, users: list[dict[str, Any]]) -> None:
        """Hand user messages to the message handler; failures go to the error queue."""
        import pyarrow as pa

        if not users:
            return
        fn = load(self.handlers.message, "message") if self.handlers.message else None
        for row in sorted(users, key=lambda r: (r["enq_time"] is None, r["enq_time"],
                                                r["msg_id"])):
            self.result.user_messages += 1
            try:
                if fn is None:
                    raise HandlerError(f"apply {self.spec.name} has no message handler for "
                                       f"user message type {row.get('msg_type_name')!r}")
                fn(UserMessage(row))
                continue
            except Exception as exc:  # noqa: BLE001  (a handler error fails that message)
                text = str(exc) if isinstance(exc, HandlerError) else (
                    f"message handler {self.handlers.message} raised: "
                    f"{type(exc).__name__}: {exc}")
            failed = FailedTxn(f"msg:{row['msg_id']}", "message", text,
                               failing_msg_id=row["msg_id"], commit_time=row.get("enq_time"))
            path = errorq.lcr_file(self.rt.spec.staging_root, self.spec.name)
            errorq.write_lcrs(path, pa.Table.from_pylist(
                [{k: row.get(k) for k in contract.FIELD_NAMES}], schema=contract.arrow_schema()))
            with self.rt.store.begin() as conn:
                entry, old = errorq.record(conn, self.spec.name, failed, path, 1)
            errorq.delete_file(old)
            self.result.errors += 1
            self.result.error_ids.append(entry)

    def _transient(self, exc: Exception) -> TransientError:
        return TargetUnavailableError(
            f"apply {self.spec.name}: target failed transiently, nothing was committed for "
            f"the current group: {_first_line(exc)}")


def _first_line(exc: BaseException, limit: int = 400) -> str:
    text = str(exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:limit] if limit < 1000 else \
        text[:limit] or type(exc).__name__


__all__ = ["ConfigError", "PgApplier", "SourceTxn", "source_transactions"]
