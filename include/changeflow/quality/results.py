"""Where validation results live: the ``cf_quality_results`` table of a site's state store.

Each validation of a batch or an apply target is one row, in the state store of the
site holding the queue or the target, so results sit beside the queue positions they
describe and work unchanged on SQLite or PostgreSQL. A row keeps the changeflow
summary (checks, counts, sample rows), GX's own validation results (what Data Docs
render) and, for LCR batches, the per-source commit-position watermark the next
batch of the same producer is checked against.

The table is declared in :mod:`changeflow.state.schema_quality` with the store's
other tables.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select

from changeflow.config import PipelineConfig
from changeflow.state import StateStore, schema, utcnow
from changeflow.state.schema_quality import results


@dataclass(frozen=True)
class StoredResult:
    """One persisted validation, as ``changeflow quality latest`` shows it."""

    id: int
    stage: str
    subject: str
    batch_id: str | None
    status: str
    n_rows: int | None
    checks: list[dict[str, Any]]
    quarantine_path: str | None
    created_at: Any

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {**self.__dict__, "created_at": str(self.created_at)}


def record(store: StateStore, **values: Any) -> int:
    """Persist one validation. Returns its id.

    Args:
        store: the state store of the site holding the queue or target.
        values: the columns of :data:`results`; ``checks``, ``gx`` and ``watermarks``
            are given as Python objects and stored as JSON.
    """
    gx = values.get("gx", [])
    for r in gx:  # let Data Docs name the stage and batch of each GX result
        r.setdefault("meta", {})["changeflow"] = {
            "stage": values["stage"], "subject": values["subject"],
            "batch_id": values.get("batch_id"),
        }
    row = {
        "stage": values["stage"],
        "subject": values["subject"],
        "producer": values.get("producer"),
        "batch_id": values.get("batch_id"),
        "status": values["status"],
        "n_rows": values.get("n_rows"),
        "seconds": f"{values.get('seconds', 0.0):.3f}",
        "checks_json": json.dumps(values["checks"], default=str),
        "gx_json": json.dumps(gx, default=str),
        "watermarks_json": json.dumps(values.get("watermarks") or {}),
        "quarantine_path": values.get("quarantine_path"),
        "created_at": utcnow(),
    }
    with store.begin() as conn:
        key: Any = conn.execute(results.insert().values(**row)).inserted_primary_key
        return int(key[0])


def prior_watermarks(store: StateStore, queue: str, producer: str) -> dict[str, int]:
    """Per source database, the highest commit position ``producer`` committed to ``queue``.

    Only batches that really were committed count (a validated batch whose commit was
    a dedup no-op, or that was quarantined, leaves no trace in the queue catalog).
    """
    B = schema.queue_batches
    stmt = (
        select(results.c.watermarks_json)
        .where(results.c.subject == queue, results.c.producer == producer,
               results.c.batch_id.in_(select(B.c.batch_id).where(B.c.queue == queue,
                                                                 B.c.state == "ready")))
        .order_by(results.c.id.desc())
        .limit(1)
    )
    with store.read() as c:
        text = c.execute(stmt).scalar_one_or_none()
    return {k: int(v) for k, v in json.loads(text).items()} if text else {}


def _stored(row: Any) -> StoredResult:
    m = row._mapping
    return StoredResult(
        id=int(m["id"]), stage=m["stage"], subject=m["subject"], batch_id=m["batch_id"],
        status=m["status"], n_rows=m["n_rows"], checks=json.loads(m["checks_json"]),
        quarantine_path=m["quarantine_path"], created_at=m["created_at"],
    )


def latest(store: StateStore) -> list[StoredResult]:
    """The latest result of every stage recorded in a store, by stage name."""
    last = select(func.max(results.c.id)).group_by(results.c.stage)
    with store.read() as c:
        rows = c.execute(
            select(results).where(results.c.id.in_(last)).order_by(results.c.stage)
        )
        return [_stored(r) for r in rows]


def gx_results(store: StateStore, *, limit: int = 200) -> list[dict[str, Any]]:
    """GX validation results of the most recent validations, newest first."""
    stmt = select(results.c.gx_json).order_by(results.c.id.desc()).limit(limit)
    with store.read() as c:
        return [r for (text,) in c.execute(stmt) for r in json.loads(text)]


def summary(cfg: PipelineConfig) -> list[str]:
    """One line per stage with its latest result, e.g. for the demo's output.

    A line reads ``quality propagation:dbs1_to_dbs2 @site2: passed (12 rows, 14 checks)``.
    """
    from changeflow.sites import site

    lines = []
    for name in sorted(cfg.sites):
        for r in latest(site(cfg, name).store):
            failed = [c["check"] for c in r.checks if not c["success"]]
            tail = f"; failed: {', '.join(failed)}" if failed else ""
            lines.append(f"quality {r.stage} @{name}: {r.status} ({r.n_rows} rows, "
                         f"{len(r.checks)} checks{tail})")
    return lines
