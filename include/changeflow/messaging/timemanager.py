"""The time manager, like Oracle's QMON: what happens to messages while nobody dequeues.

One pass (:func:`run_once`) over a state store:

1. delayed messages (and rolled-back ones waiting for ``retry_delay``) whose time
   has come become READY;
2. messages past their expiration move to the exception queue as EXPIRED;
3. transactions whose locks lapsed (``lock_timeout`` without a call from their
   session) or whose process on this host is gone are rolled back: their REMOVE
   dequeues come back with ``retry_count + 1`` (past ``max_retries``: EXPIRED);
4. consumed messages kept for ``retention_time`` are deleted once it has passed;
5. propagation and replay receipts older than ``receipt_days`` are forgotten.

Dequeues make due delayed messages visible and roll lapsed locks back on the queue
they read, and never return an expired message; moving expired messages to the
exception queue is the time manager's alone, so something must run it wherever
messages can expire (below).

How it runs (any of these; passes are idempotent and may overlap safely):

* ``changeflow serve`` runs it in a thread for the store it serves (``idap.time_manager``
  seconds between passes, 1 by default; 0 turns it off);
* under Airflow, the scheduler starts it as a process of its own for the pipelines it
  runs (:mod:`changeflow.airflow.qmon`; ``python -m changeflow.messaging.timemanager``);
* ``changeflow aq time-manager`` (a loop, every ``--interval`` seconds; ``--once``
  for one pass): for a service manager or a container;
* :func:`start_background` in any other long-running process;
* an Airflow task calling :func:`changeflow.messaging.declare.run_config` (see
  ``docs/messaging.md``).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from dataclasses import asdict, dataclass

from sqlalchemy import and_, delete, select
from sqlalchemy.engine import Connection

from changeflow.messaging import locks
from changeflow.messaging.constants import LIVE_STATES, State
from changeflow.state import StateStore, schema, utcnow
from changeflow.state import schema_messaging as S

log = logging.getLogger(__name__)
M = S.messages
Q = schema.queues


@dataclass
class Report:
    """What one pass did."""

    ready: int = 0
    expired: int = 0
    rolled_back: int = 0
    exceeded: int = 0
    purged: int = 0
    receipts: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counts by name."""
        return asdict(self)

    @property
    def changed(self) -> int:
        """How many messages changed state."""
        return self.ready + self.expired + self.rolled_back + self.purged


def has_work(store: StateStore, now: dt.datetime, receipt_days: float = 7.0) -> bool:
    """A read: whether a pass would change anything (so an idle store is never written).

    The write transaction of a pass takes SQLite's write lock; a service running the
    time manager every second would otherwise take it every second for nothing.
    """
    old = now - dt.timedelta(days=receipt_days)
    checks = [
        and_(M.c.state == State.WAITING.value, M.c.visible_at <= now),
        and_(M.c.expire_at.is_not(None), M.c.expire_at <= now,
             M.c.state.in_(LIVE_STATES)),
        M.c.lock_txn.is_not(None),
        M.c.state == State.PROCESSED.value,
    ]
    with store.read() as conn:
        for where in checks:
            if conn.execute(select(M.c.id).where(where).limit(1)).first() is not None:
                return True
        return conn.execute(select(S.received.c.msg_id).where(
            S.received.c.received_at < old).limit(1)).first() is not None


def run_once(store: StateStore, now: dt.datetime | None = None, *,
             receipt_days: float = 7.0, check_first: bool = False) -> Report:
    """One time-manager pass over a store (one database transaction).

    Args:
        check_first: read first whether there is anything to do, and write only then
            (what the loops do: :func:`run_forever`).
    """
    report = Report()
    if check_first and not has_work(store, now or utcnow(), receipt_days):
        return report
    with store.begin() as conn:
        now = now or utcnow()
        report.ready = locks.promote(conn, now)
        report.expired = locks.expire(conn, now)
        back = locks.reclaim(conn, now)
        report.rolled_back, report.exceeded = back["retried"], back["exceeded"]
        report.purged = _purge_retained(conn, now)
        report.receipts = int(conn.execute(delete(S.received).where(
            S.received.c.received_at < now - dt.timedelta(days=receipt_days))).rowcount or 0)
    if report.changed:
        log.info("time manager %s: %s", store.safe_url, report.as_dict())
    return report


def _purge_retained(conn: Connection, now: dt.datetime) -> int:
    total = 0
    queues = conn.execute(select(M.c.queue).where(M.c.state == State.PROCESSED.value)
                          .distinct()).all()
    for (queue,) in queues:
        row = conn.execute(select(Q.c.retention_time).where(Q.c.name == queue)).first()
        keep = float(row.retention_time) if row is not None else 0.0
        done = conn.execute(delete(M).where(and_(
            M.c.queue == queue, M.c.state == State.PROCESSED.value,
            M.c.state_time <= now - dt.timedelta(seconds=keep))))
        total += int(done.rowcount or 0)
    return total


def run_forever(stores: list[StateStore], interval: float = 1.0,
                stop: threading.Event | None = None) -> None:
    """Run passes every ``interval`` seconds until ``stop`` is set (or forever).

    A pass that fails (the store is unreachable) is logged and retried next time.
    """
    stop = stop or threading.Event()
    while not stop.is_set():
        for store in stores:
            try:
                run_once(store, check_first=True)
            except Exception:  # noqa: BLE001  (keep running: the next pass retries)
                log.exception("time manager pass on %s failed", store.safe_url)
        stop.wait(interval)


def start_background(stores: list[StateStore], interval: float = 1.0) -> threading.Event:
    """Run the time manager in a daemon thread; set the returned event to stop it."""
    stop = threading.Event()
    thread = threading.Thread(target=run_forever, args=(stores, interval, stop),
                              name="changeflow-aq-time-manager", daemon=True)
    thread.start()
    return stop


def stores_of(config_paths: list[str]) -> list[StateStore]:
    """The state stores of every site of the given pipeline files (each store once)."""
    from changeflow.config import load_config
    from changeflow.pipeline import resolve

    out: dict[str, StateStore] = {}
    for path in config_paths:
        pipe = resolve(load_config(path))
        for name in pipe.cfg.sites:
            store = pipe.site(name).store
            out.setdefault(store.url, store)
    return list(out.values())


def _gone(pid: int, parent: bool) -> bool:
    """Whether a watched process is gone (a parent that left us is gone, pid reused or not)."""
    import os

    if parent and os.getppid() != pid:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def main(argv: list[str] | None = None) -> int:
    """``python -m changeflow.messaging.timemanager --config P [--config P2] [--watch PID]``.

    Runs passes every ``--interval`` seconds over every site of the pipelines until
    SIGTERM, or until the process ``--watch`` names is gone (the Airflow scheduler that
    started it: :mod:`changeflow.airflow.qmon`).
    """
    import argparse
    import os
    import signal

    parser = argparse.ArgumentParser(prog="changeflow-time-manager")
    parser.add_argument("--config", action="append", required=True)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--watch", type=int, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stores = stores_of(args.config)
    log.info("time manager: every %g s on %d stores", args.interval, len(stores))
    worker = threading.Thread(target=run_forever, args=(stores, args.interval, stop),
                              daemon=True)
    worker.start()
    parent = args.watch is not None and os.getppid() == args.watch
    while not stop.wait(1.0):
        if args.watch is not None and _gone(args.watch, parent):
            log.info("time manager: process %d is gone; stopping", args.watch)
            stop.set()
    worker.join(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
