"""Crash points: where the chaos suite kills a stage on purpose.

A stage calls :func:`point` at each boundary that matters for exactly-once delivery
(before and after each commit). Normally that is a no-op. When the environment names
the point in ``CHANGEFLOW_CRASH_AT`` (comma-separated, ``name`` or ``name:N`` for the
N-th time it is reached), the process dies there at once with ``os._exit`` (no
cleanup, no ``finally``, no flush), as ``kill -9`` would kill it; the chaos suite then
re-runs the stage and checks that nothing was lost or duplicated.

>>> point("propagation.after_destination_commit")  # not armed: nothing happens
"""

from __future__ import annotations

import os
import sys
from collections import Counter

EXIT_CRASHED = 137  # what a shell reports for a process killed by SIGKILL
_reached: Counter[str] = Counter()


def _armed() -> dict[str, int]:
    spec = os.environ.get("CHANGEFLOW_CRASH_AT", "")
    out: dict[str, int] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, nth = item.partition(":")
        out[name] = int(nth or 1)
    return out


def point(name: str) -> None:
    """Die here if the environment arms this crash point."""
    armed = _armed()
    if name not in armed:
        return
    _reached[name] += 1
    if _reached[name] == armed[name]:
        sys.stderr.write(f"changeflow: crash point {name} reached: exiting like kill -9\n")
        sys.stderr.flush()
        os._exit(EXIT_CRASHED)
