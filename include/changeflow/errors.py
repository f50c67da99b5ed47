"""The project's exception hierarchy, and which errors a retry can fix.

Every error raised by changeflow derives from :class:`ChangeflowError`. An error is
either *terminal* (retrying cannot fix it: bad input, a missing or dropped queue, a
schema or payload-type mismatch, a missing privilege) or *transient* (a retry may
succeed: an unreachable server, a store that is locked, a run that holds the
component's lease). :func:`is_transient` is the one place that decides this, for
changeflow's own errors and for the foreign ones that reach a job (SQLAlchemy,
psycopg, OS and JVM errors); every job and the window loop use it, and
:func:`exit_code` turns it into the process exit code Airflow's retry policy reads:

* :data:`EXIT_OK` (0): the run did its work;
* :data:`EXIT_FAILED` (1): the run finished but reports a failure it already
  accounted for (a window that ended on a counted failure);
* :data:`EXIT_TERMINAL` (65, ``EX_DATAERR``): do not retry;
* :data:`EXIT_TRANSIENT` (75, ``EX_TEMPFAIL``): retry later.

Schedules retry transient errors only; terminal errors mark the messages involved
UNDELIVERABLE (a propagation) or fail the run at once.

>>> exit_code(QueueDroppedError("queue hr.q was dropped"))
65
>>> exit_code(ConnectionRefusedError())
75
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_TERMINAL = 65
EXIT_TRANSIENT = 75


class ChangeflowError(Exception):
    """Base class of every changeflow error."""

    transient: bool = False


class TerminalError(ChangeflowError):
    """An error that retrying cannot fix."""

    transient = False


class TransientError(ChangeflowError):
    """An error that may go away if the operation is retried."""

    transient = True


class ConfigError(TerminalError):
    """A configuration file or key is invalid.

    Args:
        message: what is wrong.
        file: the configuration file, when known.
        key: the dotted key path inside the file, when known.
    """

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None):
        self.file = file
        self.key = key
        where = ""
        if file:
            where += f"{file}"
        if key:
            where += f"{':' if where else ''}{key}"
        super().__init__(f"{where}: {message}" if where else message)


class SchemaMismatchError(TerminalError):
    """A Parquet file or DataFrame does not match the LCR contract."""

    def __init__(self, message: str, *, path: str | None = None, field: str | None = None):
        self.path = path
        self.field = field
        parts = [p for p in (path, f"field {field!r}" if field else None) if p]
        super().__init__(f"{', '.join(parts)}: {message}" if parts else message)


class QueueNotFoundError(TerminalError):
    """A queue name was used that is not defined in the state store."""


class QueueDataError(TerminalError):
    """A committed queue batch is missing or unreadable."""


class TargetError(TerminalError):
    """An apply target cannot be written as asked (e.g. a key column is missing)."""


class StateStoreError(TransientError):
    """The runtime state store could not be reached or a transaction failed."""


class SecurityError(TerminalError):
    """An operation was refused because the caller lacks the privilege."""


class QueueDroppedError(QueueNotFoundError):
    """A queue was dropped; nothing re-creates it unasked, so this is terminal."""


class LeaseHeldError(TransientError):
    """Another run of the same component holds its lease (one active run at a time)."""


class LeaseLostError(TransientError):
    """This run's lease expired or was taken over; it must stop before committing."""


class RangeConflictError(TransientError):
    """Another run committed an overlapping source range first; re-read and retry."""


class DestinationUnavailableError(TransientError):
    """A destination (staging root, state store, server) cannot be written right now."""


class PayloadTypeError(TerminalError):
    """A message's payload does not match its queue's declared type."""


_TRANSIENT_NAMES = (
    # SQLAlchemy, psycopg and sqlite: the server or file is unreachable or locked.
    "OperationalError", "InterfaceError", "DisconnectionError", "TimeoutError",
    "ConnectionError", "ConnectionRefusedError", "ConnectionResetError",
    "BrokenPipeError", "SerializationFailure", "DeadlockDetected",
)
_TERMINAL_NAMES = ("PermissionError", "IntegrityError", "ProgrammingError", "DataError")
_JVM_TRANSIENT = ("java.net.", "java.io.IOException", "java.util.concurrent.TimeoutException",
                  "org.apache.hadoop.ipc.", "SocketTimeoutException", "ConnectException")


def is_transient(exc: BaseException) -> bool:
    """Whether a retry may fix an error.

    changeflow's own errors say it themselves. Foreign errors are classified by kind:
    connection, lock and timeout errors are transient; permission, integrity and SQL
    errors are terminal; a JVM error is transient when it is an I/O or network error.
    Anything unknown is treated as transient: a retry with backoff is safe (the
    schedule disables itself after 16 failures), while a wrong *terminal* verdict
    would mark deliverable messages UNDELIVERABLE.
    """
    if isinstance(exc, ChangeflowError):
        return exc.transient
    names = {k.__name__ for k in type(exc).__mro__}
    if names & set(_TERMINAL_NAMES):
        return False
    if names & set(_TRANSIENT_NAMES):
        return True
    if "Py4JJavaError" in names or "CapturedException" in names:
        text = str(exc)
        if any(marker in text for marker in _JVM_TRANSIENT):
            return True
        return "AnalysisException" not in names and "AnalysisException" not in text
    return True


def is_terminal(exc: BaseException) -> bool:
    """Whether no retry can fix an error (the complement of :func:`is_transient`)."""
    return not is_transient(exc)


def exit_code(exc: BaseException) -> int:
    """The exit code of a job that failed with ``exc``."""
    return EXIT_TRANSIENT if is_transient(exc) else EXIT_TERMINAL
