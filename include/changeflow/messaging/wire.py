"""Statements run on the driver's own connection: the hot path of enqueue and dequeue.

An enqueue that commits at once, and a dequeue that takes its messages in one
statement, are each *one* SQL statement. Run through SQLAlchemy's ``Connection``,
such a statement costs several times its own database time in Python (the
connection and transaction wrappers, the statement's cache key, the execution
context). Here the statement is still written with SQLAlchemy Core, but compiled
*once* per dialect (:class:`Compiled`: the SQL text, the order of its parameters,
their bind processors, the result columns' processors) and executed on the raw DBAPI
connection checked out of the same pool (:func:`transaction`).

Durability is unchanged: on SQLite the statement runs between ``BEGIN IMMEDIATE`` and
``COMMIT`` (the store's own write transaction; WAL, synchronous FULL); on PostgreSQL a
single statement runs in autocommit, which *is* one transaction committed with the
server's ``synchronous_commit`` (one round trip instead of three: ``BEGIN``, the
statement, ``COMMIT``).

Driver errors are classified like the store's: a lost connection or a busy database
is a transient :class:`~changeflow.errors.StateStoreError` (the pool discards a
connection the server dropped).

A few driver connections (:data:`SPARES` per engine) stay checked out of the pool
between statements, ready for the next one (:class:`_Spares`): a pool checkout and
check-in (with its reset) cost about as much Python as the statement itself. Only a
connection whose transaction ended cleanly is kept (committed, or a read with no
transaction open; on PostgreSQL in autocommit); ``engine.dispose()`` closes them, and a
forked process does not use its parent's.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Engine, event
from sqlalchemy.engine.interfaces import Dialect

from changeflow.errors import StateStoreError
from changeflow.state import StateStore

log = logging.getLogger(__name__)
_lock = threading.Lock()
_compiled: dict[tuple[int, str], Compiled] = {}
Processor = Callable[[Any], Any] | None
T = TypeVar("T")


class Compiled:
    """A Core statement compiled for one dialect, run with a DBAPI cursor.

    Args:
        stmt: the statement (its bind parameters are named; literal values in it are
            bound as compiled).
        dialect: the dialect to compile for.
        columns: the columns the statement returns, in order (``RETURNING`` or the
            select list), to convert their values like SQLAlchemy would.
    """

    def __init__(self, stmt: Any, dialect: Dialect,
                 columns: Sequence[ColumnElement[Any]] = ()) -> None:
        compiled = stmt.compile(dialect=dialect)
        self.sql = compiled.string
        self.positional = bool(dialect.positional)
        names = list(compiled.positiontup or []) if self.positional else list(compiled.binds)
        escaped = compiled.escaped_bind_names or {}
        self.binds: list[tuple[str, str, Any, Processor]] = []
        for name in names:
            bind = compiled.binds[name]
            fixed = None if bind.callable is not None else bind.value
            self.binds.append((name, escaped.get(name, name), fixed,
                               bind.type.dialect_impl(dialect).bind_processor(dialect)))
        self._defaults = [(name, fixed) for name, _, fixed, _ in self.binds]
        self._keys = [key for _, key, _, _ in self.binds]
        self._procs = [(i, proc) for i, (_, _, _, proc) in enumerate(self.binds)
                       if proc is not None]
        self.results: list[Processor] = [_result_processor(c, dialect) for c in columns]
        self.convert = any(p is not None for p in self.results)
        self.row = _row_class(tuple(c.name for c in columns)) if columns else None

    def parameters(self, params: dict[str, Any]) -> Any:
        """The DBAPI parameters (a tuple, or a dict for named styles) of ``params``."""
        get = params.get
        out = [get(name, fixed) for name, fixed in self._defaults]
        for i, proc in self._procs:
            value = out[i]
            if value is not None:
                out[i] = proc(value)
        if self.positional:
            return tuple(out)
        return dict(zip(self._keys, out, strict=True))

    def rows(self, cursor: Any, params: dict[str, Any]) -> list[Any]:
        """Execute and fetch every row, as named tuples of the declared columns."""
        return self.convert_rows(self.fetch(cursor, self.parameters(params)))

    def fetch(self, cursor: Any, parameters: Any) -> list[Any]:
        """Execute with DBAPI ``parameters`` (see :meth:`parameters`); the raw rows."""
        cursor.execute(self.sql, parameters)
        return list(cursor.fetchall())

    def convert_rows(self, fetched: list[Any]) -> list[Any]:
        """Raw rows as named tuples of the declared columns, values converted."""
        assert self.row is not None
        make = self.row._make
        if self.convert:
            procs = self.results
            return [make(v if p is None or v is None else p(v)
                         for p, v in zip(procs, r, strict=True)) for r in fetched]
        return [make(r) for r in fetched]

    def run(self, store: StateStore, params: dict[str, Any]) -> list[Any]:
        """Run as a transaction of its own (:func:`transaction`); the converted rows.

        Parameters are prepared before the transaction and rows converted after it,
        so the store's write lock (SQLite) is held for the statement only.
        """
        parameters = self.parameters(params)
        fetched = write(store, lambda cursor: self.fetch(cursor, parameters))
        return self.convert_rows(fetched)

    def read(self, store: StateStore, params: dict[str, Any]) -> list[Any]:
        """Run a query alone (its own snapshot, no write lock); the converted rows."""
        parameters = self.parameters(params)
        if store.dialect != "sqlite":
            fetched = _autocommit(store, lambda cursor: self.fetch(cursor, parameters))
        else:
            with transaction(store, write=False) as cursor:
                fetched = self.fetch(cursor, parameters)
        return self.convert_rows(fetched)


def _result_processor(column: ColumnElement[Any], dialect: Dialect) -> Processor:
    """How SQLAlchemy converts the column's driver values (None: they are used as is).

    Processors that need the driver's type code (PostgreSQL numerics) are for types
    psycopg returns natively already (float8, bigint): none is needed.
    """
    try:
        return column.type.dialect_impl(dialect).result_processor(dialect, None)
    except (TypeError, LookupError, ValueError):
        return None
    except Exception as exc:  # noqa: BLE001  (SQLAlchemy's InvalidRequestError)
        if type(exc).__name__ == "InvalidRequestError":
            return None
        raise


@functools.lru_cache(maxsize=64)
def _row_class(names: tuple[str, ...]) -> Any:
    return collections.namedtuple("Row", names)  # type: ignore[misc]


def compiled(engine: Engine, key: str, build: Callable[[], Any],
             columns: Sequence[ColumnElement[Any]] = ()) -> Compiled:
    """The statement ``build()`` compiled for ``engine``'s dialect, cached under ``key``."""
    ck = (id(engine.dialect), key)
    found = _compiled.get(ck)
    if found is None:
        found = Compiled(build(), engine.dialect, columns)
        with _lock:
            _compiled[ck] = found
    return found


