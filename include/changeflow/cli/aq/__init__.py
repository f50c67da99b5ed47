"""``changeflow aq``: Advanced Queuing for applications (DBMS_AQADM and DBMS_AQ).

The group, its queue and message commands: :mod:`.queues`; subscribers, access
control, exception queues and the time manager: :mod:`.access`.
"""

from __future__ import annotations

from changeflow.cli.aq import access  # noqa: F401  (adds its commands)
from changeflow.cli.aq.queues import aq

__all__ = ["aq"]
