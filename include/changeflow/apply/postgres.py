"""The apply process for PostgreSQL targets.

An apply with a ``target: {type: postgres, ...}`` dequeues the pending batches of its
queue and applies the row LCRs to a PostgreSQL database:

* **in source commit order**, one target transaction per group of whole source
  transactions (at most ``group_changes`` changes, but a source transaction is never
  split);
* **idempotently**: the applied high-water mark per source database is kept in the
  *target* database (``changeflow.apply_progress``) and updated in the same target
  transaction as the changes, so a re-delivered transaction is skipped;
* **tagged**: the session uses the replication origin ``changeflow_<tag>_<apply>``
  (``pg_replication_origin_session_setup``), so a capture on the target database
  sees the origin, sets the LCR tag and, by default, ignores those changes: two-way
  replication does not loop;
* **safely**: a group that fails is rolled back and re-applied one source transaction
  at a time; a transaction that still fails (constraint violation, conflict, an
  import-table trigger raising) goes to the apply error queue (the state store's
  ``apply_errors``: transaction id, commit position, failing message, error text)
  whole, and the apply carries on. A lost connection is transient and re-raised.

Statements are sent in pipeline mode (psycopg 3) and prepared once per shape.

Entry point: :func:`apply_pg_once`.
"""

from __future__ import annotations

import datetime as dt
import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from changeflow.apply.pg_statements import MARK_SQL, StatementBuilder, ensure_bookkeeping
from changeflow.capture.pg_decode import int_to_lsn
from changeflow.config import ApplySpec, PipelineConfig, PostgresTarget
from changeflow.errors import ConfigError, TransientError
from changeflow.pgconn import connect, resolve_url
from changeflow.queues import arrow_io
from changeflow.sites import SiteRuntime, consumer_name, open_pipeline, queue_site
from changeflow.state import schema, utcnow

if TYPE_CHECKING:
    import psycopg
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from changeflow.queues.catalog import Batch

log = logging.getLogger(__name__)
RuleFilter = Callable[["DataFrame"], "DataFrame"]
E = schema.apply_errors
_COLUMNS = ("kind", "msg_id", "source_database_name", "command_type", "object_owner",
            "object_name", "transaction_id", "commit_scn", "commit_time", "position",
            "key_columns", "old_values", "new_values")


class TargetUnavailableError(TransientError):
    """The target database failed in a way a retry may fix (connection, deadlock)."""


@dataclass
class SourceTxn:
    """One source transaction's LCRs, in position order."""

    database: str
    commit_scn: int
    transaction_id: str
    commit_time: dt.datetime | None
    lcrs: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class PgApplyResult:
    """What one apply run did."""

    apply: str
    batches: int = 0
    messages: int = 0
    changes: int = 0
    transactions: int = 0
    skipped: int = 0
    errors: int = 0
    seconds: float = 0.0
    lags: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Changes applied per second of the run."""
        return self.changes / self.seconds if self.seconds else 0.0


def origin_name(spec: ApplySpec) -> str:
    """The replication origin an apply's session uses: it encodes the apply tag."""
    return f"changeflow_{spec.apply_tag.lower()}_{spec.name}"


def source_transactions(table: pa.Table, marks: dict[str, int]) -> tuple[list[SourceTxn], int]:
    """Group LCRs into source transactions above the marks, in commit order.

    Returns:
        The transactions to apply and how many were skipped as already applied.
    """
    import pyarrow.compute as pc

    table = table.filter(pc.is_in(table.column("kind"), value_set=_kinds()))
    table = table.select(list(_COLUMNS)).sort_by(
        [("commit_scn", "ascending"), ("source_database_name", "ascending"),
         ("transaction_id", "ascending"), ("position", "ascending")])
    out: list[SourceTxn] = []
    skipped: set[tuple[str, int, str]] = set()
    seen: set[str] = set()
    for m in _rows(table):
        key = (m["source_database_name"], m["commit_scn"], m["transaction_id"])
        if m["commit_scn"] <= marks.get(key[0], -1):
            skipped.add(key)
            continue
        if m["msg_id"] in seen:
            continue
        seen.add(m["msg_id"])
        if not out or (out[-1].database, out[-1].commit_scn, out[-1].transaction_id) != key:
            out.append(SourceTxn(key[0], key[1], key[2], m["commit_time"]))
        out[-1].lcrs.append(m)
    return out, len(skipped)


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    """Rows as dicts, value maps decoded to ``{COLUMN: value}`` column-wise (fast)."""
    columns = {}
    for name in table.column_names:
        if name in ("old_values", "new_values"):
            columns[name] = _map_dicts(table.column(name))
        else:
            columns[name] = table.column(name).to_pylist()
    names = list(columns)
    return [dict(zip(names, values, strict=True))
            for values in zip(*columns.values(), strict=True)]


