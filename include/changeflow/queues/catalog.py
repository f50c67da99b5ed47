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
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from changeflow.errors import QueueNotFoundError, TerminalError
from changeflow.fs import join
from changeflow.state import StateStore, schema, utcnow

Q = schema.queues
B = schema.queue_batches
C = schema.queue_consumers


@dataclass(frozen=True)
class Batch:
    """One committed batch of a queue."""

    seq: int
    queue: str
    batch_id: str
    path: str
    n_messages: int
    n_bytes: int
    producer: str
    dedup_key: str | None
    source_last_seq: int | None
    min_commit_scn: int | None = None
    max_commit_scn: int | None = None


@dataclass(frozen=True)
class NewBatch:
    """What an enqueue hands to :meth:`QueueCatalog.commit_batch`."""

    batch_id: str
    path: str
    n_messages: int
    n_bytes: int
    producer: str
    dedup_key: str | None = None
    source_last_seq: int | None = None
    min_commit_scn: int | None = None
    max_commit_scn: int | None = None
    oldest_time: dt.datetime | None = None


@dataclass(frozen=True)
class ConsumerInfo:
    """A consumer of a queue and its position."""

    queue: str
    consumer: str
    kind: str
    position: int
    pending_batches: int
    pending_messages: int


@dataclass(frozen=True)
class QueueInfo:
    """A queue's depth, oldest message and consumers, as the CLI shows them."""

    name: str
    queue_table: str
    sort_order: str
    depth: int
    batches: int
    bytes: int
    oldest_time: dt.datetime | None
    consumers: list[ConsumerInfo]


def _batch(row: object) -> Batch:
    m = row._mapping  # type: ignore[attr-defined]
    return Batch(
        seq=m["seq"],
        queue=m["queue"],
        batch_id=m["batch_id"],
        path=m["path"],
        n_messages=m["n_messages"],
        n_bytes=m["n_bytes"],
        producer=m["producer"],
        dedup_key=m["dedup_key"],
        source_last_seq=m["source_last_seq"],
        min_commit_scn=m["min_commit_scn"],
        max_commit_scn=m["max_commit_scn"],
    )


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
    ) -> None:
        """Create a queue if it does not exist (idempotent)."""
        name = name.lower()
        owner, qname = name.split(".", 1)
        with self.store.begin() as conn:
            if conn.execute(select(Q.c.name).where(Q.c.name == name)).first():
                return
            conn.execute(
                Q.insert().values(
                    name=name,
                    queue_table=queue_table or f"{name}_table",
                    sort_order=sort_order,
                    multiple_consumers=multiple_consumers,
                    storage_path=join(self.staging_root, owner, qname),
                    created_at=utcnow(),
                )
            )

    def queue_path(self, name: str) -> str:
        """The directory holding a queue's batches."""
        row = self._queue_row(name)
        return str(row._mapping["storage_path"])

    def _queue_row(self, name: str, conn: Connection | None = None) -> Any:
        stmt = select(Q).where(Q.c.name == name.lower())
        if conn is not None:
            row = conn.execute(stmt).first()
        else:
            with self.store.engine.connect() as c:
                row = c.execute(stmt).first()
        if row is None:
            raise QueueNotFoundError(
                f"queue {name!r} does not exist in state store {self.store.url!r}"
            )
        return row

    def exists(self, name: str) -> bool:
        """Whether a queue is defined."""
        with self.store.engine.connect() as c:
            return c.execute(select(Q.c.name).where(Q.c.name == name.lower())).first() is not None

    def new_batch_path(self, queue: str) -> tuple[str, str]:
        """A fresh batch id and the directory an enqueue should write it to."""
        batch_id = uuid.uuid4().hex
        return batch_id, join(self.queue_path(queue), f"batch-{batch_id}")

    # -- consumers ---------------------------------------------------------------
    def add_consumer(self, queue: str, consumer: str, kind: str = "user") -> None:
        """Register a consumer (idempotent); it starts before the oldest retained batch."""
        queue = queue.lower()
        with self.store.begin() as conn:
            self._queue_row(queue, conn)
            found = conn.execute(
                select(C.c.consumer).where(C.c.queue == queue, C.c.consumer == consumer)
            ).first()
            if found:
                return
            floor = conn.execute(
                select(func.min(B.c.seq)).where(B.c.queue == queue, B.c.path != "")
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
            with self.store.engine.connect() as c:
                value = c.execute(stmt).scalar_one_or_none()
        else:
            value = conn.execute(stmt).scalar_one_or_none()
        if value is None:
            raise TerminalError(f"{consumer!r} is not a consumer of queue {queue!r}")
        return int(value)

    def pending(self, queue: str, consumer: str, *, max_batches: int | None = None) -> list[Batch]:
        """Committed batches the consumer has not acknowledged yet, oldest first."""
        self._queue_row(queue)
        pos = self.position(queue, consumer)
        stmt = (
            select(B)
            .where(B.c.queue == queue.lower(), B.c.seq > pos, B.c.path != "")
            .order_by(B.c.seq)
        )
        if max_batches:
            stmt = stmt.limit(max_batches)
        with self.store.engine.connect() as c:
            return [_batch(r) for r in c.execute(stmt)]

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
        self, queue: str, batch: NewBatch, conn: Connection | None = None
    ) -> int | None:
        """Make a written batch visible. Returns its sequence number.

        When ``batch.dedup_key`` was committed before, nothing changes and ``None`` is
        returned: this is what makes re-running a capture or a propagation harmless.
        """
        if conn is None:
            try:
                with self.store.begin() as c:
                    return self.commit_batch(queue, batch, c)
            except IntegrityError:
                return None
        self._queue_row(queue, conn)
        if batch.dedup_key and self.find_dedup(queue, batch.dedup_key, conn) is not None:
            return None
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
                source_last_seq=batch.source_last_seq,
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
            with self.store.engine.connect() as c:
                return c.execute(stmt).scalar_one_or_none()
        return conn.execute(stmt).scalar_one_or_none()

    def last_from_producer(self, queue: str, producer: str) -> int | None:
        """The highest source sequence a producer (a propagation) has committed here."""
        stmt = select(func.max(B.c.source_last_seq)).where(
            B.c.queue == queue.lower(), B.c.producer == producer
        )
        with self.store.engine.connect() as c:
            value = c.execute(stmt).scalar_one_or_none()
        return int(value) if value is not None else None

    def purgeable(self, queue: str) -> list[Batch]:
        """Batches every consumer has acknowledged: safe to delete."""
        queue = queue.lower()
        with self.store.engine.connect() as c:
            low = c.execute(select(func.min(C.c.position)).where(C.c.queue == queue)).scalar()
            if low is None:
                return []
            rows = c.execute(
                select(B)
                .where(B.c.queue == queue, B.c.seq <= low, B.c.path != "")
                .order_by(B.c.seq)
            )
            return [_batch(r) for r in rows]

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

    # -- views -------------------------------------------------------------------
    def queue_names(self) -> list[str]:
        """All queues of this site."""
        with self.store.engine.connect() as c:
            return [r[0] for r in c.execute(select(Q.c.name).order_by(Q.c.name))]

    def info(self, name: str) -> QueueInfo:
        """Depth, oldest message and consumers of a queue."""
        row = self._queue_row(name)._mapping  # type: ignore[attr-defined]
        name = name.lower()
        live = (B.c.queue == name) & (B.c.path != "")
        with self.store.engine.connect() as c:
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