def _classify(exc: BaseException) -> bool:
    """Whether a driver error is the store's trouble (transient), not the statement's."""
    return any(c.__name__ in ("OperationalError", "InterfaceError")  # AdminShutdown too
               for c in type(exc).__mro__)


#: Driver connections kept out of the pool per engine, for the next statement.
SPARES = 4


class _Spares:
    """An engine's spare driver connections (see the module docstring)."""

    def __init__(self, engine: Engine) -> None:
        self.pid = os.getpid()
        self.free: list[Any] = []
        self.lock = threading.Lock()
        event.listen(engine, "engine_disposed", self.close)

    def take(self) -> Any:
        """A spare connection, or None."""
        if self.pid != os.getpid():
            return None
        with self.lock:
            return self.free.pop() if self.free else None

    def keep(self, conn: Any) -> bool:
        """Keep ``conn`` for the next statement; False when there are enough spares."""
        if self.pid != os.getpid():
            return False
        with self.lock:
            if len(self.free) < SPARES:
                self.free.append(conn)
                return True
        return False

    def close(self, *_: Any) -> None:
        """Close every spare connection (the engine was disposed)."""
        with self.lock:
            free, self.free = self.free, []
        for conn in free:
            try:
                conn.invalidate()  # closes the driver connection
            except Exception:  # noqa: BLE001  (closing a broken connection)
                log.debug("closing a spare connection", exc_info=True)


_spares: weakref.WeakKeyDictionary[Engine, _Spares] = weakref.WeakKeyDictionary()


def _spares_of(engine: Engine) -> _Spares:
    found = _spares.get(engine)
    if found is None:
        with _lock:
            found = _spares.get(engine)
            if found is None:
                found = _spares[engine] = _Spares(engine)
    return found


def _release(conn: Any, postgres: bool) -> None:
    """Return a driver connection to the pool (out of autocommit on PostgreSQL)."""
    if postgres and conn.driver_connection is not None:
        try:
            conn.driver_connection.autocommit = False
        except Exception:  # noqa: BLE001  (a broken connection: the pool drops it)
            conn.invalidate()
    conn.close()


