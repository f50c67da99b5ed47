"""The project's exception hierarchy.

Every error raised by changeflow derives from :class:`ChangeflowError`. An error is
either *terminal* (retrying cannot fix it: bad input, a missing queue, a schema
mismatch) or *transient* (a retry may succeed: an unreachable server, a lock held by
another process). Schedules retry transient errors only; terminal errors mark the
messages involved UNDELIVERABLE or fail the run at once.
"""

from __future__ import annotations


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
