"""Reading a capture's slot one batch ahead, from a temporary copy, in a thread.

A peek (:meth:`SlotReader.peek <changeflow.capture.pg_source.SlotReader.peek>`)
returns only once the server has decoded the whole batch, and the server sits idle
while the capture converts, checks and writes it: the two take turns. A
:class:`SlotPrefetch` lets the server decode the next batch while the capture works
on the current one, with the same SQL and the same one value per batch:

* on a second connection (set up like the capture's: UTC, ISO dates) it copies the
  capture's slot to a **temporary slot** (``pg_copy_logical_replication_slot``: same
  restart and confirmed positions), owned by that session;
* a thread reads the copy with ``pg_logical_slot_get_changes`` (the peek's query, but
  consuming the *copy*, so each change is decoded once there) and hands each batch
  over through a queue of one: the server is at most one batch ahead. The thread
  spends its time waiting for the server (psycopg releases the GIL), not in Python;
* **exactly once is unchanged**: nothing is ever confirmed on the capture's own slot
  here. The capture advances its slot with ``pg_replication_slot_advance`` only after
  a batch is committed in the queue catalog, as with peeks. The temporary copy goes
  with the session, also when the capture is killed.

Not following, the copy is read until a read returns nothing (as peeks are); following,
it is polled every ``poll`` seconds. When the copy cannot be made (no free replication
slot, a role without REPLICATION) :func:`open_prefetch` returns ``None`` and the capture
peeks its slot in place; when a read fails the capture goes on peeking from where its
slot stands (:class:`~changeflow.capture.pg_stream.StreamError`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import uuid
from typing import Any

from changeflow.capture.pg_decode import Peek
from changeflow.capture.pg_source import _PEEK_SQL
from changeflow.capture.pg_stream import StreamError

log = logging.getLogger(__name__)
_END = object()  # the reader's last item: nothing more will come

# The peek's query, consuming the temporary copy.
_GET_SQL = _PEEK_SQL.replace("pg_logical_slot_peek_changes", "pg_logical_slot_get_changes")
assert _GET_SQL != _PEEK_SQL


class SlotPrefetch:
    """Batches of a capture's slot, read ahead from a temporary copy in a thread.

    Args:
        url: the source's libpq URL.
        slot: the capture's (persistent) slot; it is copied, never consumed.
        options: the wal2json options, as :meth:`SlotReader.options` gives them.
        batch_rows: changes per read (whole transactions), as a peek's limit.
        follow: keep polling a drained copy (until :meth:`close`); otherwise the
            prefetch ends at the first read that returns nothing.
        poll: seconds between reads of a drained copy when following.
    """

    def __init__(self, url: str, slot: str, options: list[str], *, batch_rows: int,
                 follow: bool, poll: float = 0.5, application_name: str = ""):
        self.url, self.slot, self.options = url, slot, list(options)
        self.batch_rows, self.follow, self.poll = max(batch_rows, 1), follow, poll
        # The capture loop asks for a timeout only when following (as for a stream).
        self.end_lsn: int | None = None if follow else 0
        self.application_name = application_name or "changeflow-prefetch"
        self.copy = f"cf_prefetch_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self._chunks: queue.Queue[Any] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: Any = None
        self.error: BaseException | None = None

    # -- life cycle ------------------------------------------------------------------
    def start(self) -> SlotPrefetch:
        """Copy the slot (temporary, in a new session) and start reading the copy.

        Raises:
            StreamError: the connection or the copy failed.
        """
        import psycopg

        from changeflow.pgconn import connect

        try:
            self._conn = connect(self.url, application_name=self.application_name,
                                 attempts=1)
            self._conn.execute("SELECT pg_copy_logical_replication_slot(%s, %s, true)",
                               (self.slot, self.copy))
        except (psycopg.Error, Exception) as exc:
            self.close()
            text = str(exc).strip()
            raise StreamError(text.splitlines()[0] if text else type(exc).__name__) from exc
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"pgprefetch-{self.slot}")
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the reader and end the session (the temporary copy goes with it)."""
        self._stop.set()
        if self._thread is not None:
            if self._conn is not None:
                with contextlib.suppress(Exception):  # interrupt a read in progress
                    self._conn.cancel_safe(timeout=5.0)
            while self._thread.is_alive():
                with contextlib.suppress(queue.Empty):  # unblock a reader waiting for room
                    self._chunks.get_nowait()
                self._thread.join(0.05)
            self._thread = None
        if self._conn is not None:
            # Dropped now, not when the backend exits a moment after the close: the slot
            # is free again for whatever the caller does next.
            with contextlib.suppress(Exception):  # a broken connection drops it on exit
                self._conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                                   "pg_replication_slots WHERE slot_name = %s AND temporary",
                                   (self.copy,))
            with contextlib.suppress(Exception):  # closing a broken connection
                self._conn.close()
            self._conn = None

    def __enter__(self) -> SlotPrefetch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- consuming -------------------------------------------------------------------
    def next(self, timeout: float | None = None) -> Peek | None:
        """The next batch of whole transactions; ``None`` once the prefetch has ended.

        Following, an empty :class:`Peek` comes back after ``timeout`` seconds without
        a batch.

        Raises:
            StreamError: a read failed (nothing of it was handed over).
        """
        try:
            item = self._chunks.get(timeout=timeout)
        except queue.Empty:
            return Peek("", [], 0)
        if item is _END:
            self._chunks.put(_END)  # stays ended for later calls
            if self.error is not None:
                raise StreamError(f"reading a copy of slot {self.slot!r} failed: "
                                  f"{self.error}") from self.error
            return None
        return item  # type: ignore[no-any-return]

    # -- the reader thread ---------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                row = self._conn.execute(_GET_SQL, (self.copy, self.batch_rows,
                                                    self.options)).fetchone()
                if row is None or not row[2]:
                    if not self.follow:
                        return
                    self._stop.wait(self.poll)
                    continue
                self._put(Peek(row[0] or "", [int(x) for x in row[1] or []], int(row[2])))
        except BaseException as exc:  # noqa: BLE001  (handed to the consumer)
            if not self._stop.is_set():
                self.error = exc
        finally:
            self._put(_END, final=True)

    def _put(self, item: Any, final: bool = False) -> None:
        """Queue ``item``, waiting for room (or for :meth:`close`)."""
        while True:
            if self._stop.is_set() and not final:
                return
            try:
                self._chunks.put(item, timeout=0.5)
                return
            except queue.Full:
                if final and self._stop.is_set():
                    return


def open_prefetch(url: str, slot: str, options: list[str], *, batch_rows: int,
                  follow: bool, poll: float, capture: str) -> SlotPrefetch | None:
    """A started :class:`SlotPrefetch`, or ``None`` (logged) when it is not possible."""
    reader = SlotPrefetch(url, slot, options, batch_rows=batch_rows, follow=follow,
                          poll=poll, application_name=f"changeflow-capture-{capture}")
    try:
        return reader.start()
    except StreamError as exc:
        log.warning("capture %s: cannot read a copy of slot %s ahead (%s); peeking it",
                    capture, slot, exc)
        return None
