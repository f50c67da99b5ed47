"""Where a log call or a listener came from: the seed's "call stack".

The seed saves the PL/SQL call stack the first time a (table, subtype) pair is logged
and the first time a listener asks for changes, and again whenever ``stack_date`` is
cleared. Here the origin is the Python stack of the caller (changeflow's own frames
left out) headed by the host, process and command line; a PostgreSQL trigger records
``PG_CONTEXT`` and the statement instead (see ``mcq/pg_trigger.sql``).
"""

from __future__ import annotations

import getpass
import os
import socket
import sys
import traceback

_OWN = os.path.dirname(os.path.abspath(__file__))
_LIMIT = 2000  # the seed's varchar2(2000)


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return user


def call_stack(skip_own: bool = True, label: str | None = None) -> str:
    """The caller's origin as text, at most 2,000 characters (the innermost frames kept).

    >>> "pid" in call_stack()
    True
    """
    head = (f"{label + ' ' if label else ''}by {_who()}@{socket.gethostname()} "
            f"pid {os.getpid()}: {' '.join(sys.argv)[:300]}")
    frames = traceback.extract_stack()[:-1]
    if skip_own:
        frames = [f for f in frames if not os.path.abspath(f.filename).startswith(_OWN)]
    lines = [f'  File "{f.filename}", line {f.lineno}, in {f.name}' for f in frames[-15:]]
    text = "\n".join([head, *lines])
    if len(text) > _LIMIT:
        text = head + "\n  ...\n" + "\n".join(lines)[-(_LIMIT - len(head) - 8):]
    return text[:_LIMIT]
