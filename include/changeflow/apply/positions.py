"""Which source transactions an apply has done: exactly, per transaction.

An apply skips a transaction only when *that* transaction was applied (or set aside
in its error queue) before. A batch that carries lower commit positions from a
source than ones already applied (a second path in a directed network, a backfill)
is applied, not dropped, as long as its transactions are new.

To stay small, the record has two parts per (apply, source database):

* the **exceptions set**: every done transaction ``(commit position, transaction id)``
  whose commit time is within ``history_days`` of the newest one done from that source;
* the **watermark**: older entries collapse into it (the highest commit position
  collapsed). A transaction at or below the watermark counts as done: a path may
  deliver a source's transactions at most ``history_days`` later than newer ones.

Looking up a batch's transactions is one range query per source (the batch's lowest
to highest commit position), so the cost follows the batch, not the history.

Parquet applies keep this in the site's state store (``cf_apply_txns``,
``cf_apply_watermarks``), committed with the target manifests; PostgreSQL applies keep
the same two tables in the target database (:mod:`changeflow.apply.pg_statements`),
committed with the changes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, case, delete, func, select, update
from sqlalchemy.engine import Connection

from changeflow.state import StateStore, utcnow
from changeflow.state.schema_apply import applied_txns, watermarks

A = applied_txns
W = watermarks


@dataclass(frozen=True, order=True)
class TxnId:
    """One source transaction: its source database, commit position and id."""

    source: str
    scn: int
    txn: str

    @property
    def key(self) -> str:
        """The error-queue key of the transaction.

        >>> TxnId("DBS1", 7, "tx").key
        'DBS1\\x1f7\\x1ftx'
        """
        return f"{self.source}\x1f{self.scn}\x1f{self.txn}"

    @staticmethod
    def from_key(key: str) -> TxnId:
        """The inverse of :attr:`key`.

        >>> TxnId.from_key(TxnId("DBS1", 7, "tx").key)
        TxnId(source='DBS1', scn=7, txn='tx')
        """
        source, scn, txn = key.split("\x1f", 2)
        return TxnId(source, int(scn), txn)


def done(conn: Connection, apply: str, txns: Iterable[TxnId]) -> set[TxnId]:
    """The transactions among ``txns`` the apply has done (applied or set aside)."""
    by_source: dict[str, list[TxnId]] = {}
    for t in txns:
        by_source.setdefault(t.source, []).append(t)
    out: set[TxnId] = set()
    for source, ts in by_source.items():
        mark = conn.execute(select(W.c.commit_scn).where(
            W.c.apply == apply, W.c.source_database == source)).scalar_one_or_none()
        if mark is not None:
            out.update(t for t in ts if t.scn <= mark)
        lo, hi = min(t.scn for t in ts), max(t.scn for t in ts)
        if mark is not None and hi <= mark:
            continue
        rows = conn.execute(select(A.c.commit_scn, A.c.transaction_id).where(
            A.c.apply == apply, A.c.source_database == source,
            A.c.commit_scn >= lo, A.c.commit_scn <= hi))
        seen = {(int(r[0]), r[1]) for r in rows}
        out.update(t for t in ts if (t.scn, t.txn) in seen)
    return out


def record(conn: Connection, apply: str, txns: Iterable[tuple[TxnId, dt.datetime | None]],
           outcome: str = "applied") -> int:
    """Record transactions as done (``applied`` or ``error``); an entry already there is
    updated to the new outcome. Returns how many were recorded."""
    rows: list[dict[str, Any]] = [{"apply": apply, "source_database": t.source, "commit_scn": t.scn,
             "transaction_id": t.txn, "commit_time": when, "outcome": outcome,
             "recorded_at": utcnow()} for t, when in txns]
    if not rows:
        return 0
    known = done_exact(conn, apply, [TxnId(r["source_database"], r["commit_scn"],
                                           r["transaction_id"]) for r in rows])
    fresh = [r for r in rows if TxnId(r["source_database"], r["commit_scn"],
                                      r["transaction_id"]) not in known]
    if fresh:
        conn.execute(A.insert(), fresh)
    for t in known:
        conn.execute(update(A).where(
            A.c.apply == apply, A.c.source_database == t.source, A.c.commit_scn == t.scn,
            A.c.transaction_id == t.txn).values(outcome=outcome, recorded_at=utcnow()))
    return len(rows)


def done_exact(conn: Connection, apply: str, txns: list[TxnId]) -> set[TxnId]:
    """The transactions among ``txns`` with an entry of their own (not the watermark)."""
    out: set[TxnId] = set()
    by_source: dict[str, list[TxnId]] = {}
    for t in txns:
        by_source.setdefault(t.source, []).append(t)
    for source, ts in by_source.items():
        rows = conn.execute(select(A.c.commit_scn, A.c.transaction_id).where(
            A.c.apply == apply, A.c.source_database == source,
            A.c.commit_scn >= min(t.scn for t in ts), A.c.commit_scn <= max(t.scn for t in ts)))
        seen = {(int(r[0]), r[1]) for r in rows}
        out.update(t for t in ts if (t.scn, t.txn) in seen)
    return out


def note_last(conn: Connection, apply: str,
              txns: list[tuple[TxnId, dt.datetime | None]]) -> None:
    """Keep ``cf_apply_progress`` (the newest commit applied per source) for the views.

    It is informational only: which transactions are done is decided by the exact
    record above, never by this mark.
    """
    from changeflow.state import schema

    P = schema.apply_progress
    newest: dict[str, tuple[int, dt.datetime | None]] = {}
    for t, when in txns:
        if t.source not in newest or t.scn > newest[t.source][0]:
            newest[t.source] = (t.scn, when)
    for source, (scn, when) in newest.items():
        key = (P.c.apply == apply) & (P.c.source_database == source)
        current = conn.execute(select(P.c.commit_scn).where(key)).scalar_one_or_none()
        vals = {"commit_scn": scn, "commit_time": when, "updated_at": utcnow()}
        if current is None:
            conn.execute(P.insert().values(apply=apply, source_database=source, **vals))
        elif scn > current:
            conn.execute(update(P).where(key).values(**vals))


def forget(conn: Connection, apply: str, txn: TxnId) -> None:
    """Remove a transaction's entry (a deleted error that should apply when it comes again)."""
    conn.execute(delete(A).where(A.c.apply == apply, A.c.source_database == txn.source,
                                 A.c.commit_scn == txn.scn, A.c.transaction_id == txn.txn))


