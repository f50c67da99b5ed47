"""What every administrative call shares: the site it acts on, and telling sessions.

A site is given as a :class:`~changeflow.state.StateStore`, a
:class:`~changeflow.queues.catalog.QueueCatalog` or a site runtime. A call that
changes the dictionary is wrapped in :func:`changes`, which raises the store's
dictionary version (:func:`changeflow.messaging.dictionary.changed`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from changeflow.messaging import dictionary as D
from changeflow.queues.catalog import QueueCatalog
from changeflow.state import StateStore

Target = StateStore | QueueCatalog | Any
F = TypeVar("F", bound=Callable[..., Any])


def changes(fn: F) -> F:
    """Tell every process's sessions that the dictionary changed (even when ``fn`` fails).

    The store's dictionary version is raised after the change committed, so an
    enqueue or dequeue that starts after the call returns, in any process, sees it.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            D.changed(store_of(args[0]) if args else None)

    return wrapper  # type: ignore[return-value]


def catalog(target: Target) -> QueueCatalog:
    """The queue catalog of a site given as a store, a catalog or a site runtime.

    A bare store gets a catalog without a staging root: its queues hold user messages
    (in the store) and no Parquet batches.
    """
    if isinstance(target, QueueCatalog):
        return target
    if isinstance(target, StateStore):
        return QueueCatalog(target, "")
    found = getattr(target, "catalog", None)
    if isinstance(found, QueueCatalog):
        return found
    raise TypeError(f"not a site: {target!r}")


def store_of(target: Target) -> StateStore:
    """The state store of a site given as a store, a catalog or a site runtime."""
    return catalog(target).store
