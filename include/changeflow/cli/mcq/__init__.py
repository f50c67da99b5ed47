"""``changeflow mcq``: the Meta Change Queue's tables, listeners, log calls and status.

Registry: ``sync`` (from the configuration), ``table add|drop|list``, ``listener
add|drop|list``, ``interest add|drop|list``. Log calls: ``log insert|update|delete``.
Consuming from scripts: ``get``, ``ack``, ``put-back``. Status: ``status``,
``pending``, ``origins``, ``flush``, ``purge`` (:mod:`.consume`). Operations (triggers,
pump, refresh, listeners, monitor, DAGs, demo) are in :mod:`.ops`; the group and what
its commands share in :mod:`.group`; the registry and log calls in :mod:`.registry`.

The configuration is ``--config``, else ``$CHANGEFLOW_MCQ_CONFIG``, else
``$CHANGEFLOW_CONFIG``; its ``mcq:`` section says where the MCQ lives.
"""

from __future__ import annotations

from changeflow.cli.mcq import consume, ops, registry  # noqa: F401  (they add the commands)
from changeflow.cli.mcq.group import mcq

__all__ = ["mcq"]