def prune(conn: Connection, apply: str, history_days: float) -> int:
    """Collapse entries older than the history window into the watermarks.

    Returns how many entries were collapsed.
    """
    collapsed = 0
    sources = [r[0] for r in conn.execute(
        select(A.c.source_database).where(A.c.apply == apply).distinct())]
    for source in sources:
        mine = and_(A.c.apply == apply, A.c.source_database == source)
        newest = conn.execute(select(func.max(A.c.commit_time)).where(mine)).scalar()
        if newest is None:
            continue
        if newest.tzinfo is None:
            newest = newest.replace(tzinfo=dt.UTC)
        cutoff = newest - dt.timedelta(days=history_days)
        old = mine & (A.c.commit_time < cutoff)
        top = conn.execute(select(func.max(A.c.commit_scn), func.max(A.c.commit_time),
                                  func.count()).where(old)).one()
        if not top[2]:
            continue
        _raise_mark(conn, apply, source, int(top[0]), top[1])
        collapsed += conn.execute(delete(A).where(old)).rowcount or 0
    return collapsed


def _raise_mark(conn: Connection, apply: str, source: str, scn: int,
                when: dt.datetime | None) -> None:
    key = (W.c.apply == apply) & (W.c.source_database == source)
    current = conn.execute(select(W.c.commit_scn).where(key)).scalar_one_or_none()
    if current is None:
        conn.execute(W.insert().values(apply=apply, source_database=source, commit_scn=scn,
                                       commit_time=when, updated_at=utcnow()))
    elif scn > current:
        conn.execute(update(W).where(key).values(commit_scn=scn, commit_time=when,
                                                 updated_at=utcnow()))


def summary(store: StateStore, apply: str) -> list[dict]:  # type: ignore[type-arg]
    """Per source database: the watermark, the newest transaction done and how many are
    remembered exactly (for the views)."""
    with store.read() as conn:
        marks = {r[0]: (r[1], r[2]) for r in conn.execute(
            select(W.c.source_database, W.c.commit_scn, W.c.commit_time).where(
                W.c.apply == apply))}
        rows = conn.execute(select(
            A.c.source_database, func.max(A.c.commit_scn), func.max(A.c.commit_time),
            func.count(), func.sum(case((A.c.outcome == "error", 1), else_=0)),
        ).where(A.c.apply == apply).group_by(A.c.source_database)).all()
    out: dict[str, dict] = {}  # type: ignore[type-arg]
    for source, (scn, when) in marks.items():
        out[source] = {"source_database": source, "watermark": scn, "last_commit_scn": scn,
                       "last_commit_time": when, "remembered": 0, "errors": 0}
    for source, scn, when, n, errors in rows:
        entry = out.setdefault(source, {"source_database": source, "watermark": None,
                                        "last_commit_scn": None, "last_commit_time": None,
                                        "remembered": 0, "errors": 0})
        if entry["last_commit_scn"] is None or scn > entry["last_commit_scn"]:
            entry["last_commit_scn"], entry["last_commit_time"] = scn, when
        entry["remembered"], entry["errors"] = int(n), int(errors or 0)
    return sorted(out.values(), key=lambda e: e["source_database"])
