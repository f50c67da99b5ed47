"""Reading a capture's slot one batch ahead, from a temporary copy, in a thread.

A peek (:meth:`SlotReader.peek <changeflow.capture.pg_source.SlotReader.peek>`)
returns only once the server has decoded the whole batch, and the server sits idle
while the capture converts, checks and writes it: the two take turns. A
:class:`SlotPrefetch` lets the server decode the next batch while the capture works
on the current one, with the same SQL and the same one value per batch:

* on a second connection (set up like the capture's: UTC, ISO dates) it copies the
  capture's slot to a **temporary slot** (``pg_copy_logical_replication_slot``: same
  restart and confirmed positions), owned by that session;
* a *fetch* thread reads the copy with ``pg_logical_slot_get_changes`` (the peek's
  query, but consuming the *copy*), up to ``FETCH_BATCHES`` batches at a time, and
  cuts what it gets into batches of whole transactions exactly where peeks would have
  cut them (:func:`split`). Every read decodes the WAL again from the slot's restart
  point, which moves only where the server logged its running transactions (every
  15 s, or at a checkpoint), so fewer, larger reads cost the server far less: on a
  pgbench backlog of 1.8 million documents, 117,751 documents/s read 50,000 at a
  time, 203,476/s read 200,000 at a time (one read of everything: 535,052/s); with
  ``WORK_MEM`` the server keeps a read in memory (1.6 million documents read 400,000
  at a time: 196,701/s with 4MB, 213,535/s with 512MB);
* a second thread reads each batch's documents with Arrow (:func:`.pg_arrow.parse`)
  while the fetch thread waits for the server's next read, and hands the batches
  over through a queue of one: the server is at most a read ahead of the capture;
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
import queue
import threading
from typing import Any, TypeVar

from changeflow.capture import pg_arrow
from changeflow.capture.pg_decode import Peek
from changeflow.capture.pg_stream import CopyReader, StreamError, started

#: a read asks for up to this many batches' changes (at most ``FETCH_ROWS``)
FETCH_BATCHES, FETCH_ROWS = 8, 400_000
# The prefetch session's work_mem: a read's documents (~100-300 bytes each) stay in
# memory on the server instead of going through a temporary file.
WORK_MEM = "128MB"
_COMMIT = """starts_with(data, '{"action":"C"')"""
# The peek's query (pg_source._PEEK_SQL), consuming the temporary copy, with each
# document's length and each commit's ordinal: where to cut the text into batches. The
# aggregates have no ORDER BY: PostgreSQL would sort the read once per aggregate (the
# server read 183k documents/s with them, 227k/s without). All of them take the rows in
# the order the function scan returns them, which the last column shows: a read whose
# ordinals are not 1, 2, 3... is refused (:func:`in_order`). From a UTF-8 database the
# text comes as its bytes (client encoding SQL_ASCII: no conversion, no decoding), cut by
# ``octet_length``, which the server reads from the value's header instead of counting
# characters (with ``starts_with`` for the commits: 210k -> 231k documents/s).
_GET_SQL = f"""
SELECT string_agg(data, ','),
       array_agg((lsn - '0/0'::pg_lsn)::bigint) FILTER (WHERE {_COMMIT}),
       count(*),
       array_agg(LENGTH(data)),
       array_agg(n) FILTER (WHERE {_COMMIT}),
       array_agg(n)
FROM pg_logical_slot_get_changes(%s, NULL, %s, VARIADIC %s::text[])
     WITH ORDINALITY AS c(lsn, xid, data, n)
"""
_T = TypeVar("_T", str, bytes)
_DONE = object()  # the fetch thread's last item when it ended without an error


def in_order(ordinals: list[int] | None, rows: int) -> bool:
    """Whether a read's aggregates took its ``rows`` documents in slot order."""
    import numpy as np

    got = np.asarray(ordinals or [], dtype=np.int64)
    return bool(got.size == rows and np.array_equal(got, np.arange(1, rows + 1)))


