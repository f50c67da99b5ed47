"""The last run of each apply (``cf_apply_status``), for the views and the CLI."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update

from changeflow.state import StateStore, utcnow
from changeflow.state.schema_apply import apply_status

S = apply_status


def record_run(store: StateStore, result: Any) -> None:
    """Record what a run did (an ApplyResult or PgApplyResult)."""
    values: dict[str, Any] = {
        "last_run_at": utcnow(), "batches": int(getattr(result, "batches", 0)),
        "messages": int(getattr(result, "messages", 0)),
        "transactions": int(getattr(result, "transactions", 0)),
        "changes": int(getattr(result, "changes", 0)),
        "errors": int(getattr(result, "errors", 0)),
        "skipped": int(getattr(result, "skipped", 0)),
        "enqueued": int(getattr(result, "enqueued", 0)),
        "seconds": float(getattr(result, "seconds", 0.0)),
    }
    with store.begin() as conn:
        row = conn.execute(select(S.c.total_transactions, S.c.total_errors).where(
            S.c.apply == result.apply)).first()
        if row is None:
            conn.execute(S.insert().values(apply=result.apply,
                                           total_transactions=values["transactions"],
                                           total_errors=values["errors"], **values))
        else:
            conn.execute(update(S).where(S.c.apply == result.apply).values(
                total_transactions=int(row[0]) + values["transactions"],
                total_errors=int(row[1]) + values["errors"], **values))


def last_run(store: StateStore, apply: str) -> dict[str, Any] | None:
    """The last recorded run of an apply, or None."""
    with store.read() as conn:
        row = conn.execute(select(S).where(S.c.apply == apply)).first()
    return dict(row._mapping) if row else None
