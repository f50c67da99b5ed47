"""Leases: one active run per component, whoever starts it.

A capture, propagation, apply or window run holds the lease of its component
(``propagation:<name>``, ...) in the state store of the component's home site while
it works: a row with the owner (host, pid, entry point), a heartbeat and an expiry.
A second run of the same component waits for the lease (up to ``wait`` seconds) and
then gives up with :class:`~changeflow.errors.LeaseHeldError`, which names the
holder. A holder that crashed stops renewing its heartbeat; once its lease expires
the next run takes it over and recovers as usual. A holder on the same host whose
process is gone (killed) is taken over at once.

Every acquisition raises the lease's *token*. A run checks its token inside the
transaction that commits its work (:meth:`Lease.check`): if the lease was taken over
meanwhile (the holder stalled past its expiry), the commit fails with
:class:`~changeflow.errors.LeaseLostError` instead of racing the new holder.

>>> from changeflow.state import StateStore
>>> store = StateStore("sqlite://")
>>> with Lease(store, "propagation:p1", owner="doctest") as lease:
...     holder(store, "propagation:p1")["owner"]
'doctest'
>>> holder(store, "propagation:p1") is None
True
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import time
import uuid
from types import TracebackType
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from changeflow.errors import LeaseHeldError, LeaseLostError, StateStoreError
from changeflow.state import StateStore, schema
from changeflow.state.schema import utcnow

log = logging.getLogger(__name__)
L = schema.leases

#: Seconds a lease lives without a heartbeat; the heartbeat renews it every third.
DEFAULT_TTL = 60.0


def default_owner(entry_point: str | None = None) -> str:
    """``host:pid:entry point:run``; the run suffix tells two runs of one process apart."""
    where = entry_point or os.environ.get("CHANGEFLOW_ENTRY_POINT") or (
        "airflow" if os.environ.get("AIRFLOW_CTX_DAG_ID") else "python")
    return f"{socket.gethostname()}:{os.getpid()}:{where}:{uuid.uuid4().hex[:8]}"


def holder(store: StateStore, component: str) -> dict[str, Any] | None:
    """The live holder of a component's lease, or ``None`` (free or expired)."""
    with store.read() as conn:
        row = conn.execute(select(L).where(L.c.component == component)).first()
    if row is None:
        return None
    m = dict(row._mapping)
    expires = _aware(m["expires_at"])
    return m if expires > utcnow() else None


def _dead_local(owner: str) -> bool:
    """Whether a holder ran on this host in a process that no longer exists.

    Such a holder was killed (``kill -9``, OOM): its lease need not run out first.

    >>> _dead_local(f"{socket.gethostname()}:{os.getpid()}:python:ab12cd34")
    False
    """
    host, _, rest = owner.partition(":")
    pid_text = rest.split(":", 1)[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, owned by another user
        return False
    return False


def _aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


class Lease:
    """The lease of one component, held for a ``with`` block.

    Args:
        store: the state store of the component's home site.
        component: ``<kind>:<name>``.
        owner: who holds it (default: host, pid and entry point).
        ttl: seconds it lives without a heartbeat.
        wait: seconds to wait for a busy lease before giving up.
    """

    def __init__(self, store: StateStore, component: str, *, owner: str | None = None,
                 ttl: float = DEFAULT_TTL, wait: float = 0.0):
        self.store = store
        self.component = component
        self.owner = owner or default_owner()
        self.ttl = ttl
        self.wait = wait
        self.token: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = False

    # -- acquisition -----------------------------------------------------------------
    def _try(self) -> dict[str, Any] | None:
        """Take the lease if it is free or expired. Returns the live holder otherwise."""
        now = utcnow()
        expires = now + dt.timedelta(seconds=self.ttl)
        try:
            with self.store.begin() as conn:
                row = conn.execute(
                    select(L).where(L.c.component == self.component).with_for_update()).first()
                if row is None:
                    conn.execute(L.insert().values(
                        component=self.component, owner=self.owner, token=1, acquired_at=now,
                        heartbeat_at=now, expires_at=expires))
                    self.token = 1
                    return None
                m = row._mapping
                alive = _aware(m["expires_at"]) > now and not _dead_local(m["owner"])
                if alive and m["owner"] != self.owner:
                    return dict(m)
                token = int(m["token"]) + 1
                conn.execute(update(L).where(L.c.component == self.component).values(
                    owner=self.owner, token=token, acquired_at=now, heartbeat_at=now,
                    expires_at=expires))
                if m["owner"] != self.owner:
                    log.warning("lease %s: taking over from %s (expired %s, or its process "
                                "is gone)", self.component, m["owner"], m["expires_at"])
                self.token = token
                return None
        except IntegrityError:  # another process inserted the row first
            return {"owner": "(another process)", "expires_at": expires}

    def acquire(self) -> Lease:
        """Take the lease, waiting up to ``wait`` seconds; start the heartbeat.

        Raises:
            LeaseHeldError: another live run holds it.
        """
        deadline = time.monotonic() + self.wait
        while True:
            busy = self._try()
            if busy is None:
                break
            if time.monotonic() >= deadline:
                raise LeaseHeldError(
                    f"{self.component} is already running in {busy['owner']} (lease until "
                    f"{busy['expires_at']}); this run did nothing. Try again when it ends, "
                    f"or wait for the lease to expire if that process died.")
            time.sleep(min(0.5, max(0.05, deadline - time.monotonic())))
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{self.component}",
                                        daemon=True)
        self._thread.start()
        return self

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                if not self.renew():
                    self.lost = True
                    log.error("lease %s lost: another run took it over", self.component)
                    return
            except StateStoreError as exc:  # the next beat may reach the store again
                log.warning("lease %s: heartbeat failed: %s", self.component, exc)

    def renew(self) -> bool:
        """Push the expiry forward. Returns False when the lease is no longer ours."""
        now = utcnow()
        with self.store.begin() as conn:
            n = conn.execute(update(L).where(
                L.c.component == self.component, L.c.token == self.token).values(
                heartbeat_at=now, expires_at=now + dt.timedelta(seconds=self.ttl))).rowcount
        return bool(n)

    def check(self, conn: Connection | None = None) -> None:
        """Fail unless this run still holds the lease (call inside a commit).

        Raises:
            LeaseLostError: the lease expired and another run took it.
        """
        stmt = select(L.c.token).where(L.c.component == self.component)
        if conn is None:
            with self.store.read() as c:
                token = c.execute(stmt).scalar_one_or_none()
        else:
            token = conn.execute(stmt).scalar_one_or_none()
        if self.lost or token != self.token:
            raise LeaseLostError(
                f"{self.component}: this run's lease was taken over by another run; "
                f"stopping before commit (nothing of this run was committed)")

    def release(self) -> None:
        """Stop the heartbeat and free the lease (if it is still ours)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.token is None:
            return
        try:
            with self.store.begin() as conn:
                conn.execute(delete(L).where(L.c.component == self.component,
                                             L.c.token == self.token))
        except StateStoreError as exc:  # it expires by itself
            log.warning("lease %s: release failed (%s); it expires in %.0f s",
                        self.component, exc, self.ttl)
        self.token = None

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()
