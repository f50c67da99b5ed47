"""The queue catalog: queues, committed batches and consumer positions in the state store.

A queue's messages live in Parquet *batches* under the staging root. A batch becomes
visible only when its row is committed here, so an enqueue is atomic: a writer killed
midway leaves an unreferenced directory that no reader ever sees (and that
:meth:`QueueCatalog.orphans` lists for clean-up).

Consumers hold a *position*: the sequence number of the last batch they have
acknowledged. A batch is purged only when every consumer's position has passed it.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from changeflow.errors import (
    ConfigError,
    QueueDroppedError,
    QueueNotFoundError,
    RangeConflictError,
    TerminalError,
)
from changeflow.fs import join
from changeflow.queues.model import (  # re-exported: the catalog's records
    QUARANTINED,
    QUEUE_PROPERTIES,
    READY,
    Batch,
    ConsumerInfo,
    NewBatch,
    QueueInfo,
    batch_from_row,
)
from changeflow.state import StateStore, schema, utcnow

__all__ = ["QUARANTINED", "QUEUE_PROPERTIES", "READY", "Batch", "ConsumerInfo", "NewBatch",
           "QueueCatalog", "QueueInfo", "batch_from_row"]

Q = schema.queues
B = schema.queue_batches
C = schema.queue_consumers
R = schema.batch_recipients

def _holders() -> list[tuple[Any, dict[str, Any]]]:
    """Other tables holding a queue's messages (user messages): ``info['queue_messages']``."""
    return [(t, t.info["queue_messages"]) for t in schema.metadata.tables.values()
            if "queue_messages" in t.info]


def _held_elsewhere(conn: Connection, queue: str) -> int:
    """Messages of a queue waiting in other tables, in the states they declare as live."""
    total = 0
    for t, spec in _holders():
        where = t.c[spec["column"]] == queue
        if spec.get("state_column"):
            where = where & t.c[spec["state_column"]].in_(spec["live_states"])
        total += int(conn.execute(select(func.count()).select_from(t).where(where)).scalar()
                     or 0)
    return total


def _discard_elsewhere(conn: Connection, queue: str) -> None:
    for t, spec in _holders():
        conn.execute(delete(t).where(t.c[spec["column"]] == queue))


_batch = batch_from_row  # the name other modules import


