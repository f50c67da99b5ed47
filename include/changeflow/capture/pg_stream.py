"""Streaming a capture's slot over the replication protocol while batches are processed.

With :meth:`SlotReader.peek <changeflow.capture.pg_source.SlotReader.peek>` the
server decodes a batch while the capture waits, and the capture converts, checks and
writes it while the server waits: the two never overlap. A :class:`SlotStream` lets
the server decode the next batch while the capture works on the current one:

* it opens a *logical replication connection* (psycopg2, the maintained driver on
  PyPI that speaks the replication protocol) and, in that session, copies the
  capture's slot to a **temporary slot** (``pg_copy_logical_replication_slot``: same
  restart and confirmed positions). Changes are streamed from the copy;
* a reader thread collects the wal2json documents into :class:`~.pg_decode.Peek`
  chunks of whole transactions (about ``batch_rows`` documents each, the size a peek
  would have returned) and hands them over through a small bounded queue, so the
  server runs at most two chunks ahead;
* **exactly once is unchanged**: the stream never confirms anything on the capture's
  own slot. The capture still advances its slot with ``pg_replication_slot_advance``
  only after a batch is committed in the queue catalog, exactly as with peeks. The
  temporary copy (and whatever the driver confirms on it) disappears with the session,
  also when the capture is killed.

A stream ends once everything written before it started (``end_lsn``) has been
delivered, or, following, when the capture stops it. Anything that prevents streaming
(no psycopg2, no free replication slot or WAL sender, no REPLICATION privilege) is
reported by :func:`open_stream` returning ``None``; the capture then peeks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Self, TypeVar

from changeflow.capture.pg_decode import Peek

log = logging.getLogger(__name__)

_BEGIN = b'{"action":"B"'
_COMMIT = b'{"action":"C"'
_END = object()  # the reader's last item: nothing more will come
_STALLED = 5.0  # seconds without data or server progress that end a bounded stream


class StreamError(Exception):
    """The replication stream failed (the capture falls back to peeking)."""


def _options(opts: list[str]) -> dict[str, str]:
    """``[name, value, name, value, ...]`` (the peek's options) as a dict.

    >>> _options(["format-version", "2", "include-xids", "1"])
    {'format-version': '2', 'include-xids': '1'}
    """
    return dict(zip(opts[::2], opts[1::2], strict=True))


class CopyReader:
    """A reader thread on a temporary copy of a capture's slot, handing whole
    transactions (:class:`~.pg_decode.Peek` chunks) to the capture through a bounded
    queue: what :class:`SlotStream` and :class:`~.pg_prefetch.SlotPrefetch` share.

    A subclass opens ``_conn`` and the copy in ``start``, runs its reader in
    ``_thread`` and ends it with :meth:`_finish`; :meth:`close` stops it, and
    :meth:`_interrupt` / :meth:`_release` are its hooks there.
    """

    #: the copy's name prefix, the queue's depth, what :meth:`next` says failed
    prefix, depth, failure = "cf_copy", 1, "reading a copy of slot {slot!r}"

    def __init__(self, url: str, slot: str, *, batch_rows: int, application_name: str):
        self.url, self.slot = url, slot
        self.batch_rows = max(batch_rows, 1)
        self.application_name = application_name
        self.copy = f"{self.prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self._chunks: queue.Queue[Any] = queue.Queue(maxsize=self.depth)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: Any = None
        self.error: BaseException | None = None

    # -- life cycle ------------------------------------------------------------------
    def start(self) -> Self:
        """Open the session and the copy, and start the reader thread.

        Raises:
            StreamError: it cannot (no replication connection, no such slot...).
        """
        raise NotImplementedError

    def close(self) -> None:
        """Stop the reader and end the session (the temporary copy goes with it)."""
        self._stop.set()
        if self._thread is not None:
            if self._conn is not None:
                self._interrupt()
            while self._thread.is_alive():
                with contextlib.suppress(queue.Empty):  # unblock a reader waiting for room
                    self._chunks.get_nowait()
                self._thread.join(0.05)
            self._thread = None
        if self._conn is not None:
            self._release()
            with contextlib.suppress(Exception):  # closing a broken connection
                self._conn.close()
            self._conn = None

    def _interrupt(self) -> None:
        """Wake a reader blocked in the server (``close``, before joining it)."""

    def _release(self) -> None:
        """Undo what the session holds, before its connection is closed."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- consuming -------------------------------------------------------------------
    def next(self, timeout: float | None = None) -> Peek | None:
        """The next chunk of whole transactions; ``None`` once the reader has ended.

        Following, an empty :class:`Peek` comes back after ``timeout`` seconds without
        a chunk.

        Raises:
            StreamError: the reader failed (nothing it read was handed over half).
        """
        try:
            item = self._chunks.get(timeout=timeout)
        except queue.Empty:
            return Peek("", [], 0)
        if item is _END:
            self._chunks.put(_END)  # stays ended for later calls
            if self.error is not None:
                raise StreamError(f"{self.failure.format(slot=self.slot)} failed: "
                                  f"{self.error}") from self.error
            return None
        return item  # type: ignore[no-any-return]

    # -- the reader thread -----------------------------------------------------------
    def _finish(self, read: Callable[[], None], keepalive: Callable[[], None] | None = None
                ) -> None:
        """Run ``read`` in the reader thread; its error goes to the consumer, then the end."""
        try:
            read()
        except BaseException as exc:  # noqa: BLE001  (handed to the consumer)
            if not self._stop.is_set():
                self.error = exc
        finally:
            self._put(_END, final=True, keepalive=keepalive)

    def _put(self, item: Any, final: bool = False,
             keepalive: Callable[[], None] | None = None) -> None:
        """Queue ``item``, waiting for room (or for :meth:`close`); every 5 s of waiting
        calls ``keepalive`` (a replication session must keep talking to the server)."""
        waited = 0.0
        while True:
            if self._stop.is_set() and not final:
                return
            try:
                self._chunks.put(item, timeout=0.5)
                return
            except queue.Full:
                if final and self._stop.is_set():
                    return
                waited += 0.5
                if keepalive is not None and waited >= 5.0 and not final:
                    waited = 0.0
                    keepalive()


class SlotStream(CopyReader):
    """Changes of a capture's slot, streamed from a temporary copy in a reader thread.

    Args:
        url: the source's libpq URL.
        slot: the capture's (persistent) slot; it is copied, never consumed.
        options: the wal2json options, as :meth:`SlotReader.options` gives them.
        batch_rows: documents per chunk (whole transactions; a chunk ends at the first
            commit at or past this many).
        end_lsn: stop once the server has sent everything before this position (None:
            follow until :meth:`close`).
        idle: seconds without a message after which a following stream hands over
            the complete transactions it holds.
    """

    prefix, depth, failure = "cf_stream", 2, "replication stream of slot {slot!r}"

    def __init__(self, url: str, slot: str, options: list[str], *, batch_rows: int,
                 end_lsn: int | None, idle: float = 0.2, application_name: str = ""):
        super().__init__(url, slot, batch_rows=batch_rows,
                         application_name=application_name or "changeflow-stream")
        self.options = _options(options)
        self.end_lsn, self.idle = end_lsn, idle

    # -- life cycle ------------------------------------------------------------------
    def start(self) -> SlotStream:
        """Copy the slot and start streaming from the copy.

        Raises:
            StreamError: the copy or the replication start failed.
        """
        try:
            import psycopg2
            import psycopg2.extras
        except ImportError as exc:
            raise StreamError(f"psycopg2 is not installed: {exc}") from exc
        try:
            self._conn = psycopg2.connect(
                self.url, connection_factory=psycopg2.extras.LogicalReplicationConnection,
                application_name=self.application_name)
            cur = self._conn.cursor()
            cur.execute("SELECT pg_copy_logical_replication_slot(%s, %s, true)",
                        (self.slot, self.copy))
            cur.start_replication(slot_name=self.copy, decode=False, options=self.options,
                                  status_interval=5)
        except psycopg2.Error as exc:
            self.close()
            raise StreamError(str(exc).strip().splitlines()[0] if str(exc).strip()
                              else type(exc).__name__) from exc
        self._thread = threading.Thread(target=self._run, args=(cur,), daemon=True,
                                        name=f"pgstream-{self.slot}")
        self._thread.start()
        return self

    # -- the reader thread ---------------------------------------------------------------
    def _run(self, cur: Any) -> None:
        self._finish(lambda: self._read(cur), self._keepalive(cur))

    @staticmethod
    def _keepalive(cur: Any) -> Callable[[], None]:
        return lambda: cur.send_feedback(force=True)  # a status update: the server waits

    def _read(self, cur: Any) -> None:
        import selectors

        # a selector (epoll), not select(): select() refuses a descriptor past 1023, which a
        # process with many files open (a long-lived worker) hands out
        with selectors.DefaultSelector() as sel:
            sel.register(cur, selectors.EVENT_READ)
            self._read_from(cur, sel)

    def _read_from(self, cur: Any, sel: Any) -> None:
        docs: list[bytes] = []
        lsns: list[int] = []
        in_txn, last_msg = False, time.monotonic()
        progress = (time.monotonic(), cur.wal_end)
        while not self._stop.is_set():
            msg = cur.read_message()
            if msg is not None:
                payload = msg.payload
                docs.append(payload)
                if payload.startswith(_BEGIN):
                    in_txn = True
                elif payload.startswith(_COMMIT):
                    in_txn = False
                    lsns.append(msg.data_start)
                    if len(docs) >= self.batch_rows:
                        docs, lsns = self._hand_over(docs, lsns, cur)
                last_msg = time.monotonic()
                continue
            if cur.wal_end != progress[1]:
                progress = (time.monotonic(), cur.wal_end)
            if not in_txn and self.end_lsn is not None and (
                    cur.wal_end >= self.end_lsn or time.monotonic() - max(
                        progress[0], last_msg) > _STALLED):
                # all sent; or the server stands still short of the end (what it has
                # not sent stays in the slot for the next run)
                self._hand_over(docs, lsns, cur)
                return
            if not in_txn and docs and self.end_lsn is None and \
                    time.monotonic() - last_msg >= self.idle:
                docs, lsns = self._hand_over(docs, lsns, cur)
            ready = sel.select(self.idle)
            if not ready and self.end_lsn is not None:
                # ask for a keepalive: it carries how far the server has sent
                cur.send_feedback(reply=True)

    def _hand_over(self, docs: list[bytes], lsns: list[int], cur: Any
                   ) -> tuple[list[bytes], list[int]]:
        """Queue the collected documents as one chunk; returns fresh lists."""
        if docs:
            # Documents outside a transaction (logical messages) travel with the chunk
            # like a peek returns them.
            self._put(Peek(b",".join(docs), lsns, len(docs)), keepalive=self._keepalive(cur))
        return [], []


def open_stream(url: str, slot: str, options: list[str], *, batch_rows: int,
                end_lsn: int | None, capture: str) -> SlotStream | None:
    """A started :class:`SlotStream`, or ``None`` (logged) when streaming is not possible."""
    return started(SlotStream(url, slot, options, batch_rows=batch_rows, end_lsn=end_lsn,
                              application_name=f"changeflow-capture-{capture}"),
                   capture, "stream")


_R = TypeVar("_R", bound=CopyReader)


def started(reader: _R, capture: str, how: str) -> _R | None:
    """``reader`` started, or ``None`` (logged) when it cannot start: the capture then
    reads the slot with peeks. ``how`` says what was tried, for the log."""
    try:
        return reader.start()
    except StreamError as exc:
        log.warning("capture %s: cannot %s slot %s (%s); reading it with peeks",
                    capture, how, reader.slot, exc)
        return None