def split(text: _T, lsns: list[int], rows: int, lengths: list[int], commits: list[int],
          batch_rows: int) -> list[tuple[_T, list[int], int]]:
    """Cut one read into ``(text, commit LSNs, documents)`` batches as peeks of
    ``batch_rows`` would have returned them: a batch ends at the first commit at or past
    ``batch_rows`` documents. ``lengths`` are the documents' lengths (in the text's
    units: characters of a str, bytes of bytes), ``commits`` the
    1-based ordinals of the commit documents. What follows the last commit (messages
    outside a transaction) stays with the last batch; if the lengths do not add up to
    the text (an encoding that counts otherwise) the read stays one batch.

    >>> split("a,C1,b,c,C2,d,C3", [1, 2, 3], 7, [1, 2, 1, 1, 2, 1, 2], [2, 5, 7], 2)
    [('a,C1', [1], 2), ('b,c,C2', [2], 3), ('d,C3', [3], 2)]
    """
    if len(commits) != len(lsns) or sum(lengths) + rows - 1 != len(text) or len(lengths) != rows:
        return [(text, lsns, rows)]
    cuts: list[tuple[int, int]] = []  # (documents up to the cut, commits up to it)
    start = 0
    for k, ordinal in enumerate(commits):
        if ordinal - start >= batch_rows:
            cuts.append((ordinal, k + 1))
            start = ordinal
    if start < len(lengths) and (not cuts or cuts[-1][1] < len(commits)):
        cuts.append((rows, len(commits)))
    elif cuts:  # only messages outside a transaction after the last cut: they join it
        cuts[-1] = (rows, cuts[-1][1])
    if len(cuts) <= 1:
        return [(text, lsns, rows)]
    out = []
    offset, doc, commit = 0, 0, 0
    for end_doc, end_commit in cuts:
        size = sum(lengths[doc:end_doc]) + (end_doc - doc - 1)
        out.append((text[offset:offset + size], lsns[commit:end_commit], end_doc - doc))
        offset, doc, commit = offset + size + 1, end_doc, end_commit
    return out


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
        self.fetch_rows = max(self.batch_rows, min(FETCH_BATCHES * self.batch_rows,
                                                   FETCH_ROWS))
        # one read's batches, waiting for Arrow: the server reads on meanwhile
        self._raw: queue.Queue[Any] = queue.Queue(maxsize=FETCH_BATCHES + 2)
        self._fetcher: threading.Thread | None = None
        self._sql = _GET_SQL.replace("LENGTH(", "length(")  # characters, of str

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
            self._conn.execute(f"SET work_mem = '{WORK_MEM}'")
            # (with options of ASCII only: how str parameters are sent under SQL_ASCII is
            # psycopg's choice, so a non-ASCII table name keeps the text path)
            if self._conn.info.parameter_status("server_encoding") == "UTF8" and all(
                    o.isascii() for o in self.options):
                self._conn.execute("SET client_encoding TO 'SQL_ASCII'")
                self._sql = _GET_SQL.replace("LENGTH(", "octet_length(")
        except (psycopg.Error, Exception) as exc:
            self.close()
            text = str(exc).strip()
            raise StreamError(text.splitlines()[0] if text else type(exc).__name__) from exc
        self._fetcher = threading.Thread(target=self._fetch, daemon=True,
                                         name=f"pgfetch-{self.slot}")
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"pgprefetch-{self.slot}")
        self._fetcher.start()
        self._thread.start()
        return self

    def _interrupt(self) -> None:
        with contextlib.suppress(Exception):  # interrupt a read in progress
            self._conn.cancel_safe(timeout=5.0)

    def _release(self) -> None:
        while self._fetcher is not None and self._fetcher.is_alive():
            self._interrupt()  # a read it started after the first cancel
            self._fetcher.join(0.5)
        # Dropped now, not when the backend exits a moment after the close: the slot
        # is free again for whatever the caller does next.
        with contextlib.suppress(Exception):  # a broken connection drops it on exit
            self._conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                               "pg_replication_slots WHERE slot_name = %s AND temporary",
                               (self.copy,))

    # -- the threads -------------------------------------------------------------------
    def _fetch(self) -> None:
        """Read the copy, cut each read into batches and queue them for :meth:`_read`;
        then ``_DONE``, or the error that stopped it."""
        end: object = _DONE
        try:
            while not self._stop.is_set():
                row = self._conn.execute(self._sql, (self.copy, self.fetch_rows,
                                                    self.options)).fetchone()
                if row is None or not row[2]:
                    if not self.follow:
                        break
                    self._stop.wait(self.poll)
                    continue
                if not in_order(row[5], int(row[2])):
                    raise StreamError("the server joined a read's documents out of slot "
                                      "order")
                for text, lsns, n in split(row[0] or b"", [int(x) for x in row[1] or []],
                                           int(row[2]), row[3] or [], row[4] or [],
                                           self.batch_rows):
                    if not self._queue_raw((text, lsns, n)):
                        return
        except BaseException as exc:  # noqa: BLE001  (handed to the consumer)
            end = exc
        self._queue_raw(end)

    def _queue_raw(self, item: object) -> bool:
        """Queue ``item`` for the Arrow thread, waiting for room; False once closed."""
        while not self._stop.is_set():
            with contextlib.suppress(queue.Full):
                self._raw.put(item, timeout=0.5)
                return True
        return False

    def _run(self) -> None:
        self._finish(self._read)

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                item = self._raw.get(timeout=0.5)
            except queue.Empty:
                continue
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            text, lsns, n = item
            # Arrow reads the documents here, without the GIL, while the capture works
            # on the previous batch (None: the capture decodes them itself).
            self._put(Peek(text, lsns, n, docs=pg_arrow.parse(text)))


def open_prefetch(url: str, slot: str, options: list[str], *, batch_rows: int,
                  follow: bool, poll: float, capture: str) -> SlotPrefetch | None:
    """A started :class:`SlotPrefetch`, or ``None`` (logged) when it is not possible."""
    return started(SlotPrefetch(url, slot, options, batch_rows=batch_rows, follow=follow,
                                poll=poll, application_name=f"changeflow-capture-{capture}"),
                   capture, "read ahead from a copy of")
