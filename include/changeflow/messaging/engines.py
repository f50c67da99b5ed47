"""The store handle sessions use: on PostgreSQL, a pool without a ping per checkout.

The state store's engine pings a pooled connection before every checkout
(``pool_pre_ping``): right for jobs that run now and then, but on PostgreSQL it is a
round trip more on every enqueue and dequeue, whose own statements are one or two round
trips. Sessions use a second engine on the same URL without the ping; a connection the
server dropped fails its operation with a transient
:class:`~changeflow.errors.StateStoreError`, SQLAlchemy discards the pool's stale
connections, and the next operation reconnects. SQLite stores are used as they are.
"""

from __future__ import annotations

import copy
import threading

from sqlalchemy import Engine, create_engine

from changeflow.state import StateStore

_lock = threading.Lock()
_engines: dict[str, Engine] = {}


def session_store(store: StateStore) -> StateStore:
    """The handle a session uses for ``store`` (the same store on SQLite)."""
    if store.dialect != "postgresql":
        return store
    with _lock:
        engine = _engines.get(store.url)
        if engine is None:
            engine = _engines[store.url] = create_engine(store.url, pool_size=10,
                                                         max_overflow=20, pool_pre_ping=False)
    fast = copy.copy(store)
    fast.engine = engine
    fast.reader = engine.execution_options()  # PostgreSQL reads need no option
    return fast


def dispose(url: str) -> None:
    """Close the pooled connections sessions hold to a store (e.g. before dropping it)."""
    with _lock:
        engine = _engines.pop(url, None)
    if engine is not None:
        engine.dispose()
