"""A listener's handler: what it does with one change.

A handler has ``handle(rec)`` and ``close()``. ``handle`` returns when the change is
applied to the listener's system (the runner then acknowledges it) and raises when it
is not: a :class:`~changeflow.errors.TransientError` (the system is unreachable) ends
the run, so the changes wait in the queue for the next one; any other error puts that
one change back with a growing hold, and the run goes on with the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol

from changeflow.errors import ConfigError, TransientError
from changeflow.mcq.model import ChangeRec

if TYPE_CHECKING:
    from changeflow.config import PipelineConfig
    from changeflow.mcq.config import McqListener


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


def build_handler(cfg: PipelineConfig, listener: McqListener) -> Handler:
    """The handler a listener's configuration describes.

    Raises:
        ConfigError: the listener has no handler, or a source cannot be resolved.
    """
    from changeflow.mcq.store import resolve_path, source_url

    h = listener.handler
    if h is None:
        raise ConfigError(f"listener {listener.proc_name!r} has no handler (it is run by "
                          "its own program through get_changes/ack_change)",
                          file=cfg.source_path, key="mcq.listeners")
    if h.type == "xml":
        from changeflow.mcq.listeners.xml import XmlFeed

        return XmlFeed(listener.proc_name,
                       directory=resolve_path(cfg, h.directory) if h.directory else None,
                       url=h.url, source_url=source_url(cfg, h.source) if h.source else None,
                       queries=dict(h.queries))
    if h.type == "pg_import":
        from changeflow.mcq.listeners.pg_import import PgImport

        return PgImport(source_url(cfg, h.source), source_url(cfg, h.target), h.import_table,
                        dict(h.queries), key_columns=dict(h.key_columns),
                        on_missing=h.on_missing)
    return PythonHandler(h.callable)


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