@contextmanager
def transaction(store: StateStore, *, write: bool = True) -> Iterator[Any]:
    """One write transaction on a raw driver connection; yields its cursor.

    SQLite: ``BEGIN IMMEDIATE`` ... ``COMMIT``. PostgreSQL: autocommit, so use it for
    one statement only (each statement commits by itself). With ``write=False``, for
    one query: no transaction is begun on either (the statement is its own snapshot),
    and no write lock is taken.

    Raises:
        StateStoreError: the store is unreachable or busy (transient); the driver's
            other errors pass through, after the transaction is rolled back.
    """
    spares = _spares_of(store.engine)
    conn = spares.take()
    spare = conn is not None
    if conn is None:
        conn = _connect(store)
    sqlite = store.dialect == "sqlite"
    begin = sqlite and write
    driver = conn.driver_connection
    cursor = None
    clean = False
    try:
        if not sqlite and not spare:
            driver.autocommit = True  # type: ignore[union-attr]
        cursor = conn.cursor()
        if begin:
            cursor.execute("BEGIN IMMEDIATE")
        yield cursor
        if begin:
            cursor.execute("COMMIT")
        clean = True
    except BaseException as exc:
        _abort(conn, begin)
        if _classify(exc):
            if not sqlite:
                conn.invalidate(exc if isinstance(exc, Exception) else None)
            raise StateStoreError(f"state store {store.safe_url!r}: transaction failed: "
                                  f"{str(exc).splitlines()[0]}") from exc
        raise
    finally:
        if cursor is not None:
            cursor.close()
        if not (clean and spares.keep(conn)):
            _release(conn, not sqlite)


def _connect(store: StateStore) -> Any:
    """A driver connection of the store's pool (not a spare)."""
    try:
        return store.engine.raw_connection()
    except Exception as exc:  # noqa: BLE001  (the pool raises SQLAlchemy's wrapper)
        raise StateStoreError(f"state store {store.safe_url!r}: cannot connect: "
                              f"{str(exc).splitlines()[0]}") from exc


#: Where a connection keeps its reusable driver cursor (in the pool record's ``info``).
_CURSOR = "changeflow.wire.cursor"


def _cursor_of(conn: Any) -> Any:
    """The connection's reusable driver cursor (a new one after a failure or reconnect)."""
    driver = conn.driver_connection
    found = conn.info.get(_CURSOR)
    if found is None or found.closed or found.connection is not driver:
        found = conn.info[_CURSOR] = driver.cursor()
    return found


def _autocommit(store: StateStore, job: Callable[[Any], T]) -> T:
    """PostgreSQL: ``job(cursor)``, one statement in autocommit (see :func:`transaction`).

    The same work as ``with transaction(store) as cursor: return job(cursor)`` without
    the context manager's machinery, on a cursor kept with the connection: the hot
    path runs this once per enqueue or dequeue. After any error the cursor is dropped.
    """
    spares = _spares_of(store.engine)
    conn = spares.take()
    spare = conn is not None
    if conn is None:
        conn = _connect(store)
    clean = False
    try:
        if not spare:
            conn.driver_connection.autocommit = True
        result = job(_cursor_of(conn))
        clean = True
        return result
    except BaseException as exc:
        conn.info.pop(_CURSOR, None)
        if _classify(exc):
            conn.invalidate(exc if isinstance(exc, Exception) else None)
            raise StateStoreError(f"state store {store.safe_url!r}: transaction failed: "
                                  f"{str(exc).splitlines()[0]}") from exc
        raise
    finally:
        if not (clean and spares.keep(conn)):
            _release(conn, True)


#: Seconds a write waits for its turn in this process (the store's busy timeout).
BUSY_SECONDS = 60.0
#: The most statements' jobs one grouped SQLite transaction runs.
GROUP_MAX = 64


class _Batch:
    """Write jobs of several threads, run and committed as one transaction."""

    def __init__(self) -> None:
        self.jobs: list[list[Any]] = []  # [job, result, error]
        self.done = threading.Event()


