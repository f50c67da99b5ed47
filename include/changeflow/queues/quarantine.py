"""Setting bad batches aside, and putting them back once fixed.

A corrupt or schema-drifted batch fails every consumer that reads it, so nothing
behind it would ever flow again. :func:`quarantine` moves it out of the consumers'
way: its catalog row turns ``quarantined`` (consumers skip it, purge keeps its
files) and ``cf_quarantine`` records why, and which consumers had not read it yet.
:func:`release` puts it back at the tail of the queue, under a new sequence number,
for exactly those consumers (a consumer that had read it before it was set aside
does not get it twice).

The data-quality checks use the same mechanism: a batch that fails a blocking check
is committed ``quarantined`` (see :func:`changeflow.quality.check_batch`), so the
stage moves on and an operator releases it after fixing the data, or leaves it.

>>> from changeflow.state import StateStore
>>> from changeflow.queues.catalog import NewBatch, QueueCatalog
>>> cat = QueueCatalog(StateStore("sqlite://"), "/tmp/doctest-staging")
>>> _ = cat.create_queue("hr.q")
>>> cat.add_consumer("hr.q", "app")
>>> s1 = cat.commit_batch("hr.q", NewBatch("b1", "/x/b1", 3, 10, "test"))
>>> s2 = cat.commit_batch("hr.q", NewBatch("b2", "/x/b2", 4, 10, "test"))
>>> _ = quarantine(cat, "hr.q", s1, "corrupt footer")
>>> [b.batch_id for b in cat.pending("hr.q", "app")]
['b2']
>>> cat.ack("hr.q", "app", s2)
>>> new = release(cat, "hr.q", s1)
>>> [b.batch_id for b in cat.pending("hr.q", "app")]
['b1']
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Connection

from changeflow.errors import TerminalError
from changeflow.queues.catalog import QUARANTINED, READY, QueueCatalog
from changeflow.state import schema, utcnow

B = schema.queue_batches
C = schema.queue_consumers
R = schema.batch_recipients
QT = schema.quarantine


@dataclass(frozen=True)
class QuarantinedBatch:
    """A batch set aside, as ``changeflow queues quarantined`` lists it."""

    id: int
    queue: str
    seq: int
    batch_id: str
    path: str
    n_messages: int
    reason: str
    origin: str
    waiting_consumers: list[str]
    quarantined_at: Any
    released_at: Any
    released_seq: int | None


def _record(row: Any) -> QuarantinedBatch:
    m = dict(row._mapping)
    m["waiting_consumers"] = json.loads(m["waiting_consumers"])
    return QuarantinedBatch(**m)


def quarantine(catalog: QueueCatalog, queue: str, seq: int, reason: str, *,
               origin: str = "operator") -> QuarantinedBatch:
    """Set a committed batch aside so later batches flow. Returns the record.

    Raises:
        TerminalError: no such batch, or it is already set aside or purged.
    """
    queue = queue.lower()
    if not reason.strip():
        raise TerminalError("give a reason for setting the batch aside")
    with catalog.store.begin() as conn:
        catalog._queue_row(queue, conn, lock=True)
        row = conn.execute(select(B).where(B.c.queue == queue, B.c.seq == seq)).first()
        if row is None or not row.path:
            raise TerminalError(f"queue {queue!r} holds no batch {seq} (unknown or purged)")
        if row.state != READY:
            raise TerminalError(f"batch {seq} of queue {queue!r} is already {row.state}")
        addressed = [r.consumer for r in conn.execute(select(R.c.consumer).where(R.c.seq == seq))]
        waiting = [r.consumer for r in conn.execute(
            select(C.c.consumer).where(C.c.queue == queue, C.c.position < seq))
            if not addressed or r.consumer in addressed]
        conn.execute(update(B).where(B.c.seq == seq).values(state=QUARANTINED))
        key: Any = conn.execute(QT.insert().values(
            queue=queue, seq=seq, batch_id=row.batch_id, path=row.path,
            n_messages=row.n_messages, reason=reason[:4000], origin=origin,
            waiting_consumers=json.dumps(sorted(waiting)),
            quarantined_at=utcnow())).inserted_primary_key
        rec = conn.execute(select(QT).where(QT.c.id == key[0])).one()
    return _record(rec)


def record_committed(catalog: QueueCatalog, queue: str, seq: int, reason: str, *,
                     origin: str, conn: Connection | None = None) -> None:
    """Record a batch committed set aside (the quality checks do this, in their commit)."""
    if conn is None:
        with catalog.store.begin() as c:
            return record_committed(catalog, queue, seq, reason, origin=origin, conn=c)
    row = conn.execute(select(B).where(B.c.seq == seq)).one()
    waiting = [r.consumer for r in conn.execute(
        select(C.c.consumer).where(C.c.queue == queue.lower()))]
    conn.execute(QT.insert().values(
        queue=queue.lower(), seq=seq, batch_id=row.batch_id, path=row.path,
        n_messages=row.n_messages, reason=reason[:4000], origin=origin,
        waiting_consumers=json.dumps(sorted(waiting)), quarantined_at=utcnow()))
    return None


def release(catalog: QueueCatalog, queue: str, seq: int) -> int:
    """Put a quarantined batch back, at the tail, for the consumers that had not read it.

    Returns:
        Its new sequence number.

    Raises:
        TerminalError: the batch is not quarantined in this queue.
    """
    queue = queue.lower()
    with catalog.store.begin() as conn:
        catalog._queue_row(queue, conn, lock=True)
        rec = conn.execute(select(QT).where(QT.c.queue == queue, QT.c.seq == seq,
                                            QT.c.released_at.is_(None))).first()
        row = conn.execute(select(B).where(B.c.queue == queue, B.c.seq == seq)).first()
        if rec is None or row is None or row.state != QUARANTINED:
            raise TerminalError(f"batch {seq} of queue {queue!r} is not quarantined")
        values = {k: v for k, v in row._mapping.items() if k != "seq"}
        values.update(state=READY, created_at=utcnow())
        conn.execute(delete(B).where(B.c.seq == seq))
        inserted: Any = conn.execute(B.insert().values(**values)).inserted_primary_key
        new_seq = int(inserted[0])
        waiting = json.loads(rec.waiting_consumers)
        everyone = [r.consumer for r in conn.execute(
            select(C.c.consumer).where(C.c.queue == queue))]
        if sorted(waiting) != sorted(everyone):
            for consumer in waiting or ["(nobody)"]:
                conn.execute(R.insert().values(seq=new_seq, consumer=consumer))
        conn.execute(update(QT).where(QT.c.id == rec.id).values(
            released_at=utcnow(), released_seq=new_seq))
    return new_seq


def quarantined(catalog: QueueCatalog, queue: str | None = None, *,
                include_released: bool = False) -> list[QuarantinedBatch]:
    """Batches set aside (in one queue, or all), oldest first."""
    stmt = select(QT).order_by(QT.c.id)
    if queue is not None:
        stmt = stmt.where(QT.c.queue == queue.lower())
    if not include_released:
        stmt = stmt.where(QT.c.released_at.is_(None))
    with catalog.store.read() as conn:
        return [_record(r) for r in conn.execute(stmt)]
