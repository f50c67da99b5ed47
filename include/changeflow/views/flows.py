"""Propagations with their schedules (``DBA_PROPAGATION`` + ``USER_QUEUE_SCHEDULES``) and
apply processes (``DBA_APPLY``, ``DBA_APPLY_ERROR``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from changeflow.config import PipelineConfig
from changeflow.sites import consumer_name, queue_site
from changeflow.state import schema, schema_obs
from changeflow.views.common import aware, check_component, last_runs, state_of

PROPAGATION_COLUMNS = (
    ("propagation", "text"), ("source_queue", "text", "source"),
    ("destination_queue", "text", "destination"), ("schedule", "text"),
    ("schedule_state", "state", "schedule state"), ("pending_messages", "count", "pending"),
    ("total_number", "count", "propagated"), ("total_bytes", "bytes", "bytes"),
    ("failures", "count"), ("last_run", "time", "last run"), ("next_run", "time", "next run"),
    ("state", "state"))
APPLY_COLUMNS = (
    ("apply", "text"), ("queue", "text"), ("target", "text"), ("position", "count"),
    ("pending_messages", "count", "pending"),
    ("last_applied_commit_time", "time", "last applied commit"),
    ("transactions_applied", "count", "transactions"), ("errors_pending", "count", "errors"),
    ("state", "state"))
ERROR_COLUMNS = (
    ("apply", "text"), ("source_database", "text", "source"), ("transaction_id", "text",
                                                              "transaction"),
    ("commit_scn", "count", "commit position"), ("failing_msg_id", "text", "message"),
    ("error_message", "text", "error"), ("created_at", "time", "when"))


def _pending(rt: Any, queue: str, consumer: str) -> tuple[int | None, int, int]:
    """A consumer's position and what it has not acknowledged (batches, messages)."""
    B, C = schema.queue_batches, schema.queue_consumers
    with rt.store.read() as c:
        pos = c.execute(select(C.c.position).where(C.c.queue == queue,
                                                   C.c.consumer == consumer)).scalar()
        if pos is None:
            return None, 0, 0
        nb, nm = c.execute(select(func.count(), func.coalesce(func.sum(B.c.n_messages), 0))
                           .where(B.c.queue == queue, B.c.seq > pos, B.c.path != "",
                                  B.c.state == "ready")).one()
    return int(pos), int(nb), int(nm)


def propagations(cfg: PipelineConfig, component: str | None = None) -> list[dict[str, Any]]:
    """Propagations, each with its schedule, statistics and backlog.

    Raises:
        UnknownComponentError: ``component`` is not a propagation of the pipeline.
    """
    from changeflow.schedules.store import ScheduleStore
    from changeflow.views import schedules as ui

    check_component(cfg, "propagation", component)
    out = []
    for spec in cfg.propagations:
        if component is not None and spec.name != component:
            continue
        rt, queue = queue_site(cfg, spec.source_queue)
        row = ScheduleStore(rt.store).get(spec.name)
        sched = row.as_dict() if row is not None else {}
        pos, nb, nm = _pending(rt, queue, consumer_name("propagation", spec.name))
        run = last_runs(rt, "propagation").get(spec.name)
        out.append({
            "propagation": spec.name, "source_queue": cfg.qualify(spec.source_queue),
            "destination_queue": cfg.qualify(spec.destination_queue),
            "positive_rule_set": spec.rule_sets.positive,
            "negative_rule_set": spec.rule_sets.negative,
            "schedule": sched.get("summary") or "(no schedule yet)",
            "schedule_state": ui.state_of(sched) if sched else "none",
            "source_position": pos, "pending_batches": nb, "pending_messages": nm,
            **{k: sched.get(k) for k in ("total_number", "total_bytes", "total_time",
                                         "avg_number", "avg_time", "max_number", "failures",
                                         "last_error_msg", "last_error_time", "last_run",
                                         "next_run", "disabled")},
            "last_run": sched.get("last_run") or (aware(run["started_at"]) if run else None),
            "state": state_of(run, "PROPAGATING"),
        })
    return out


