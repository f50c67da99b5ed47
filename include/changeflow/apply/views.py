"""Views of apply processes and their error queues (DBA_APPLY, DBA_APPLY_ERROR, ...).

Plain rows (dicts of JSON-ready values) for the CLI, the Airflow UI plugin and
scripts, plus the two actions on the error queue:

* :func:`list_errors`: the error queue (``DBA_APPLY_ERROR``);
* :func:`error_lcrs`: every LCR of one failed transaction (``PRINT_TRANSACTION``);
* :func:`apply_progress`: each apply's queue position, backlog, last run, error count
  and, per source database, what it has applied (``DBA_APPLY_PROGRESS``);
* :func:`conflict_handlers`, :func:`handlers`: what resolves conflicts and which
  handlers an apply calls (``DBA_APPLY_CONFLICT_COLUMNS``, ``DBA_APPLY_DML_HANDLERS``);
* :func:`execute_error`, :func:`delete_error`: re-execute or delete one entry or all.

>>> _value({"type": "INTEGER", "int": 4})
4
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from typing import TYPE_CHECKING, Any

from changeflow import lcr as contract
from changeflow.apply import errorq, positions
from changeflow.apply.conflicts import stored_handlers
from changeflow.apply.status import last_run
from changeflow.config import PipelineConfig
from changeflow.sites import consumer_name, open_pipeline, queue_site

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from changeflow.apply.reexec import Fix, ReexecResult


def _plain(v: Any) -> Any:
    if isinstance(v, dt.datetime | dt.date):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, bytes | bytearray):
        return base64.b64encode(bytes(v)).decode()
    return v


def _value(struct: Any) -> Any:
    return _plain(contract.decode_value(struct)) if struct is not None else None


def _applies(cfg: PipelineConfig, apply: str | None) -> list[Any]:
    return list(cfg.applies) if apply is None else [cfg.component("apply", apply)]


def list_errors(cfg: PipelineConfig, apply: str | None = None) -> list[dict[str, Any]]:
    """The error queue of one apply (or of every apply), oldest source commit first."""
    out = []
    for spec in _applies(cfg, apply):
        rt, _ = queue_site(cfg, spec.queue)
        for e in errorq.entries(rt.store, spec.name):
            row = {k: _plain(v) for k, v in e.to_dict().items() if k != "txn_key"}
            out.append({"site": rt.name, **row})
    return out


def error_lcrs(cfg: PipelineConfig, apply: str, entry_id: int) -> dict[str, Any]:
    """One failed transaction: its entry and every LCR, values decoded.

    Raises:
        ErrorNotFoundError: no such entry.
    """
    spec = cfg.component("apply", apply)
    rt, _ = queue_site(cfg, spec.queue)
    entry = errorq.get(rt.store, apply, entry_id)
    lcrs = []
    for r in errorq.read_lcrs(entry).to_pylist():
        lcrs.append({
            "position": r["position"], "msg_id": r["msg_id"], "kind": r["kind"],
            "command_type": r["command_type"],
            "object": f"{r['object_owner']}.{r['object_name']}" if r["object_owner"] else None,
            "failing": r["msg_id"] == entry.failing_msg_id,
            "old_values": {k: _value(v) for k, v in (r["old_values"] or [])} or None,
            "new_values": {k: _value(v) for k, v in (r["new_values"] or [])} or None,
            "ddl_text": r["ddl_text"], "tag": r["tag"].hex() if r["tag"] else None,
            "payload": {k: _value(v) for k, v in (r["payload"] or [])} or None,
        })
    return {"entry": {k: _plain(v) for k, v in entry.to_dict().items() if k != "txn_key"},
            "lcrs": lcrs}


def apply_progress(cfg: PipelineConfig, apply: str | None = None) -> list[dict[str, Any]]:
    """Per apply: target kind, queue position and backlog, last run, errors, sources."""
    open_pipeline(cfg)
    out = []
    for spec in _applies(cfg, apply):
        rt, queue = queue_site(cfg, spec.queue)
        consumer = consumer_name("apply", spec.name)
        try:
            pending = rt.catalog.pending(queue, consumer)
            position = rt.catalog.position(queue, consumer)
        except Exception:  # noqa: BLE001  (a dropped queue still shows the apply)
            pending, position = [], None
        run = last_run(rt.store, spec.name) or {}
        out.append({
            "apply": spec.name, "site": rt.name, "queue": f"{queue}@{rt.name}",
            "target": "postgres" if spec.target is not None else "parquet",
            "apply_tag": spec.apply_tag, "position": position,
            "pending_batches": len(pending),
            "pending_messages": sum(b.n_messages for b in pending),
            "last_run_at": _plain(run.get("last_run_at")),
            "last_run_seconds": run.get("seconds"),
            "last_run_transactions": run.get("transactions"),
            "last_run_errors": run.get("errors"),
            "total_transactions": run.get("total_transactions", 0),
            "errors_in_queue": len(errorq.entries(rt.store, spec.name)),
            "sources": [{k: _plain(v) for k, v in s.items()}
                        for s in positions.summary(rt.store, spec.name)],
        })
    return out


def conflict_handlers(cfg: PipelineConfig, apply: str) -> list[dict[str, Any]]:
    """The conflict handlers in force: from the configuration and set from the CLI."""
    spec = cfg.component("apply", apply)
    rt, _ = queue_site(cfg, spec.queue)
    stored = stored_handlers(rt.store, apply)
    keys = {(h.table, h.conflict, h.columns_key) for h in stored}
    rows = [(h, "configuration") for h in spec.conflicts.handlers
            if (h.table, h.conflict, h.columns_key) not in keys]
    rows += [(h, "set") for h in stored]
    return [{"table": h.table, "conflict": h.conflict, "columns": h.columns_key,
             "method": h.method, "resolution_column": h.resolution_column, "source": src}
            for h, src in sorted(rows, key=lambda x: (x[0].table, x[0].conflict))]


def handlers(cfg: PipelineConfig, apply: str) -> list[dict[str, Any]]:
    """An apply's handlers and whether each imports."""
    from changeflow.apply.handlers import load
    from changeflow.apply.records import HandlerError

    spec = cfg.component("apply", apply)
    rows = [("dml", h.table, h.operation, h.handler) for h in spec.handlers.dml]
    for kind in ("ddl", "message", "precommit"):
        path = getattr(spec.handlers, kind)
        if path:
            rows.append((kind, None, None, path))
    out = []
    for kind, table, op, path in rows:
        try:
            load(path, kind)
            status = "ok"
        except HandlerError as exc:
            status = str(exc)
        out.append({"kind": kind, "table": table, "operation": op, "handler": path,
                    "status": status})
    return out


def execute_error(cfg: PipelineConfig, apply: str, entry_id: int | None = None, *,
                  fix: Fix | str | None = None, spark: SparkSession | None = None
                  ) -> ReexecResult:
    """Re-execute one entry (``None``: all of them) of an apply's error queue."""
    from changeflow.apply.reexec import execute_errors

    return execute_errors(cfg, apply, None if entry_id is None else [entry_id], fix=fix,
                          spark=spark)


def delete_error(cfg: PipelineConfig, apply: str, entry_id: int | None = None) -> int:
    """Delete one entry (``None``: all of them) of an apply's error queue."""
    spec = cfg.component("apply", apply)
    rt, _ = queue_site(cfg, spec.queue)
    return errorq.delete_entries(rt.store, apply, None if entry_id is None else [entry_id])
