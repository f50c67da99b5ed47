"""Advanced Queuing for applications: typed user messages in the state store.

Applications enqueue and dequeue their own messages, with Oracle AQ's ordering,
visibility, expiration and security (seeds 001-003). The queue table *is* a table
of the state store (SQLite embedded, PostgreSQL by URL): a single enqueue or dequeue
is a few SQL statements, with no JVM. Spark stays the engine of bulk propagation and
apply of LCR batches; a propagation also carries the user messages addressed to its
destination (:mod:`.propagate`).

The public surface:

* :func:`connect` -> :class:`Session`: ``enqueue``, ``enqueue_array``, ``dequeue``,
  ``dequeue_array``, ``commit``, ``rollback``, ``register`` (:mod:`.session`);
* :mod:`.admin`: DBMS_AQADM (queue tables, queues, start/stop, types, subscribers,
  privileges, agents, the exception queue);
* :mod:`.timemanager`: the QMON-like time manager;
* :mod:`.views`: plain rows for the CLI and the Airflow UI;
* :mod:`.model`, :mod:`.payloads`, :mod:`.constants`, :mod:`.errors`: the vocabulary.

Names are imported lazily, so ``changeflow.config`` can import the configuration
models of this package without importing the rest.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "connect": "opening", "Session": "session", "Settings": "session",
    "Message": "model", "MessageProperties": "model", "Agent": "model", "Selector": "model",
    "JmsText": "payloads", "JmsBytes": "payloads", "JmsMap": "payloads",
    "JmsObject": "payloads",
    "DequeueMode": "constants", "Navigation": "constants", "Visibility": "constants",
    "DeliveryMode": "constants",
    "State": "constants", "FOREVER": "constants", "NO_WAIT": "constants",
    "MessagingConfig": "config",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'changeflow.messaging' has no attribute {name!r}")
    return getattr(importlib.import_module(f"changeflow.messaging.{module}"), name)