def _error_queue() -> Any:
    """The apply area's error queue module, when this installation has it (issue 13)."""
    try:
        from changeflow.apply import errorq
    except ImportError:
        return None
    return errorq


def _error_rows(rt: Any, apply: str) -> list[dict[str, Any]]:
    """The apply's error-queue entries: from the apply error queue (``errorq``) when
    present, else from the original ``cf_apply_errors`` table."""
    errorq = _error_queue()
    if errorq is not None:
        return [e.to_dict() for e in errorq.entries(rt.store, apply)]
    E = schema.apply_errors
    with rt.store.read() as c:
        rows = c.execute(select(E).where(E.c.apply == apply).order_by(E.c.id)).all()
    return [dict(r._mapping) for r in rows]


def _errors(rt: Any, apply: str) -> int:
    return len(_error_rows(rt, apply))


def applies(cfg: PipelineConfig, component: str | None = None) -> list[dict[str, Any]]:
    """Apply processes: position, last applied commit, transactions, errors pending.

    Raises:
        UnknownComponentError: ``component`` is not an apply of the pipeline.
    """
    check_component(cfg, "apply", component)
    P, H = schema.apply_progress, schema_obs.lag_hist
    out = []
    for spec in cfg.applies:
        if component is not None and spec.name != component:
            continue
        rt, queue = queue_site(cfg, spec.queue)
        pos, nb, nm = _pending(rt, queue, consumer_name("apply", spec.name))
        with rt.store.read() as c:
            last = c.execute(select(func.max(P.c.commit_time)).where(P.c.apply == spec.name)) \
                .scalar()
            txns = c.execute(select(func.coalesce(func.sum(H.c.n), 0))
                             .where(H.c.apply == spec.name)).scalar()
        run = last_runs(rt, "apply").get(spec.name)
        if last is None:  # a target whose marks live elsewhere: the newest run that measured
            last = _last_commit(rt, spec.name)
        target = (f"postgres ({spec.target.url_env or spec.target.conn_id})"
                  if spec.target is not None else f"parquet {rt.spec.target_root}")
        out.append({
            "apply": spec.name, "queue": cfg.qualify(spec.queue), "target": target,
            "apply_tag": spec.apply_tag, "position": pos, "pending_batches": nb,
            "pending_messages": nm, "last_applied_commit_time": aware(last),
            "transactions_applied": int(txns or 0),
            "messages_applied": run["total_messages"] if run else 0,
            "errors_pending": _errors(rt, spec.name),
            "last_run": aware(run["started_at"]) if run else None,
            "last_error": run["error"] if run else None,
            "state": state_of(run, "APPLYING"),
        })
    return out


def _last_commit(rt: Any, apply: str) -> Any:
    import datetime as dt
    import json

    R = schema_obs.runs
    with rt.store.read() as c:
        texts = c.execute(select(R.c.progress).where(
            R.c.kind == "apply", R.c.name == apply, R.c.status == "succeeded",
            R.c.progress.like('%last_applied_commit_time%')).order_by(R.c.id.desc())
            .limit(1)).scalars().all()
    for text in texts:
        return dt.datetime.fromisoformat(json.loads(text)["last_applied_commit_time"])
    return None


def apply_errors(cfg: PipelineConfig, component: str | None = None) -> list[dict[str, Any]]:
    """The apply error queue (``DBA_APPLY_ERROR``): failed transactions, oldest first.

    Raises:
        UnknownComponentError: ``component`` is not an apply of the pipeline.
    """
    check_component(cfg, "apply", component)
    out = []
    for spec in cfg.applies:
        if component is not None and spec.name != component:
            continue
        rt, _ = queue_site(cfg, spec.queue)
        for m in _error_rows(rt, spec.name):
            m["created_at"] = aware(m["created_at"])
            out.append(m)
    return out
