"""Re-executing error-queue transactions (``DBMS_APPLY_ADM.EXECUTE_ERROR``).

:func:`execute_errors` re-applies one entry, several, or all of an apply's error queue,
in source commit order, holding the apply's lease like any run. Each transaction
goes through everything an apply does (handlers, conflict detection and resolution,
DDL, the quality check), optionally after a *fix* function changed its LCRs (like
``EXECUTE_ERROR`` with a user procedure): ``fix(lcrs)`` receives the transaction's
:class:`~changeflow.apply.records.RowLCR` / ``DdlLCR`` / ``UserMessage`` objects and
returns the list to apply (or ``None`` to apply the list as it changed it).

A transaction that applies leaves the error queue (its LCR file is deleted) and
counts as applied; one that fails again stays, with the new error and one more
attempt. Re-execution takes its place by commit position: on a Iceberg target a row
that a later commit of the same source already changed keeps the later image, and
on either target the conflict checks compare with the rows as they are now.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from changeflow import lcr as contract
from changeflow.apply import errorq
from changeflow.apply.handlers import Handlers, load
from changeflow.apply.records import record_for
from changeflow.config import ApplySpec, PipelineConfig
from changeflow.sites import open_pipeline, queue_site
from changeflow.state.leases import Lease

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
Fix = Callable[[list[Any]], list[Any] | None]


@dataclass
class ReexecResult:
    """What a re-execution did."""

    apply: str
    applied: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)


def _fixed(entry: errorq.ErrorEntry, fix: Fix | None) -> list[dict[str, Any]]:
    rows = errorq.read_lcrs(entry).to_pylist()
    if fix is None:
        return rows
    records = [record_for(r) for r in rows]
    try:
        out = fix(records)
    except Exception as exc:  # noqa: BLE001  (the user's function: its error is reported)
        raise errorq.TerminalError(f"the fix function raised on error {entry.id}: "
                                   f"{type(exc).__name__}: {exc}") from exc
    return [r.to_row() for r in (records if out is None else out)]


def execute_errors(cfg: PipelineConfig, apply: str, ids: list[int] | None = None, *,
                   fix: Fix | str | None = None, spark: SparkSession | None = None,
                   lease_wait: float = 0.0) -> ReexecResult:
    """Re-execute error-queue entries (all of the apply's when ``ids`` is None).

    Args:
        fix: a function (or ``module:function`` path) that corrects each transaction's
            LCRs before it is applied again.
        spark: required for an apply with a Iceberg target.

    Raises:
        ErrorNotFoundError: an id is not in the apply's error queue (nothing re-executed).
        HandlerError: ``fix`` or a handler does not import.
    """
    open_pipeline(cfg)
    spec: ApplySpec = cfg.component("apply", apply)
    rt, _ = queue_site(cfg, spec.queue)
    entries = errorq.entries(rt.store, apply, ids=ids)
    if ids is not None:
        missing = sorted(set(ids) - {e.id for e in entries})
        if missing:
            raise errorq.ErrorNotFoundError(
                f"apply {apply} has no error {missing[0]} in its error queue "
                f"(`changeflow apply errors list --apply {apply}` lists them); nothing was "
                "re-executed")
    fn = load(fix, "fix") if isinstance(fix, str) else fix
    result = ReexecResult(apply)
    with Lease(rt.store, f"apply:{apply}", wait=lease_wait) as lease:
        prepared = []
        for e in entries:
            try:
                prepared.append((e, _fixed(e, fn)))
            except errorq.TerminalError as exc:
                with rt.store.begin() as conn:
                    errorq.note_failure(conn, e, "fix", str(exc))
                result.failed[e.id] = str(exc)
        if spec.target is not None:
            _postgres(cfg, spec, rt, lease, prepared, result)
        else:
            if spark is None:
                raise errorq.TerminalError(f"apply {apply} has a Iceberg target: re-execution "
                                           "needs a SparkSession")
            _parquet(spark, cfg, spec, rt, lease, prepared, result)
    return result


def _parquet(spark: SparkSession, cfg: PipelineConfig, spec: ApplySpec, rt: Any, lease: Lease,
             prepared: list[tuple[errorq.ErrorEntry, list[dict[str, Any]]]],
             result: ReexecResult) -> None:
    from changeflow.apply.engine import ApplyResult, targets_of
    from changeflow.apply.passes import Pass
    from changeflow.targets.maintenance import maintain

    handlers = Handlers.from_config(spec.handlers, spark)
    targets = targets_of(cfg, spec)
    groups: list[list[tuple[errorq.ErrorEntry, list[dict[str, Any]]]]] = []
    for e, rows in prepared:  # DDL transactions alone, the others together
        if any(r["kind"] == "DDL" for r in rows) or not groups or any(
                r["kind"] == "DDL" for _, rs in groups[-1] for r in rs):
            groups.append([])
        groups[-1].append((e, rows))
    touched: set[str] = set()
    for group in groups:
        data = [_spark_row(r) for _, rs in group for r in rs]
        df = spark.createDataFrame(data, contract.spark_schema())
        step = Pass(spark, cfg, spec, rt, targets, lease, handlers, [], None, [],
                    ApplyResult(spec.name), source=df,
                    reexec={e.txn_key: e for e, _ in group})
        step.run()
        touched.update(step.written_tables)
        done = {e.id for e in step.reexecuted}
        for e, _ in group:
            if e.id in done:
                result.applied.append(e.id)
            else:
                result.failed[e.id] = _message(rt, spec.name, e.id)
    for table in sorted(touched):
        maintain(spark, targets, table, spec.iceberg.maintenance)


def _postgres(cfg: PipelineConfig, spec: ApplySpec, rt: Any, lease: Lease,
              prepared: list[tuple[errorq.ErrorEntry, list[dict[str, Any]]]],
              result: ReexecResult) -> None:
    from changeflow.apply.conflicts import effective_handlers
    from changeflow.apply.pg_apply import PgApplier, source_transactions
    from changeflow.apply.postgres import PgApplyResult
    from changeflow.pgconn import connect, resolve_url

    assert spec.target is not None
    import pyarrow as pa

    handlers = Handlers.from_config(spec.handlers, None)
    out = PgApplyResult(spec.name)
    with connect(resolve_url(spec.target), application_name=f"changeflow-reexec-{spec.name}"
                 ) as conn:
        applier = PgApplier(conn, spec, rt, handlers,
                            effective_handlers(rt.store, spec.name, spec.conflicts.handlers),
                            lease, out)
        for e, rows in prepared:
            table = pa.Table.from_pylist([_arrow_row(r) for r in rows],
                                         schema=contract.arrow_schema())
            txns, users = source_transactions(table)
            failure = None
            for txn in txns:
                failed = applier.attempt(txn)
                if failed is None:
                    applier._done([txn])
                else:
                    failure = failed
            if users:
                before = out.errors
                applier.messages(users)
                failure = failure or (None if out.errors == before else errorq.FailedTxn(
                    e.txn_key, "message", _message(rt, spec.name, e.id)))
            if failure is None:
                if _exists(rt, e):
                    errorq.delete_entries(rt.store, spec.name, [e.id])
                result.applied.append(e.id)
            else:
                with rt.store.begin() as c:
                    errorq.note_failure(c, e, failure.error_kind, failure.error_message)
                result.failed[e.id] = failure.error_message


def _exists(rt: Any, e: errorq.ErrorEntry) -> bool:
    return bool(errorq.entries(rt.store, e.apply, ids=[e.id]))


def _message(rt: Any, apply: str, entry_id: int) -> str:
    found = errorq.entries(rt.store, apply, ids=[entry_id])
    return found[0].error_message if found else "(gone)"


def _maps(row: dict[str, Any], as_dict: bool) -> dict[str, Any]:
    out = {n: row.get(n) for n in contract.FIELD_NAMES}
    for m in ("old_values", "new_values", "payload"):
        v = out[m]
        if v is None:
            continue
        items = v.items() if isinstance(v, dict) else v
        out[m] = {k: dict(s) for k, s in items} if as_dict else [(k, dict(s)) for k, s in items]
    return out


def _spark_row(row: dict[str, Any]) -> tuple[Any, ...]:
    m = _maps(row, True)
    return tuple(m[n] for n in contract.FIELD_NAMES)


def _arrow_row(row: dict[str, Any]) -> dict[str, Any]:
    return _maps(row, False)
