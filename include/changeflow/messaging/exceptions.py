"""The exception queue: what is in it, putting messages back, deleting them.

A message lands in its queue table's exception queue (``owner.aq$_<table>_e``, or
the ``exception_queue`` it was enqueued with) as EXPIRED when it expired or was
rolled back more than ``max_retries`` times, and as UNDELIVERABLE when a propagation
cannot deliver it (destination dropped, type mismatch). Its row keeps the original
queue, consumer and reason. An operator re-enqueues it (READY again in the original
queue, retry count 0, a fresh expiration window) or deletes it.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import and_, delete, select, update
from sqlalchemy.sql.elements import ColumnElement

from changeflow.errors import QueueDroppedError, QueueNotFoundError
from changeflow.messaging import dictionary as D
from changeflow.messaging.constants import EXCEPTION_STATES, State
from changeflow.messaging.errors import MessagingError
from changeflow.state import StateStore, utcnow
from changeflow.state import schema_messaging as S

M = S.messages


def _where(queue: str, msg_ids: list[str] | None) -> ColumnElement[bool]:
    where = and_(M.c.queue == queue, M.c.state.in_(EXCEPTION_STATES))
    if msg_ids is not None:
        where = and_(where, M.c.msg_id.in_(list(msg_ids)))
    return where


def requeue(store: StateStore, queue: str, msg_ids: list[str] | None = None) -> int:
    """Put exception-queue messages back into their original queue. Returns rows moved.

    Raises:
        MessagingError: a message id is not in the exception queue, or its original
            queue no longer exists (delete it instead).
    """
    with store.begin() as conn:
        D.queue(conn, queue)
        rows = conn.execute(select(M.c.id, M.c.msg_id, M.c.original_queue, M.c.expiration)
                            .where(_where(queue, msg_ids))).all()
        _check_found(queue, msg_ids, {r.msg_id for r in rows})
        now = utcnow()
        for r in rows:
            target = r.original_queue or queue
            try:
                D.queue(conn, target)
            except (QueueNotFoundError, QueueDroppedError) as exc:
                raise MessagingError(
                    f"message {r.msg_id} cannot go back to {target}: {exc}; delete it "
                    "instead") from None
            expire = now + dt.timedelta(seconds=r.expiration) if r.expiration is not None \
                else None
            conn.execute(update(M).where(M.c.id == r.id).values(
                queue=target, state=State.READY.value, retry_count=0, visible_at=now,
                expire_at=expire, original_queue=None, reason=None, state_time=now,
                lock_txn=None, lock_mode=None, lock_expires=None))
    return len(rows)


def delete_messages(store: StateStore, queue: str, msg_ids: list[str] | None = None) -> int:
    """Delete exception-queue messages (None: all). Returns rows deleted."""
    with store.begin() as conn:
        D.queue(conn, queue)
        if msg_ids is not None:
            found = {r[0] for r in conn.execute(select(M.c.msg_id).where(
                _where(queue, msg_ids)))}
            _check_found(queue, msg_ids, found)
        done = conn.execute(delete(M).where(_where(queue, msg_ids)))
    return int(done.rowcount or 0)


def _check_found(queue: str, wanted: list[str] | None, found: set[str]) -> None:
    if wanted is None:
        return
    missing = sorted(set(wanted) - found)
    if missing:
        raise MessagingError(
            f"no EXPIRED or UNDELIVERABLE message {', '.join(missing)} in queue {queue}")