class QueueCatalog:
    """The queues of one site.

    Args:
        store: the site's state store.
        staging_root: where the site's queue batches are written (path or URI).
    """

    def __init__(self, store: StateStore, staging_root: str):
        self.store = store
        self.staging_root = staging_root

    # -- queues ------------------------------------------------------------------
    def create_queue(
        self,
        name: str,
        *,
        queue_table: str | None = None,
        sort_order: str = "commit_time",
        multiple_consumers: bool = True,
        recreate_dropped: bool = False,
        **properties: Any,
    ) -> bool:
        """Create a queue if it does not exist (idempotent). Returns whether it created one.

        A queue that was dropped stays dropped unless ``recreate_dropped`` is given:
        opening a pipeline never re-creates a queue behind an operator's back.

        Args:
            properties: further :data:`QUEUE_PROPERTIES` (``max_retries``, ``secure``, ...).
        """
        if unknown := set(properties) - set(QUEUE_PROPERTIES):
            raise ConfigError(f"unknown queue properties {sorted(unknown)} for queue {name!r}")
        name = name.lower()
        owner, qname = name.split(".", 1)
        values = {"queue_table": queue_table or f"{name}_table", "sort_order": sort_order,
                  "multiple_consumers": multiple_consumers, **properties}
        with self.store.read() as conn:  # the common case, without the write lock
            found = conn.execute(select(Q.c.status).where(Q.c.name == name)).first()
            if found is not None and (found.status != "dropped" or not recreate_dropped):
                return False
        with self.store.begin() as conn:
            row = conn.execute(select(Q.c.status).where(Q.c.name == name)).first()
            if row is not None:
                if row.status != "dropped" or not recreate_dropped:
                    return False
                conn.execute(update(Q).where(Q.c.name == name).values(
                    status="active", dropped_at=None, created_at=utcnow(), **values))
                return True
            conn.execute(
                Q.insert().values(
                    name=name,
                    storage_path=join(self.staging_root, owner, qname),
                    created_at=utcnow(),
                    status="active",
                    **values,
                )
            )
        return True

    def alter_queue(self, name: str, **properties: Any) -> None:
        """Change queue properties (``ALTER_QUEUE``)."""
        if unknown := set(properties) - set(QUEUE_PROPERTIES):
            raise ConfigError(f"unknown queue properties {sorted(unknown)} for queue {name!r}")
        with self.store.begin() as conn:
            self._queue_row(name, conn, lock=True)
            if properties:
                conn.execute(update(Q).where(Q.c.name == name.lower()).values(**properties))

    def drop_queue(self, name: str, *, force: bool = False) -> list[Batch]:
        """Drop a queue (``DROP_QUEUE``). Returns its batches, whose files the caller deletes.

        The queue's row stays, marked dropped, so nothing re-creates it unasked and a
        propagation into it fails with :class:`QueueDroppedError` (terminal).

        Raises:
            TerminalError: the queue still holds messages and ``force`` was not given.
        """
        name = name.lower()
        with self.store.begin() as conn:
            self._queue_row(name, conn, lock=True)
            held = [_batch(r) for r in conn.execute(
                select(B).where(B.c.queue == name, B.c.path != "").order_by(B.c.seq))]
            n = sum(b.n_messages for b in held)
            others = _held_elsewhere(conn, name)
            if (n or others) and not force:
                where = f"{len(held)} batches" + (f" and {others} user messages" if others
                                                  else "")
                raise TerminalError(
                    f"queue {name!r} still holds {n + others} messages in {where}; "
                    f"drop it with force to discard them")
            _discard_elsewhere(conn, name)
            conn.execute(delete(R).where(R.c.seq.in_(
                select(B.c.seq).where(B.c.queue == name).scalar_subquery())))
            conn.execute(delete(B).where(B.c.queue == name))
            conn.execute(delete(C).where(C.c.queue == name))
            conn.execute(update(Q).where(Q.c.name == name).values(status="dropped",
                                                                   dropped_at=utcnow()))
        return held

    def queue_path(self, name: str) -> str:
        """The directory holding a queue's batches."""
        row = self._queue_row(name)
        return str(row._mapping["storage_path"])

    def _queue_row(self, name: str, conn: Connection | None = None, *,
                   lock: bool = False, allow_dropped: bool = False) -> Any:
        """The queue's row. ``lock`` takes its row lock (PostgreSQL) until commit."""
        stmt = select(Q).where(Q.c.name == name.lower())
        if lock:
            stmt = stmt.with_for_update()
        if conn is not None:
            row = conn.execute(stmt).first()
        else:
            with self.store.read() as c:
                row = c.execute(stmt).first()
        if row is None:
            raise QueueNotFoundError(
                f"queue {name!r} does not exist in state store {self.store.safe_url!r}"
            )
        if row._mapping["status"] == "dropped" and not allow_dropped:
            raise QueueDroppedError(
                f"queue {name!r} was dropped at {row._mapping['dropped_at']} "
                f"(state store {self.store.safe_url!r}); it is not re-created automatically"
            )
        return row

    def relocate(self, name: str) -> str:
        """Point a queue at its place under this catalog's staging root (after a move).

        Batch paths under the old location are rewritten too. Returns the new path.
        """
        name = name.lower()
        new = join(self.staging_root, *name.split(".", 1))
        with self.store.begin() as conn:
            old = str(self._queue_row(name, conn, lock=True)._mapping["storage_path"])
            conn.execute(update(Q).where(Q.c.name == name).values(storage_path=new))
            for r in conn.execute(select(B.c.seq, B.c.path).where(
                    B.c.queue == name, B.c.path.startswith(old))).all():
                conn.execute(update(B).where(B.c.seq == r.seq).values(
                    path=new + r.path[len(old):]))
        return new

    def properties(self, name: str) -> dict[str, Any]:
        """A queue's row: its queue-table and AQ properties, status and storage path."""
        return dict(self._queue_row(name, allow_dropped=True)._mapping)

    def exists(self, name: str) -> bool:
        """Whether a queue is defined (and not dropped)."""
        with self.store.read() as c:
            return c.execute(select(Q.c.name).where(
                Q.c.name == name.lower(), Q.c.status != "dropped")).first() is not None

    def new_batch_path(self, queue: str) -> tuple[str, str]:
        """A fresh batch id and the directory an enqueue should write it to."""
        batch_id = uuid.uuid4().hex
        return batch_id, join(self.queue_path(queue), f"batch-{batch_id}")

    # -- consumers ---------------------------------------------------------------
    def add_consumer(self, queue: str, consumer: str, kind: str = "user") -> None:
        """Register a consumer (idempotent); it starts before the oldest retained batch."""
        queue = queue.lower()
        with self.store.read() as conn:
            if conn.execute(select(C.c.consumer).where(
                    C.c.queue == queue, C.c.consumer == consumer)).first():
                return
        with self.store.begin() as conn:
            self._queue_row(queue, conn)
            found = conn.execute(
                select(C.c.consumer).where(C.c.queue == queue, C.c.consumer == consumer)
            ).first()
            if found:
                return
            floor = conn.execute(
                select(func.min(B.c.seq)).where(B.c.queue == queue, B.c.path != "",
                                                B.c.state == READY)
            ).scalar_one_or_none()
            conn.execute(
                C.insert().values(
                    queue=queue,
                    consumer=consumer,
                    kind=kind,
                    position=(floor - 1) if floor else 0,
                    updated_at=utcnow(),
                )
            )

    def position(self, queue: str, consumer: str, conn: Connection | None = None) -> int:
        """A consumer's position (last acknowledged batch sequence number)."""
        stmt = select(C.c.position).where(C.c.queue == queue.lower(), C.c.consumer == consumer)
        if conn is None:
            with self.store.read() as c:
                value = c.execute(stmt).scalar_one_or_none()
        else:
            value = conn.execute(stmt).scalar_one_or_none()
        if value is None:
            raise TerminalError(f"{consumer!r} is not a consumer of queue {queue!r}")
        return int(value)

    def pending(self, queue: str, consumer: str, *, max_batches: int | None = None,
                max_messages: int | None = None, max_bytes: int | None = None) -> list[Batch]:
        """Committed batches the consumer has not acknowledged yet, oldest first.

        Quarantined batches are skipped, and so are batches addressed to other
        consumers only. The bounds cap one pass's work (a backlog drains in steps);
        the first batch is always returned, however big.
        """
        queue = queue.lower()
        with self.store.read() as c:
            self._queue_row(queue, c)
            pos = self.position(queue, consumer, c)
            addressed = select(R.c.seq).where(R.c.seq == B.c.seq)
            mine = select(R.c.seq).where(R.c.seq == B.c.seq, R.c.consumer == consumer)
            stmt = (
                select(B)
                .where(B.c.queue == queue, B.c.seq > pos, B.c.path != "", B.c.state == READY,
                       ~addressed.exists() | mine.exists())
                .order_by(B.c.seq)
            )
            if max_batches:
                stmt = stmt.limit(max_batches)
            out: list[Batch] = []
            n = nbytes = 0
            for r in c.execute(stmt):
                b = _batch(r)
                if out and ((max_messages and n + b.n_messages > max_messages)
                            or (max_bytes and nbytes + b.n_bytes > max_bytes)):
                    break
                out.append(b)
                n += b.n_messages
                nbytes += b.n_bytes
        return out

    def ack(self, queue: str, consumer: str, seq: int, conn: Connection | None = None) -> None:
        """Acknowledge every batch up to ``seq``; positions never move backwards."""
        if conn is None:
            with self.store.begin() as c:
                return self.ack(queue, consumer, seq, c)
        current = self.position(queue, consumer, conn)
        if seq > current:
            conn.execute(
                update(C)
                .where(C.c.queue == queue.lower(), C.c.consumer == consumer)
                .values(position=seq, updated_at=utcnow())
            )
        return None

    # -- batches -----------------------------------------------------------------
    def commit_batch(
        self, queue: str, batch: NewBatch, conn: Connection | None = None, *,
        state: str = READY, guard: Any = None,
    ) -> int | None:
        """Make a written batch visible. Returns its sequence number.

        Commits of one queue are serialised on the queue's row lock, and the sequence
        number is taken under that lock: a batch that becomes visible later always has
        a higher number, so a consumer can never pass a batch that is still committing.

        When ``batch.dedup_key`` was committed before, or ``batch`` carries a source
        range (``source_first_seq``..``source_last_seq``) its producer has committed
        already, nothing changes and ``None`` is returned: this is what makes re-running
        a capture or a propagation harmless.

        Args:
            state: ``ready``, or ``quarantined`` to commit it set aside.
            guard: called with the connection before the insert (e.g. a lease check).

        Raises:
            RangeConflictError: another run committed a range overlapping this one's
                without covering it (transient: re-read the source and retry).
        """
        if conn is None:
            try:
                with self.store.begin() as c:
                    return self.commit_batch(queue, batch, c, state=state, guard=guard)
            except IntegrityError:
                return None
        self._queue_row(queue, conn, lock=True)
        if guard is not None:
            guard(conn)
        if batch.dedup_key and self.find_dedup(queue, batch.dedup_key, conn) is not None:
            return None
        if batch.source_first_seq is not None and batch.source_last_seq is not None:
            done = conn.execute(select(func.max(B.c.source_last_seq)).where(
                B.c.queue == queue.lower(), B.c.producer == batch.producer)).scalar()
            if done is not None and done >= batch.source_last_seq:
                return None
            if done is not None and done >= batch.source_first_seq:
                raise RangeConflictError(
                    f"queue {queue}: {batch.producer} already committed source batches up to "
                    f"{done}, inside this run's range {batch.source_first_seq}.."
                    f"{batch.source_last_seq}; nothing committed, the next pass re-reads")
        result = conn.execute(
            B.insert().values(
                queue=queue.lower(),
                batch_id=batch.batch_id,
                path=batch.path,
                n_messages=batch.n_messages,
                n_bytes=batch.n_bytes,
                min_commit_scn=batch.min_commit_scn,
                max_commit_scn=batch.max_commit_scn,
                oldest_time=batch.oldest_time,
                producer=batch.producer,
                dedup_key=batch.dedup_key,
                source_first_seq=batch.source_first_seq,
                source_last_seq=batch.source_last_seq,
                state=state,
                created_at=utcnow(),
            )
        )
        key = result.inserted_primary_key
        assert key is not None
        return int(key[0])

    def find_dedup(self, queue: str, dedup_key: str, conn: Connection | None = None) -> int | None:
        """The sequence number of the batch committed under a dedup key, if any."""
        stmt = select(B.c.seq).where(B.c.queue == queue.lower(), B.c.dedup_key == dedup_key)
        if conn is None:
            with self.store.read() as c:
                return c.execute(stmt).scalar_one_or_none()
        return conn.execute(stmt).scalar_one_or_none()

    def last_from_producer(self, queue: str, producer: str) -> int | None:
        """The highest source sequence a producer (a propagation) has committed here."""
        stmt = select(func.max(B.c.source_last_seq)).where(
            B.c.queue == queue.lower(), B.c.producer == producer
        )
        with self.store.read() as c:
            value = c.execute(stmt).scalar_one_or_none()
        return int(value) if value is not None else None

    def purgeable(self, queue: str) -> list[Batch]:
        """Batches every consumer has acknowledged: safe to delete.

        A queue's ``retention_time`` (seconds, AQ's ``RETENTION_TIME``) keeps acknowledged
        batches until they are that old, so they can still be re-read (a rewound
        consumer, an audit).
        """
        queue = queue.lower()
        with self.store.read() as c:
            low = c.execute(select(func.min(C.c.position)).where(C.c.queue == queue)).scalar()
            if low is None:
                return []
            keep = c.execute(select(Q.c.retention_time).where(Q.c.name == queue)).scalar()
            stmt = select(B).where(B.c.queue == queue, B.c.seq <= low, B.c.path != "",
                                   B.c.state == READY)
            if keep:
                stmt = stmt.where(B.c.created_at <= utcnow() - dt.timedelta(seconds=keep))
            return [_batch(r) for r in c.execute(stmt.order_by(B.c.seq))]

    def forget(self, batches: list[Batch]) -> None:
        """Remove purged batches from the catalog (after their files are deleted).

        A batch's dedup key is kept as a tombstone row with no messages, so a
        late replay of the same work is still recognised.
        """
        with self.store.begin() as conn:
            for b in batches:
                if b.dedup_key:
                    conn.execute(
                        update(B).where(B.c.seq == b.seq).values(n_messages=0, n_bytes=0, path="")
                    )
                else:
                    conn.execute(delete(B).where(B.c.seq == b.seq))
                conn.execute(delete(R).where(R.c.seq == b.seq))

    # -- views -------------------------------------------------------------------
    def queue_names(self) -> list[str]:
        """All queues of this site."""
        with self.store.read() as c:
            return [r[0] for r in c.execute(select(Q.c.name).order_by(Q.c.name))]

    def info(self, name: str) -> QueueInfo:
        """Depth, oldest message and consumers of a queue."""
        row = self._queue_row(name)._mapping  # type: ignore[attr-defined]
        name = name.lower()
        live = (B.c.queue == name) & (B.c.path != "") & (B.c.state == READY)
        with self.store.read() as c:
            depth, nb, nbytes, oldest = c.execute(
                select(
                    func.coalesce(func.sum(B.c.n_messages), 0),
                    func.count(),
                    func.coalesce(func.sum(B.c.n_bytes), 0),
                    func.min(B.c.oldest_time),
                ).where(live)
            ).one()
            consumers = []
            for cr in c.execute(select(C).where(C.c.queue == name).order_by(C.c.consumer)):
                m = cr._mapping
                pb, pm = c.execute(
                    select(func.count(), func.coalesce(func.sum(B.c.n_messages), 0)).where(
                        live, B.c.seq > m["position"]
                    )
                ).one()
                consumers.append(
                    ConsumerInfo(name, m["consumer"], m["kind"], m["position"], pb, int(pm))
                )
        return QueueInfo(
            name=name,
            queue_table=row["queue_table"],
            sort_order=row["sort_order"],
            depth=int(depth),
            batches=int(nb),
            bytes=int(nbytes),
            oldest_time=oldest,
            consumers=consumers,
        )
