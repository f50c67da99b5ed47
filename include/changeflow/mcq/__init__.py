"""The Meta Change Queue (seed 004): change notifications for listeners.

Sources log *that* an object changed (``log_insert``/``log_update``/``log_delete``),
every interested listener gets an entry, and listeners fetch the object's current
state and update their own systems (``get_changes``/``ack_change``), in real time or
daily. See ``docs/mcq.md``.

The package is imported by :mod:`changeflow.config` (for its ``mcq:`` section), so
this module imports nothing eagerly; ``from changeflow.mcq import MetaChangeQueue``
loads it on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MetaChangeQueue"]


def __getattr__(name: str) -> Any:
    if name == "MetaChangeQueue":
        from changeflow.mcq.api import MetaChangeQueue

        return MetaChangeQueue
    raise AttributeError(name)
