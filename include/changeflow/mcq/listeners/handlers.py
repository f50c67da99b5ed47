"""A listener's handler: what it does with one change.

A handler has ``handle(rec)`` and ``close()``. ``handle`` returns when the change is
applied to the listener's system (the runner then acknowledges it) and raises when it
is not: a :class:`~changeflow.errors.TransientError` (the system is unreachable) ends
the run, so the changes wait in the queue for the next one; any other error puts that
one change back with a growing hold, and the run goes on with the others.

The listeners' own handlers (:mod:`.xml`, :mod:`.pg_import`) build on this module; the
runner (:func:`changeflow.mcq.listeners.runner.build_handler`) picks one by type.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from changeflow.errors import ConfigError, TransientError
from changeflow.mcq.model import ChangeRec


class Handler(Protocol):
    """What a listener does with each change."""

    def handle(self, rec: ChangeRec) -> None:
        """Apply one change to the listener's system (idempotently)."""

    def close(self) -> None:
        """Release connections."""


class TargetUnavailableError(TransientError):
    """A listener's system (or the source it reads current state from) is unreachable."""


class PythonHandler:
    """A ``module:function`` called with each change record."""

    def __init__(self, spec: str):
        module, _, name = spec.partition(":")
        try:
            self.fn = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"listener handler {spec!r} cannot be imported: {exc}") from exc

    def handle(self, rec: ChangeRec) -> None:
        """Call the function."""
        self.fn(rec)

    def close(self) -> None:
        """Nothing to release."""


def fetch_rows(conn: Any, queries: dict[str, str], rec: ChangeRec) -> list[dict[str, Any]]:
    """The current state of a change's object: the query of its ``TNAME/Subtype`` (or of
    its ``TNAME``), with the entry's keys as named parameters.

    Raises:
        ConfigError: no query is configured for the entry's table.
    """
    from psycopg.rows import dict_row

    query = queries.get(f"{rec.tname}/{rec.subtype}") or queries.get(rec.tname or "")
    if query is None:
        raise ConfigError(f"no query for table {rec.tname!r} (subtype {rec.subtype!r}); "
                          f"configured: {', '.join(sorted(queries)) or 'none'}")
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(query, rec.keys())
        return list(cur.fetchall())
