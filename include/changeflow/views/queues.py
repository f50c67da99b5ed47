"""Queues, like ``DBA_QUEUES``/``V$BUFFERED_QUEUES`` and ``AQ$<queue table>``.

Depth per message state: *ready* (committed, some consumer has still to take it),
*processed* (every consumer took it, not purged yet), *quarantined* (set aside), and
the exception queue's *undeliverable* messages; the oldest message; the consumers
with their positions; and the exception queue's contents.
"""

from __future__ import annotations

import bisect
import itertools
from typing import Any

from sqlalchemy import case, func, select

from changeflow.config import PipelineConfig
from changeflow.state import schema
from changeflow.state.schema_schedules import undeliverable
from changeflow.views.common import aware, check_component

COLUMNS = (("queue", "text"), ("status", "state"), ("ready", "count"),
           ("processed", "count"), ("quarantined", "count"), ("undeliverable", "count"),
           ("bytes", "bytes"), ("oldest_message", "time", "oldest message"),
           ("consumers", "count"))
CONSUMER_COLUMNS = (("queue", "text"), ("consumer", "text"), ("kind", "text"),
                    ("position", "count"), ("pending_batches", "count", "pending batches"),
                    ("pending_messages", "count", "pending messages"),
                    ("updated_at", "time", "acknowledged"))
EXCEPTION_COLUMNS = (("queue", "text"), ("state", "state"), ("batch", "count"),
                     ("messages", "count"), ("reason", "text"), ("at", "time", "when"))


def _matches(q: Any, name: str | None) -> bool:
    return name is None or name.lower() in (q.name, f"{q.name}@{q.site}")


def queues(cfg: PipelineConfig, component: str | None = None) -> list[dict[str, Any]]:
    """Every queue with its depth per message state, oldest message and consumer count.

    Raises:
        UnknownComponentError: ``component`` is not a queue of the pipeline.
    """
    from changeflow.sites import site

    check_component(cfg, "queue", component)
    Q, B, C = schema.queues, schema.queue_batches, schema.queue_consumers
    out = []
    for q in cfg.queues:
        if not _matches(q, component):
            continue
        rt = site(cfg, q.site)
        with rt.store.read() as c:
            row = c.execute(select(Q.c.status, Q.c.queue_table).where(Q.c.name == q.name)) \
                .first()
            low = c.execute(select(func.min(C.c.position)).where(C.c.queue == q.name)).scalar()
            n_consumers = c.execute(select(func.count()).where(C.c.queue == q.name)).scalar()
            done = (B.c.seq <= (low if low is not None else -1))
            live = (B.c.queue == q.name) & (B.c.path != "")
            ready, processed, quarantined, nbytes, oldest = c.execute(select(
                func.coalesce(func.sum(case(((B.c.state == "ready") & ~done, B.c.n_messages),
                                            else_=0)), 0),
                func.coalesce(func.sum(case(((B.c.state == "ready") & done, B.c.n_messages),
                                            else_=0)), 0),
                func.coalesce(func.sum(case((B.c.state == "quarantined", B.c.n_messages),
                                            else_=0)), 0),
                func.coalesce(func.sum(B.c.n_bytes), 0),
                func.min(case(((B.c.state == "ready") & ~done, B.c.oldest_time))),
            ).where(live)).one()
            lost = c.execute(select(func.coalesce(func.sum(undeliverable.c.n_messages), 0))
                             .where(undeliverable.c.source_queue.in_(
                                 [q.name, f"{q.name}@{q.site}"]))).scalar()
        out.append({
            "queue": f"{q.name}@{q.site}", "site": q.site,
            "queue_table": row.queue_table if row else q.queue_table,
            "status": row.status if row else "not created", "ready": int(ready),
            "processed": int(processed), "quarantined": int(quarantined),
            "undeliverable": int(lost or 0), "bytes": int(nbytes),
            "oldest_message": aware(oldest), "consumers": int(n_consumers or 0),
        })
    return out


def consumers(cfg: PipelineConfig, component: str | None = None) -> list[dict[str, Any]]:
    """The consumers of every queue (or one) with their positions and backlogs.

    Raises:
        UnknownComponentError: ``component`` is not a queue of the pipeline.
    """
    from changeflow.sites import site

    check_component(cfg, "queue", component)
    B, C = schema.queue_batches, schema.queue_consumers
    out = []
    for q in cfg.queues:
        if not _matches(q, component):
            continue
        rt = site(cfg, q.site)
        with rt.store.read() as c:
            # one read of the live batches, then a binary search per consumer: the
            # backlog of 100 consumers over 10,000 batches costs one scan, not 100
            live = c.execute(select(B.c.seq, B.c.n_messages).where(
                B.c.queue == q.name, B.c.path != "", B.c.state == "ready")
                .order_by(B.c.seq)).all()
            rows = c.execute(select(C).where(C.c.queue == q.name).order_by(C.c.consumer)).all()
        seqs = [r.seq for r in live]
        after = list(itertools.accumulate((r.n_messages for r in reversed(live)), initial=0))
        for r in rows:
            first = bisect.bisect_right(seqs, r.position)
            nb = len(seqs) - first
            out.append({"queue": f"{q.name}@{q.site}", "consumer": r.consumer, "kind": r.kind,
                        "position": int(r.position), "pending_batches": nb,
                        "pending_messages": int(after[nb]), "updated_at": aware(r.updated_at)})
    return out


def exceptions(cfg: PipelineConfig, component: str | None = None) -> list[dict[str, Any]]:
    """The exception queue: UNDELIVERABLE messages and batches set aside (quarantined).

    Raises:
        UnknownComponentError: ``component`` is not a queue of the pipeline.
    """
    from changeflow.sites import site

    check_component(cfg, "queue", component)
    QT = schema.quarantine
    out = []
    for q in cfg.queues:
        if not _matches(q, component):
            continue
        rt = site(cfg, q.site)
        with rt.store.read() as c:
            for r in c.execute(select(undeliverable).where(undeliverable.c.source_queue.in_(
                    [q.name, f"{q.name}@{q.site}"])).order_by(undeliverable.c.id)):
                out.append({"queue": f"{q.name}@{q.site}", "state": r.state,
                            "batch": r.source_seq, "messages": r.n_messages,
                            "reason": r.error_message, "at": aware(r.created_at),
                            "exception_queue": r.exception_queue})
            for r in c.execute(select(QT).where(QT.c.queue == q.name,
                                                QT.c.released_at.is_(None))
                               .order_by(QT.c.id)):
                out.append({"queue": f"{q.name}@{q.site}", "state": "QUARANTINED",
                            "batch": r.seq, "messages": r.n_messages, "reason": r.reason,
                            "at": aware(r.quarantined_at), "exception_queue": None})
    return out