def _map_dicts(col: Any) -> list[dict[str, Any] | None]:
    import pyarrow as pa

    from changeflow import lcr

    arr = pa.concat_arrays(col.chunks) if col.num_chunks != 1 else col.chunk(0)
    if not len(arr):
        return []
    offsets = arr.offsets.to_pylist()
    keys, items = arr.keys, arr.items
    base = offsets[0] if len(keys) == offsets[-1] - offsets[0] else 0
    keys = keys.to_pylist()
    types = items.field("type").to_pylist()
    fields = {t.field: t.name for t in lcr.LOGICAL_TYPES.values()}
    by_type = {fields[f]: items.field(f).to_pylist() for f in fields if f in
               {lcr.LOGICAL_TYPES[t].field for t in set(types) if t}}
    values = [by_type[t][i] if t else None for i, t in enumerate(types)]
    valid = arr.is_valid().to_pylist()
    return [
        dict(zip(keys[offsets[i] - base:offsets[i + 1] - base],
                 values[offsets[i] - base:offsets[i + 1] - base], strict=True))
        if valid[i] else None
        for i in range(len(valid))
    ]


def _kinds() -> Any:
    import pyarrow as pa

    return pa.array(["ROW", "DDL"])


class PgApplier:
    """Applies source transactions through one target connection."""

    def __init__(self, conn: psycopg.Connection[Any], spec: ApplySpec, rt: SiteRuntime):
        assert spec.target is not None
        self.conn = conn
        self.spec = spec
        self.target: PostgresTarget = spec.target
        self.rt = rt
        self.builder = StatementBuilder(conn, self.target.schema_map, self.target.import_tables)
        self._failing: str | None = None
        if self.target.tag_origin:
            self._setup_origin()

    def _setup_origin(self) -> None:
        name = origin_name(self.spec)
        self.conn.execute(
            "SELECT pg_replication_origin_create(%s) WHERE pg_replication_origin_oid(%s) IS NULL",
            (name, name),
        )
        self.conn.execute("SELECT pg_replication_origin_session_setup(%s)", (name,))

    def marks(self) -> dict[str, int]:
        """The applied high-water mark per source database, read from the target."""
        rows = self.conn.execute(
            "SELECT source_database, commit_scn FROM changeflow.apply_progress "
            "WHERE apply_name = %s", (self.spec.name,),
        ).fetchall()
        return {r[0]: int(r[1]) for r in rows}

    def apply(self, txns: list[SourceTxn], result: PgApplyResult) -> None:
        """Apply transactions in order, grouped without splitting any."""
        group: list[SourceTxn] = []
        size = 0
        for txn in txns:
            if group and size + len(txn.lcrs) > self.target.group_changes:
                self._apply_group(group, result)
                group, size = [], 0
            group.append(txn)
            size += len(txn.lcrs)
        if group:
            self._apply_group(group, result)

    def _apply_group(self, group: list[SourceTxn], result: PgApplyResult) -> None:
        import psycopg

        try:
            statements = [[self.builder.statement(m) for m in t.lcrs] for t in group]
            self._commit(group, statements, pipeline=True)
        except psycopg.OperationalError as exc:
            raise self._transient(exc) from exc
        except (psycopg.Error, ValueError) as exc:
            log.info("apply %s: a group of %s transactions failed (%s); retrying one by one",
                     self.spec.name, len(group), _first_line(exc))
            for txn in group:
                self._apply_alone(txn, result)
            return
        self._done(group, result)

    def _apply_alone(self, txn: SourceTxn, result: PgApplyResult) -> None:
        import psycopg

        self._failing = None
        try:
            statements = [[self.builder.statement(m) for m in txn.lcrs]]
            self._commit([txn], statements, pipeline=False)
        except psycopg.OperationalError as exc:
            raise self._transient(exc) from exc
        except (psycopg.Error, ValueError) as exc:
            failing = self._failing or (txn.lcrs[0]["msg_id"] if txn.lcrs else None)
            self._record_error(txn, failing, exc)
            self._commit([txn], [[]], pipeline=False)  # move the mark past it
            result.errors += 1
            return
        self._done([txn], result)

    def _commit(self, group: list[SourceTxn], statements: list[list[Any]], *,
                pipeline: bool) -> None:
        from contextlib import nullcontext

        last = group[-1]
        with self.conn.transaction():
            if self.target.tag_origin:
                self.conn.execute("SELECT pg_replication_origin_xact_setup(%s::pg_lsn, %s)",
                                  (int_to_lsn(last.commit_scn), last.commit_time))
            with self.conn.pipeline() if pipeline else nullcontext():
                cur = self.conn.cursor()
                for stmts in statements:
                    for st in stmts:
                        self._failing = st.msg_id
                        cur.execute(st.sql, st.params)
                for db, txn in _last_per_source(group).items():
                    cur.execute(MARK_SQL, (self.spec.name, db, txn.commit_scn, txn.commit_time,
                                           txn.transaction_id))
            self._failing = None

    def _done(self, group: list[SourceTxn], result: PgApplyResult) -> None:
        result.transactions += len(group)
        result.changes += sum(len(t.lcrs) for t in group)
        now = utcnow()
        if len(result.lags) < 100_000:
            result.lags.extend((now - t.commit_time).total_seconds() for t in group
                               if t.commit_time is not None)

    def _record_error(self, txn: SourceTxn, failing: str | None, exc: Exception) -> None:
        text = _first_line(exc, 2000)
        log.warning("apply %s: transaction %s (%s at %s) goes to the error queue: %s",
                    self.spec.name, txn.transaction_id, txn.database, txn.commit_scn, text)
        with self.rt.store.begin() as conn:
            known = conn.execute(select(E.c.id).where(
                E.c.apply == self.spec.name, E.c.source_database == txn.database,
                E.c.transaction_id == txn.transaction_id, E.c.commit_scn == txn.commit_scn,
            )).first()
            if known is None:
                conn.execute(E.insert().values(
                    apply=self.spec.name, source_database=txn.database,
                    transaction_id=txn.transaction_id, commit_scn=txn.commit_scn,
                    failing_msg_id=failing, error_message=text, created_at=utcnow(),
                ))

    def _transient(self, exc: Exception) -> TargetUnavailableError:
        return TargetUnavailableError(
            f"apply {self.spec.name}: target failed transiently, nothing was committed for "
            f"the current group: {_first_line(exc)}"
        )