class _Committer:
    """Group commit of one SQLite file's writes by the threads of this process.

    A thread that finds no open batch opens one and leads it: it waits for the
    previous batch to commit (its turn at the file), closes its batch, runs every job
    of it in one ``BEGIN IMMEDIATE`` ... ``COMMIT``, then wakes the others. Threads
    that arrive while a batch waits for its turn join it. One fsync then serves
    several callers, and no thread sleeps in SQLite's busy handler (1 to 100 ms
    between retries) waiting for another of this process.

    A job that fails must be undone alone. The jobs first run back to back, without
    savepoints (each statement gives up the GIL, and getting it back may wait for
    another thread while the file's write lock is held: two statements less per job
    keep the transaction short). When one fails, the whole transaction is rolled back
    and the batch runs again with each job in a savepoint, so the failing job gets its
    error and the others commit. A job is a function of the cursor whose parameters
    were prepared before (:meth:`Compiled.run`), so running it again after a rollback
    does the same work once: only the committed run counts.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.turn = threading.Lock()
        self.open: _Batch | None = None

    def submit(self, store: StateStore, job: Callable[[Any], T]) -> T:
        with self.lock:
            batch, lead = self.open, False
            if batch is None or len(batch.jobs) >= GROUP_MAX:
                batch = self.open = _Batch()
                lead = True
            slot: list[Any] = [job, None, None]
            batch.jobs.append(slot)
        if lead:
            try:
                self._lead(store, batch)
            finally:
                batch.done.set()
        elif not batch.done.wait(BUSY_SECONDS * 2):
            raise StateStoreError(f"state store {store.safe_url!r}: busy: the grouped "
                                  "write did not finish in time")
        if slot[2] is not None:
            raise slot[2]
        return slot[1]  # type: ignore[no-any-return]

    def _lead(self, store: StateStore, batch: _Batch) -> None:
        if not self.turn.acquire(timeout=BUSY_SECONDS):
            self._fail(batch, StateStoreError(f"state store {store.safe_url!r}: busy: no "
                                              f"write turn within {BUSY_SECONDS:g} s"))
            return
        try:
            with self.lock:
                if self.open is batch:
                    self.open = None
            jobs = list(batch.jobs)
            if len(jobs) > 1 and self._together(store, jobs):
                return
            with transaction(store) as cursor:
                if len(jobs) == 1:
                    jobs[0][1] = jobs[0][0](cursor)
                    return
                for slot in jobs:
                    cursor.execute("SAVEPOINT cf_job")
                    try:
                        slot[1] = slot[0](cursor)
                    except Exception as exc:
                        if _classify(exc):  # the transaction itself is in trouble
                            raise
                        cursor.execute("ROLLBACK TO cf_job")
                        slot[2] = exc
                    cursor.execute("RELEASE cf_job")
        except BaseException as exc:
            self._fail(batch, exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self.turn.release()

    @staticmethod
    def _together(store: StateStore, jobs: list[list[Any]]) -> bool:
        """Run the jobs in one transaction without savepoints; False if one failed
        (nothing of it committed: the caller runs them again one savepoint each)."""
        results: list[Any] = []
        try:
            with transaction(store) as cursor:
                for slot in jobs:
                    results.append(slot[0](cursor))
        except Exception as exc:
            if isinstance(exc, StateStoreError) or _classify(exc):  # the store's trouble:
                raise  # every job gets it
            return False
        for slot, result in zip(jobs, results, strict=True):
            slot[1] = result
        return True

    @staticmethod
    def _fail(batch: _Batch, exc: BaseException) -> None:
        for slot in batch.jobs:
            if slot[2] is None:
                slot[1], slot[2] = None, exc


#: One committer per engine (an in-memory store's URL names no file to share).
_committers: weakref.WeakKeyDictionary[Engine, _Committer] = weakref.WeakKeyDictionary()


def write(store: StateStore, job: Callable[[Any], T]) -> T:
    """Run ``job(cursor)`` in a write transaction of its own and commit; its result.

    PostgreSQL: :func:`transaction` (autocommit: ``job`` runs one statement). SQLite:
    grouped with other threads' writes through the same engine (:class:`_Committer`): the
    result is returned once the transaction that holds it has committed.

    Raises:
        StateStoreError: the store is unreachable or busy (transient); the job's other
            errors pass through (its work undone).
    """
    if store.dialect != "sqlite":
        return _autocommit(store, job)
    found = _committers.get(store.engine)
    if found is None:
        with _lock:
            found = _committers.setdefault(store.engine, _Committer())
    return found.submit(store, job)


def _abort(conn: Any, sqlite: bool) -> None:
    try:
        if sqlite:
            conn.driver_connection.execute("ROLLBACK")
    except Exception:  # noqa: BLE001  (no transaction left to roll back)
        pass
