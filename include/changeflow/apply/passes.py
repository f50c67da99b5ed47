"""One pass of an apply to Iceberg targets over a set of pending batches (see :mod:`.engine`).

Every pass has an identity (:attr:`Pass.pass_id`): the apply, the batches and the first
transaction of the pass's segment, or the error-queue entries it re-executes. The same
batches give the same pass again after a crash, and every snapshot the pass writes
carries the identity (:mod:`changeflow.targets.commit`): a table that an earlier attempt
published is read as it was before, and not written again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

from changeflow import faults, quality
from changeflow import lcr as contract
from changeflow.apply import enqueue as enq
from changeflow.apply import errorq, identity, positions, survey
from changeflow.apply.conflicts import check_columns, effective_handlers
from changeflow.apply.ddl_iceberg import DdlPlan, ensure
from changeflow.apply.errorq import FailedTxn
from changeflow.apply.handlers import ERROR_COLUMN, Handlers, run_dml, run_messages
from changeflow.apply.positions import TxnId
from changeflow.apply.records import Commit
from changeflow.apply.tables import TablePlan, txn_frame, without
from changeflow.config import ApplySpec, PipelineConfig
from changeflow.errors import ConfigError, TargetError
from changeflow.quality.target import TargetWrite
from changeflow.quality.validator import warm_up
from changeflow.queues import io as qio
from changeflow.sites import SiteRuntime, consumer_name
from changeflow.spark import concurrently
from changeflow.targets import commit as tcommit
from changeflow.targets.catalog import IcebergTargets

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession

    from changeflow.apply.engine import ApplyResult
    from changeflow.queues.catalog import Batch
    from changeflow.state.leases import Lease

log = logging.getLogger(__name__)


class Pass:
    """Everything one pass does before and at its commit."""

    def __init__(self, spark: SparkSession, cfg: PipelineConfig, spec: ApplySpec,
                 rt: SiteRuntime, targets: IcebergTargets, lease: Lease, handlers: Handlers,
                 dests: list[enq.Destination], rule_filter: Callable[[DataFrame], DataFrame]
                 | None, batches: list[Batch], result: ApplyResult, *,
                 source: DataFrame | None = None,
                 reexec: dict[str, errorq.ErrorEntry] | None = None):
        self.spark, self.cfg, self.spec, self.rt = spark, cfg, spec, rt
        self.targets, self.lease, self.handlers, self.dests = targets, lease, handlers, dests
        self.rule_filter, self.batches, self.result = rule_filter, batches, result
        self.failed: dict[TxnId, FailedTxn] = {}
        self.msg_failures: list[tuple[FailedTxn, dict[str, Any]]] = []
        self.written_tables: set[str] = set()
        self.stopped: str | None = None
        self.plans: dict[str, TablePlan] = {}
        self._cache: list[DataFrame] = []
        self._cut: set[TxnId] = set()
        self._precommitted: set[TxnId] = set()
        self.timings: dict[str, float] = {}
        self.source, self.reexec = source, reexec
        self.reexecuted: list[errorq.ErrorEntry] = []
        self.pass_id = ""

    # -- the pass ------------------------------------------------------------------------
    def run(self) -> bool:
        """Do the pass. Returns whether the batches are done (acknowledged)."""
        df = self.source if self.source is not None else qio.read_batches(self.spark,
                                                                           self.batches)
        if self.rule_filter is not None:
            df = self.rule_filter(df)
        try:
            if not self.batches:
                return self._run(df)
            with qio.guard(self.batches):
                return self._run(df)
        finally:
            for plan in self.plans.values():
                plan.release()
            for c in self._cache:
                c.unpersist()

    def _run(self, df: DataFrame) -> bool:
        from pyspark.sql import functions as F

        to_apply, parts = enq.split(self.cfg, df, self.dests)
        if survey.cache_batches(self.batches, to_apply):  # read three times
            to_apply = self._persist(to_apply)
        changes = to_apply.where(F.col("kind").isin("ROW", "DDL"))
        if self.cfg.quality.enabled:  # GX is imported beside the pass's Spark jobs
            warm_up()
        with self.step("survey"):
            txns, n_users = survey.transactions(to_apply)
            with self.rt.store.read() as conn:
                done = positions.done(conn, self.spec.name, [t.id for t in txns]) \
                    if self.reexec is None else set()
        todo = [t for t in txns if t.id not in done]
        self.result.skipped += len(txns) - len(todo)
        segment, complete = _segment(todo)
        self.times = {t.id: t.commit_time for t in segment}
        self.info = {t.id: t for t in segment}
        self.pass_id = self._identity(segment)
        for t in segment:
            if t.bad_command is not None:
                self._fail_command(t)
        work = changes if len(segment) == len(txns) else changes.join(
            txn_frame(self.spark, {t.id for t in segment}).hint("broadcast"),
            ["source_database_name", "commit_scn", "transaction_id"], "left_semi")
        ddl = DdlPlan(self.spark, self.targets, self.spec, self.handlers)
        with self.step("handlers"):
            if any(t.has_ddl for t in segment):
                ddl.collect(work, self._fail)
            work = self._handlers(work)
        with self.step("conflicts"):
            plans = self._tables(work, ddl)
        with self.step("messages"):
            if complete and n_users:
                self._messages(to_apply.where(F.col("kind") == "USER"), n_users)
        applied = self._applied(segment)
        with self.step("write"):
            written = self._write(plans, set(self.failed) | self._cut)
            ddl.prepare({w.table.name for w in written})
        with self.step("quality"):
            self._check(written)
        with self.step("error queue and enqueue"):
            files = self._error_files(changes) if self.reexec is None else {}
            enqueued = enq.enqueue(self.spark, self.spec.name, parts, self.batches) \
                if complete and parts and self.batches else 0
        with self.step("commit"):
            self._commit(written, ddl, applied, files, complete and not self._cut)
        self._tally(written, applied, enqueued, ddl)
        return complete and not self._cut

    @contextmanager
    def step(self, what: str) -> Iterator[None]:
        """Log how long a step of the pass took (long work shows progress)."""
        started = time.monotonic()
        yield
        self.timings[what] = self.timings.get(what, 0.0) + time.monotonic() - started
        log.info("apply %s: %s took %.2f s", self.spec.name, what, self.timings[what])

    def _persist(self, df: DataFrame) -> DataFrame:
        df = df.persist()
        self._cache.append(df)
        return df

    # -- failures ------------------------------------------------------------------------
    def _fail(self, f: FailedTxn) -> None:
        txn = TxnId.from_key(f.txn_key)
        if txn not in self.failed:
            info = self.info.get(txn)
            if info is not None:
                f.commit_time = f.commit_time or info.commit_time
                f.tables = sorted(set(f.tables) | info.tables)
            self.failed[txn] = f

    def _fail_command(self, t: survey.TxnInfo) -> None:
        assert t.bad_command is not None
        pos, msg, cmd, kind = t.bad_command
        try:
            contract.CommandType.parse(cmd, kind=kind)
            text = f"command type {cmd!r} is not applied"
        except contract.UnknownCommandTypeError as exc:
            text = str(exc)
        self._fail(FailedTxn(t.id.key, "command_type", f"LCR {msg} at position {pos}: {text}",
                             t.id.source, t.id.txn, t.id.scn, t.commit_time, msg, pos))

    # -- handlers ------------------------------------------------------------------------
    def _handlers(self, work: DataFrame) -> DataFrame:
        """Run the DML handlers; their failures fail transactions."""
        from pyspark.sql import functions as F

        tables = self.handlers.dml_tables()
        if not tables or not any(self.info[t].tables & tables for t in self.info):
            return work
        name = F.lower(F.concat_ws(".", "object_owner", "object_name"))
        handled = (F.col("kind") == "ROW") & name.isin(*sorted(tables))
        out = self._persist(run_dml(self.spark, work.where(handled), self.handlers))
        for r in out.where(F.col(ERROR_COLUMN).isNotNull()).collect():
            txn = TxnId(r.source_database_name, int(r.commit_scn), r.transaction_id)
            self._fail(FailedTxn(txn.key, "handler", r[ERROR_COLUMN], txn.source, txn.txn,
                                 txn.scn, None, r.msg_id, r.position,
                                 [f"{r.object_owner}.{r.object_name}".lower()]))
        emitted = out.where(F.col(ERROR_COLUMN).isNull()).drop(ERROR_COLUMN)
        return self._persist(work.where(~handled).unionByName(emitted))

    def _messages(self, users: DataFrame, n: int) -> None:
        """Hand the user messages to the message handler; failures go to the error queue."""
        fails = run_messages(users, self.handlers, self.spec.name).collect()
        self.result.user_messages += n
        for r in fails:
            row = r.asDict(recursive=True)
            key = f"msg:{row['msg_id']}"
            self.msg_failures.append((FailedTxn(
                key, "message", row[ERROR_COLUMN], failing_msg_id=row["msg_id"],
                commit_time=row.get("enq_time")), row))

    def _precommit(self, txns: list[TxnId]) -> None:
        fn = self.handlers.precommit
        if fn is None:
            return
        called = self._precommitted
        for txn in txns:
            if txn in self.failed or txn in called:
                continue
            called.add(txn)
            info = self.info[txn]
            try:
                fn(Commit(txn.source, txn.txn, txn.scn, info.commit_time, info.n,
                          tuple(sorted(info.tables))))
            except Exception as exc:  # noqa: BLE001  (a handler error fails its transaction)
                self._fail(FailedTxn(txn.key, "handler",
                                     f"precommit handler {self.handlers.precommit_path} raised: "
                                     f"{type(exc).__name__}: {exc}", txn.source, txn.txn,
                                     txn.scn))

    # -- tables --------------------------------------------------------------------------
    def _tables(self, work: DataFrame, ddl: DdlPlan) -> list[TablePlan]:
        """Plan every touched table, then settle conflicts and precommit handlers."""
        if self.failed:
            work = without(work, self.spark, set(self.failed))
        shapes = survey.tables(work) if any(self.info[t].tables for t in self.info) else {}
        handlers = effective_handlers(self.rt.store, self.spec.name,
                                      self.spec.conflicts.handlers)
        for name, shape in shapes.items():
            plan = self._plan(name, shape, ddl, [h for h in handlers if h.table == name])
            if plan is not None:
                self.plans[name] = plan
        for name in ddl.tables():
            if name not in self.plans:
                try:
                    ddl.check_alone(name)
                except TargetError as exc:
                    for txn in ddl.txns_of(name):
                        self._fail(FailedTxn(txn.key, "ddl", str(exc), txn.source, txn.txn,
                                             txn.scn))
                    ddl.forget(name)
        concurrently(self.spark, lambda plan: plan.prepare(work),
                     list(self.plans.values()), self.spec.parallelism)
        for plan in self.plans.values():
            for txn in plan.after_late_ddl():
                self._fail(FailedTxn(txn.key, "ddl", (
                    f"rows of {plan.table.name} follow a DROP or RENAME COLUMN of it in the same "
                    "transaction: they are not applied to Iceberg targets (give the apply a DDL "
                    "handler, or commit the DDL in a transaction of its own)"), txn.source,
                    txn.txn, txn.scn, tables=[plan.table.name]))
        order = sorted(self.info)
        plans = list(self.plans.values())
        for _ in range(len(order) + 1):
            before = set(self.failed)
            # The tables side by side, each without the transactions failed so far; one
            # failed here is taken out of the others' in the next round (a fixpoint).
            found = concurrently(self.spark, partial(TablePlan.conflicts, failed=set(before),
                                                     commit_times=self.times),
                                 plans, self.spec.parallelism)
            for failures in found:
                for f in failures.values():
                    self._fail(f)
            self._precommit([t for t in order if t not in self.failed])
            new = set(self.failed) - before
            if not new:
                break
            # Only tables the newly failed transactions touch can find anything new (a DML
            # handler may move LCRs to other tables: then every table is looked at again).
            touched = set().union(*(self.info[t].tables for t in new if t in self.info),
                                  *(self.failed[t].tables for t in new))
            plans = [p for p in self.plans.values() if p.table.name in touched
                     or self.handlers.dml_tables()]
        self._stop_at_first_error(order)
        return list(self.plans.values())

    def _plan(self, name: str, shape: survey.TableShape, ddl: DdlPlan,
              handlers: list[Any]) -> TablePlan | None:
        cc = self.spec.conflicts
        try:
            header, is_new = ddl.header(name, shape, self.spec.buckets)
            header, published = self._base(header)
        except TargetError as exc:
            for t in self.info.values():
                if name in t.tables:
                    self._fail(FailedTxn(t.id.key, "table", str(exc), t.id.source, t.id.txn,
                                         t.id.scn, t.commit_time, tables=[name]))
            return None
        for h in handlers:
            check_columns(h, header.column_names)
        compare = [c for c in (cc.compare.get(name) or sorted(shape.old_columns))
                   if c in dict(header.columns) and c not in header.key_columns]
        unknown = [c for c in cc.compare.get(name, []) if c not in dict(header.columns)]
        if unknown:
            raise ConfigError(
                f"conflicts.compare of {name}: column {unknown[0]!r} is not a column of the "
                f"table (it has {', '.join(header.column_names)})", file=self.cfg.source_path,
                key=f"applies.{self.spec.name}.conflicts.compare")
        plan = TablePlan(
            self.spark, self.targets, header, is_new, compare if cc.detect else [], handlers,
            cc.detect, cc.detect or self.cfg.quality.enabled,
            shape.partial(header.column_names), cutoff=ddl.cutoff(name), n_lcrs=shape.n)
        plan.published = published
        plan.late_from = ddl.late_from(name)
        return plan

    def _base(self, header: Any) -> tuple[Any, dict[str, str] | None]:
        """The header at the snapshot the pass reads (see :func:`.identity.base`)."""
        return identity.base(self.spark, self.targets, header, self.pass_id)

    def _stop_at_first_error(self, order: list[TxnId]) -> None:
        self._cut = set()
        if not (self.spec.errors.stop_on_error and self.failed):
            return
        first = min(self.failed)
        self._cut = {t for t in order if t > first and t not in self.failed}
        f = self.failed[first]
        self.stopped = (f"apply {self.spec.name} stopped at transaction {f.transaction_id} of "
                        f"{f.source_database} (commit position {f.commit_scn}): "
                        f"{f.error_message}; it is in the error queue, and the transactions "
                        "after it were not applied (stop_on_error)")

    # -- writing -------------------------------------------------------------------------
    def _applied(self, segment: list[survey.TxnInfo]) -> list[survey.TxnInfo]:
        return [t for t in segment if t.id not in self.failed and t.id not in self._cut]

    def _write(self, plans: list[TablePlan], excluded: set[TxnId]) -> list[TargetWrite]:
        """Stage each table's final images on a branch (not yet visible)."""
        tag = bytes.fromhex(self.spec.apply_tag)
        with tcommit.snapshot_properties(self.spark, self._props()):
            for plan in plans:  # one at a time: a new owner's namespace is made once
                if plan.published is None:
                    ensure(self.spark, self.targets, plan.table)
            return concurrently(self.spark,
                                lambda plan: self._write_one(plan, tag, excluded), plans,
                                self.spec.parallelism)

    def _write_one(self, plan: TablePlan, tag: bytes, excluded: set[TxnId]) -> TargetWrite:
        if plan.published is not None:  # checked when that attempt published it
            staged = tcommit.Staged(plan.table, "main", plan.table.snapshot,
                                    plan.published, self._rows_at(plan))
            return TargetWrite(plan.table, staged, None, published=True)
        tcommit.drop_stale_branches(self.spark, self.targets, plan.table.name,
                                    prefix=f"cf_{self.pass_id}_")
        images = plan.images(tag, excluded)
        expected = plan.expected() if self.cfg.quality.enabled else None
        staged = tcommit.stage(self.spark, self.targets, plan.table, self.pass_id, images,
                               partial=plan.partial or plan.folded_partial,
                               truncate=plan.cutoff is not None, located=plan.located())
        return TargetWrite(plan.table, staged, expected, changed=plan.keys,
                           located=plan.located())

    def _rows_at(self, plan: TablePlan) -> int:
        snap = plan.table.snapshot
        return 0 if snap is None else self.targets.row_count(self.spark, plan.table.name, snap)

    def _props(self) -> dict[str, str]:
        """Summary properties of every snapshot this pass writes."""
        return identity.snapshot_props(self.spec.name, self.pass_id, self.batches,
                                       list(self.info))

    def _identity(self, segment: list[survey.TxnInfo]) -> str:
        return identity.pass_id(self.spec.name, self.batches, segment, self.reexec)

    def _check(self, written: list[TargetWrite]) -> None:
        quality.check_target(self.spark, self.cfg, stage=f"apply:{self.spec.name}",
                             targets=self.targets, writes=written,
                             workers=self.spec.parallelism)

    def _error_files(self, changes: DataFrame) -> dict[str, tuple[str, int]]:
        """Write every failed transaction's LCRs (as received) to the error queue's files."""
        out: dict[str, tuple[str, int]] = {}
        if self.failed:
            import pyarrow.compute as pc

            rows = changes.join(txn_frame(self.spark, set(self.failed)).hint("broadcast"),
                                ["source_database_name", "commit_scn", "transaction_id"],
                                "left_semi").select(*contract.FIELD_NAMES).toArrow()
            keys = pc.binary_join_element_wise(
                rows.column("source_database_name"), rows.column("commit_scn").cast("string"),
                rows.column("transaction_id"), "\x1f")
            for key in set(keys.to_pylist()):
                part = rows.filter(pc.equal(keys, key)).sort_by([("position", "ascending")])
                out[key] = self._error_file(part)
        for f, row in self.msg_failures:
            import pyarrow as pa

            from changeflow.apply.handlers import _out_row

            one = {k: v for k, v in _out_row(row).items() if k != ERROR_COLUMN}
            out[f.txn_key] = self._error_file(pa.Table.from_pylist(
                [one], schema=contract.arrow_schema()))
        return out

    def _error_file(self, table: Any) -> tuple[str, int]:
        path = errorq.lcr_file(self.rt.spec.staging_root, self.spec.name)
        errorq.write_lcrs(path, table)
        return path, table.num_rows

    # -- commit --------------------------------------------------------------------------
    def _commit(self, written: list[TargetWrite], ddl: DdlPlan,
                applied: list[survey.TxnInfo], files: dict[str, tuple[str, int]],
                ack: bool) -> None:
        """Publish every staged table, run the DDL that follows the rows, then commit the
        positions, the error queue and the queue position in one state-store transaction.

        A crash between the publishes and the state commit leaves tables that hold this
        pass (recognised by the retry: :meth:`_base`) and nothing else done.
        """
        replaced: list[str] = []
        faults.point("apply.before_commit")
        with self.rt.store.read() as conn:
            self.lease.check(conn)
        for w in written:
            if not w.published:
                tcommit.publish(self.spark, self.targets, w.staged)
        faults.point("apply.during_commit")
        ddl.finish({w.table.name for w in written}, self._props())
        with self.rt.store.begin() as conn:
            self.lease.check(conn)
            for w in written:
                self.targets.note_published(conn, w.table.name, w.staged.rows_after,
                                            w.staged.snapshot)
            ddl.commit(conn)
            positions.record(conn, self.spec.name,
                             [(t.id, t.commit_time) for t in applied])
            positions.note_last(conn, self.spec.name, [(t.id, t.commit_time) for t in applied])
            positions.record(conn, self.spec.name,
                             [(t, f.commit_time) for t, f in self.failed.items()], "error")
            for f in [*self.failed.values(), *(m for m, _ in self.msg_failures)]:
                if self.reexec is not None:
                    entry = self.reexec[f.txn_key]
                    errorq.note_failure(conn, entry, f.error_kind, f.error_message)
                    self.result.error_ids.append(entry.id)
                    continue
                path, n = files[f.txn_key]
                entry_id, old = errorq.record(conn, self.spec.name, f, path, n)
                self.result.error_ids.append(entry_id)
                if old:
                    replaced.append(old)
            if self.reexec is not None:
                failed_keys = {f.txn_key for f in self.failed.values()} | {
                    m.txn_key for m, _ in self.msg_failures}
                self.reexecuted = [e for k, e in self.reexec.items() if k not in failed_keys]
                errorq.remove(conn, [e.id for e in self.reexecuted])
                replaced.extend(e.lcr_path for e in self.reexecuted if e.lcr_path)
            if ack and self.batches:
                self.rt.catalog.ack(self._queue(), self._consumer(), self.batches[-1].seq,
                                    conn)
            positions.prune(conn, self.spec.name, self.spec.positions.history_days)
        faults.point("apply.after_commit")
        for path in replaced:
            errorq.delete_file(path)

    def _queue(self) -> str:
        return self.batches[0].queue

    def _consumer(self) -> str:
        return consumer_name("apply", self.spec.name)

    def _tally(self, written: list[TargetWrite], applied: list[survey.TxnInfo], enqueued: int,
               ddl: DdlPlan) -> None:
        r = self.result
        r.transactions += len(applied)
        r.errors += len(self.failed) + len(self.msg_failures)
        r.enqueued += enqueued
        r.ddl += ddl.executed
        excluded = set(self.info) - {t.id for t in applied}
        for w in written:
            r.rows_changed += w.staged.changed
            plan = self.plans.get(w.table.name)
            # the row LCRs this pass applied to the table (an earlier attempt's published
            # snapshot was applied then: none now)
            n = 0 if w.published or plan is None else plan.applied_lcrs(excluded, self.info)
            if n or w.staged.changed:
                r.tables[w.table.name] = r.tables.get(w.table.name, 0) + n
                self.written_tables.add(w.table.name)
            r.changes += n
        for plan in self.plans.values():
            r.conflicts_resolved += plan.resolved
            r.superseded += plan.skipped


def _segment(todo: list[survey.TxnInfo]) -> tuple[list[survey.TxnInfo], bool]:
    """The transactions of this pass: up to and including the first one holding DDL."""
    for i, t in enumerate(todo):
        if t.has_ddl:
            return todo[: i + 1], i == len(todo) - 1
    return todo, True

