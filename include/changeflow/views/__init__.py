"""Dictionary views: what Oracle shows in ``DBA_*`` and ``V$*`` views, from Python, the CLI
(``changeflow views``) and the Airflow UI page (SPEC §11).

Each view is a function ``view(cfg, component=None) -> list[dict]`` over a pipeline's
state stores; :data:`VIEWS` lists them with their Oracle counterpart and how to show
their columns. A view asked for a component the pipeline does not declare raises
:class:`~changeflow.views.common.UnknownComponentError`.

>>> sorted(VIEWS)[:3]
['applies', 'apply-errors', 'captures']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from changeflow.views import captures, flows, lag, messages, queues, rules, runs, targets
from changeflow.views.common import UnknownComponentError


@dataclass(frozen=True)
class View:
    """A view: its function, title, the Oracle view it stands for, its columns."""

    name: str
    fetch: Callable[..., list[dict[str, Any]]]
    title: str
    oracle: str
    columns: tuple[tuple[str, ...], ...]
    component: str  # what its optional argument names


VIEWS: dict[str, View] = {v.name: v for v in (
    View("captures", captures.captures, "Captures", "V$STREAMS_CAPTURE", captures.COLUMNS,
         "capture"),
    View("propagations", flows.propagations, "Propagations and schedules",
         "DBA_PROPAGATION, USER_QUEUE_SCHEDULES", flows.PROPAGATION_COLUMNS, "propagation"),
    View("applies", flows.applies, "Apply processes", "DBA_APPLY", flows.APPLY_COLUMNS,
         "apply"),
    View("apply-errors", flows.apply_errors, "Apply error queue", "DBA_APPLY_ERROR",
         flows.ERROR_COLUMNS, "apply"),
    View("queues", queues.queues, "Queues", "DBA_QUEUES, V$BUFFERED_QUEUES", queues.COLUMNS,
         "queue"),
    View("consumers", queues.consumers, "Queue consumers", "AQ$<queue table>_S",
         queues.CONSUMER_COLUMNS, "queue"),
    View("exceptions", queues.exceptions, "Exception queue", "AQ$<queue table> (EXCEPTION)",
         queues.EXCEPTION_COLUMNS, "queue"),
    View("rules", rules.rules, "Rules per client", "DBA_STREAMS_RULES", rules.COLUMNS,
         "client"),
    View("lag", lag.lag, "End-to-end lag (last hour)", "V$STREAMS_APPLY_COORDINATOR (latency)",
         lag.COLUMNS, "apply"),
    View("runs", runs.runs, "Recent runs", "DBA_SCHEDULER_JOB_RUN_DETAILS", runs.COLUMNS,
         "component"),
    View("user-queues", messages.user_queues, "User-message queues", "DBA_QUEUES, AQ$<queue>",
         messages.USER_QUEUE_COLUMNS, "queue"),
    View("targets", targets.targets, "Apply target tables (Iceberg)",
         "DBA_APPLY_INSTANTIATED_OBJECTS", targets.TABLE_COLUMNS, "apply"),
    View("target-snapshots", targets.snapshots, "Target snapshots and the passes that wrote "
         "them", "Iceberg <table>.snapshots", targets.SNAPSHOT_COLUMNS, "apply"),
    View("listeners", messages.listeners, "Meta Change Queue listeners", "MCQ status (seed 004)",
         messages.LISTENER_COLUMNS, "listener"),
)}


def get(name: str) -> View:
    """A view by name.

    Raises:
        UnknownComponentError: no such view (the message lists them).
    """
    try:
        return VIEWS[name]
    except KeyError:
        raise UnknownComponentError(f"no view named {name!r} (views: "
                                    f"{', '.join(sorted(VIEWS))})") from None


__all__ = ["VIEWS", "UnknownComponentError", "View", "get"]
