"""PostgreSQL connections for captures and applies: where the URL comes from, and retries.

A connection is never written in a pipeline file. It is named there either as an
environment variable holding a libpq URL (``url_env``) or as an Airflow connection id
(``conn_id``), and resolved only when a job runs. An unreachable server is a
*transient* error, retried here with exponential backoff before it is raised.

A log sequence number is an LCR's commit position as a 64-bit integer (the capture
writes it, the PostgreSQL apply records it):

>>> lsn_to_int("0/152F978")
22215032
>>> int_to_lsn(22215032)
'0/152F978'
>>> lsn_to_int("16/B374D848"), int_to_lsn(lsn_to_int("16/B374D848"))
(97500059720, '16/B374D848')
"""

from __future__ import annotations

import logging
import os
import re
import time
from typing import TYPE_CHECKING, Any

from changeflow.errors import ConfigError, TransientError

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)


def lsn_to_int(lsn: str) -> int:
    """A PostgreSQL LSN (``X/Y`` in hex) as a 64-bit integer, the LCR commit position."""
    hi, _, lo = lsn.partition("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def int_to_lsn(value: int) -> str:
    """The inverse of :func:`lsn_to_int`."""
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


class SourceUnreachableError(TransientError):
    """A PostgreSQL server could not be reached after the configured retries."""


def resolve_url(spec: Any) -> str:
    """The libpq URL a source or target spec names (``url_env`` or ``conn_id``).

    Raises:
        ConfigError: the environment variable is unset, or Airflow is not available.
    """
    if getattr(spec, "url_env", None):
        url = os.environ.get(spec.url_env)
        if not url:
            raise ConfigError(f"environment variable {spec.url_env} (url_env) is not set")
        return url
    import importlib

    for module in ("airflow.sdk", "airflow.hooks.base"):  # Airflow 3, then Airflow 2
        try:
            hook = importlib.import_module(module).BaseHook
            break
        except (ImportError, AttributeError):
            continue
    else:
        raise ConfigError(f"conn_id {spec.conn_id!r} needs Airflow, which is not installed")
    return str(hook.get_connection(spec.conn_id).get_uri())


def redact(url: str) -> str:
    """A URL safe to log: any password replaced by ``***``.

    >>> redact("postgresql://app:s3cret@db:5432/x")
    'postgresql://app:***@db:5432/x'
    """
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def connect(
    url: str,
    *,
    application_name: str,
    attempts: int = 5,
    backoff: float = 1.0,
    autocommit: bool = True,
) -> psycopg.Connection[Any]:
    """Open a connection, retrying an unreachable server with exponential backoff.

    Args:
        url: a libpq URL or conninfo string.
        application_name: shown in ``pg_stat_activity``.
        attempts: how many times to try before giving up.
        backoff: the first wait in seconds; it doubles after each failure.
        autocommit: open the connection in autocommit mode.

    Raises:
        SourceUnreachableError: every attempt failed (transient: a later run may succeed).
    """
    import psycopg

    wait = backoff
    last: Exception | None = None
    for attempt in range(1, attempts + 1):
        try:
            conn = psycopg.connect(url, autocommit=autocommit, connect_timeout=10,
                                   application_name=application_name)
            conn.execute("SET TimeZone = 'UTC'")
            conn.execute("SET DateStyle = 'ISO, YMD'")
            return conn
        except psycopg.OperationalError as exc:
            last = exc
            log.warning("postgres %s unreachable (attempt %s/%s): %s", redact(url), attempt,
                        attempts, str(exc).strip().splitlines()[0] if str(exc) else exc)
            if attempt < attempts:
                time.sleep(wait)
                wait *= 2
    first = (str(last).strip().splitlines() or [type(last).__name__])[0]
    raise SourceUnreachableError(
        f"PostgreSQL at {redact(url)} is unreachable after {attempts} attempts: {first}"
    )
