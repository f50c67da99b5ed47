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
import threading

from changeflow.capture import pg_arrow
from changeflow.capture.pg_decode import Peek
from changeflow.capture.pg_source import _PEEK_SQL
from changeflow.capture.pg_stream import CopyReader, StreamError, started

# The peek's query, consuming the temporary copy.
_GET_SQL = _PEEK_SQL.replace("pg_logical_slot_peek_changes", "pg_logical_slot_get_changes")
assert _GET_SQL != _PEEK_SQL


class SlotPrefetch(CopyReader):
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

    prefix = "cf_prefetch"

    def __init__(self, url: str, slot: str, options: list[str], *, batch_rows: int,
                 follow: bool, poll: float = 0.5, application_name: str = ""):
        super().__init__(url, slot, batch_rows=batch_rows,
                         application_name=application_name or "changeflow-prefetch")
        self.options, self.follow, self.poll = list(options), follow, poll
        # The capture loop asks for a timeout only when following (as for a stream).
        self.end_lsn: int | None = None if follow else 0

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

    def _interrupt(self) -> None:
        with contextlib.suppress(Exception):  # interrupt a read in progress
            self._conn.cancel_safe(timeout=5.0)

    def _release(self) -> None:
        # Dropped now, not when the backend exits a moment after the close: the slot
        # is free again for whatever the caller does next.
        with contextlib.suppress(Exception):  # a broken connection drops it on exit
            self._conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                               "pg_replication_slots WHERE slot_name = %s AND temporary",
                               (self.copy,))

    # -- the reader thread ---------------------------------------------------------------
    def _run(self) -> None:
        self._finish(self._read)

    def _read(self) -> None:
        while not self._stop.is_set():
            row = self._conn.execute(_GET_SQL, (self.copy, self.batch_rows,
                                                self.options)).fetchone()
            if row is None or not row[2]:
                if not self.follow:
                    return
                self._stop.wait(self.poll)
                continue
            text = row[0] or ""
            # Arrow reads the documents here, without the GIL, while the capture works
            # on the previous batch (None: the capture decodes them itself).
            self._put(Peek(text, [int(x) for x in row[1] or []], int(row[2]),
                           docs=pg_arrow.parse(text)))


def open_prefetch(url: str, slot: str, options: list[str], *, batch_rows: int,
                  follow: bool, poll: float, capture: str) -> SlotPrefetch | None:
    """A started :class:`SlotPrefetch`, or ``None`` (logged) when it is not possible."""
    return started(SlotPrefetch(url, slot, options, batch_rows=batch_rows, follow=follow,
                                poll=poll, application_name=f"changeflow-capture-{capture}"),
                   capture, "read ahead from a copy of")