def _last_per_source(group: list[SourceTxn]) -> dict[str, SourceTxn]:
    out: dict[str, SourceTxn] = {}
    for txn in group:
        out[txn.database] = txn
    return out


def _first_line(exc: BaseException, limit: int = 400) -> str:
    text = str(exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:limit] if limit < 1000 else \
        text[:limit] or type(exc).__name__


def _read(spark: SparkSession | None, batches: list[Batch],
          rule_filter: RuleFilter | None) -> pa.Table:
    if rule_filter is None:
        return arrow_io.read_arrow_batches(batches)
    if spark is None:
        raise ConfigError("an apply with rule sets needs a SparkSession (rules run in Spark)")
    from changeflow.queues import io as qio

    return rule_filter(qio.read_batches(spark, batches)).toArrow()


def apply_pg_once(
    spark: SparkSession | None,
    cfg: PipelineConfig,
    name: str,
    *,
    rule_filter: RuleFilter | None = None,
    max_batches: int | None = None,
    batches_per_round: int = 20,
    connect_attempts: int = 5,
) -> PgApplyResult:
    """Apply every pending batch of a PostgreSQL apply's queue once.

    Args:
        spark: needed only for ``rule_filter`` (and to purge consumed batches).
        cfg: the pipeline; ``name`` must be an apply with a ``postgres`` target.
        rule_filter: the apply's rule sets, e.g. ``RuleSetPair.filter``.
        max_batches: stop after about this many batches.
        batches_per_round: batches read, applied and acknowledged together.
        connect_attempts: connection attempts before a transient error.

    Raises:
        SourceUnreachableError, TargetUnavailableError: transient; a re-run resumes.
    """
    started = time.monotonic()
    open_pipeline(cfg)
    spec: ApplySpec = cfg.component("apply", name)
    if spec.target is None:
        raise ConfigError(f"apply {name!r} has no postgres target", file=cfg.source_path)
    rt, queue = queue_site(cfg, spec.queue)
    consumer = consumer_name("apply", name)
    result = PgApplyResult(name)
    with connect(resolve_url(spec.target), application_name=f"changeflow-apply-{name}",
                 attempts=connect_attempts) as conn:
        ensure_bookkeeping(conn)
        applier = PgApplier(conn, spec, rt)
        while max_batches is None or result.batches < max_batches:
            batches = rt.catalog.pending(queue, consumer, max_batches=batches_per_round)
            if not batches:
                break
            gc.disable()  # many short-lived objects per round; see capture/postgres.py
            try:
                txns, skipped = source_transactions(_read(spark, batches, rule_filter),
                                                    applier.marks())
                applier.apply(txns, result)
            finally:
                gc.enable()
            rt.catalog.ack(queue, consumer, batches[-1].seq)
            result.batches += len(batches)
            result.messages += sum(b.n_messages for b in batches)
            result.skipped += skipped
    if spark is not None and result.batches:
        from changeflow.propagation import purge

        purge(spark, cfg, spec.queue)
    result.seconds = time.monotonic() - started
    log.info("apply %s: %s changes in %s transactions (%.0f/s), %s skipped, %s errors", name,
             result.changes, result.transactions, result.rate, result.skipped, result.errors)
    return result
