"""The Meta Change Queue from Python: one object, the seed's procedure names.

>>> from changeflow.state import StateStore
>>> mcq = MetaChangeQueue(StateStore("sqlite://"))
>>> mcq.add_table("PERSON", "Telephone", person_id="directory_telephone.person_id")
'PERSON/Telephone'
>>> mcq.add_listener("LDAP", frequency="5s")
'LDAP'
>>> mcq.add_interest("LDAP", "PERSON", "Telephone")
'LDAP -> PERSON/Telephone'
>>> mcq.log_update("PERSON", "Telephone", person_id=1001, aux_string="campus")
1
>>> rec = mcq.get_changes("LDAP")
>>> rec.change_type, rec.person_id, rec.aux_string
('C', 1001, 'campus')
>>> mcq.ack_change(rec)
>>> mcq.get_changes("LDAP").change_type is None
True
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from changeflow.mcq import registry
from changeflow.mcq.config import DEFAULT_MARK_INTERVAL, McqConfig
from changeflow.mcq.consume import Worker
from changeflow.mcq.log import Logger, make_change
from changeflow.mcq.model import ChangeRec, ChangeType, NotYourEntryError
from changeflow.mcq.monitor import Marker, default_alert_after

if TYPE_CHECKING:
    from changeflow.state import StateStore


class Batch:
    """Log calls that commit together (one transaction); see :meth:`MetaChangeQueue.batch`."""

    def __init__(self, logger: Logger, conn: Connection):
        self._logger = logger
        self._conn = conn
        self.entries = 0

    def log(self, change_type: str | ChangeType, tname: str, subtype: str | None = None, *,
            listener: str | None = None, **keys: Any) -> int:
        """Log one change inside the batch. Returns the entries made."""
        n = self._logger.write(self._conn, make_change(change_type, tname, subtype, **keys),
                               listener)
        self.entries += n
        return n

    def log_insert(self, tname: str, subtype: str | None = None, **keys: Any) -> int:
        """``log_insert`` inside the batch."""
        return self.log(ChangeType.INSERT, tname, subtype, **keys)

    def log_update(self, tname: str, subtype: str | None = None, **keys: Any) -> int:
        """``log_update`` inside the batch."""
        return self.log(ChangeType.CHANGE, tname, subtype, **keys)

    def log_delete(self, tname: str, subtype: str | None = None, **keys: Any) -> int:
        """``log_delete`` inside the batch."""
        return self.log(ChangeType.DELETE, tname, subtype, **keys)


class MetaChangeQueue:
    """The MCQ held in one state store.

    Args:
        store: the state store (SQLite or PostgreSQL) holding the ``meta_change_*`` tables.
        strict: a log call for an unknown table or subtype raises (else: warn and drop).
        mark_interval: seconds between two process-monitor marks of one worker.
    """

    def __init__(self, store: StateStore, *, strict: bool = True,
                 mark_interval: float = DEFAULT_MARK_INTERVAL):
        self.store = store
        self.strict = strict
        self.mark_interval = mark_interval
        self.logger = Logger(store, strict=strict)
        self._workers: dict[str, Worker] = {}

    @classmethod
    def from_config(cls, store: StateStore, cfg: McqConfig) -> MetaChangeQueue:
        """The MCQ of a configuration's ``mcq:`` section (its store already opened)."""
        from changeflow.mcq.config import seconds

        return cls(store, strict=cfg.strict, mark_interval=seconds(cfg.monitor.mark_interval))

    # -- registry ----------------------------------------------------------------------
    def add_table(self, tname: str, subtype: str | None = None, **kw: Any) -> str:
        """Register a table and subtype (see :func:`registry.add_table`)."""
        return registry.add_table(self.store, tname, subtype, **kw)

    def drop_table(self, tname: str, subtype: str | None = None, *, force: bool = False) -> str:
        """Unregister a table and subtype."""
        self.logger.forget()
        return registry.drop_table(self.store, tname, subtype, force=force)

    def add_listener(self, proc_name: str, **kw: Any) -> str:
        """Register a listener (see :func:`registry.add_listener`)."""
        return registry.add_listener(self.store, proc_name, **kw)

    def drop_listener(self, proc_name: str, *, force: bool = False) -> int:
        """Unregister a listener (see :func:`registry.drop_listener`)."""
        return registry.drop_listener(self.store, proc_name, force=force)

    def add_interest(self, proc_name: str, tname: str, subtype: str | None = None,
                     **kw: Any) -> str:
        """Make a listener interested in a table and subtype."""
        return registry.add_interest(self.store, proc_name, tname, subtype, **kw)

    def drop_interest(self, proc_name: str, tname: str, subtype: str | None = None) -> str:
        """Remove a listener's interest."""
        return registry.drop_interest(self.store, proc_name, tname, subtype)

    def sync(self, cfg: McqConfig) -> dict[str, int]:
        """Register what a configuration declares."""
        return registry.sync(self.store, cfg)

    # -- log calls ---------------------------------------------------------------------
    def log(self, change_type: str | ChangeType, tname: str, subtype: str | None = None, *,
            listener: str | None = None, bulk: bool = False, conn: Connection | None = None,
            **keys: Any) -> int:
        """Log a change: one entry per interested listener (or for ``listener`` only).

        Args:
            change_type: ``I``, ``C`` or ``D`` (or insert/update/delete).
            tname: the table (real or conceptual), e.g. ``PERSON``.
            subtype: what about it changed, e.g. ``Telephone``.
            listener: a manual entry for this listener only.
            bulk: queue it in the bulk lane.
            conn: log inside this transaction of the same store (commits with it).
            **keys: ``rrowid``, ``person_id``, ``pkey_string``, ``pkey_number``, ``aux_string``.

        Returns:
            the number of entries made (0: nobody is interested, or dropped).

        Raises:
            UnknownTableError: strict, and the pair is not registered.
            UnknownListenerError: ``listener`` is not registered.
            BadChangeError: a key of the wrong type or length.
        """
        change = make_change(change_type, tname, subtype, bulk=bulk, **keys)
        return self.logger.log(change, listener=listener, conn=conn)

    def log_insert(self, tname: str, subtype: str | None = None, **kw: Any) -> int:
        """Log an insert (change type ``I``)."""
        return self.log(ChangeType.INSERT, tname, subtype, **kw)

    def log_update(self, tname: str, subtype: str | None = None, **kw: Any) -> int:
        """Log an update (change type ``C``)."""
        return self.log(ChangeType.CHANGE, tname, subtype, **kw)

    def log_delete(self, tname: str, subtype: str | None = None, **kw: Any) -> int:
        """Log a deletion (change type ``D``)."""
        return self.log(ChangeType.DELETE, tname, subtype, **kw)

    @contextmanager
    def batch(self) -> Iterator[Batch]:
        """Many log calls in one transaction: all commit, or none (an error inside)."""
        with self.store.begin() as conn:
            yield Batch(self.logger, conn)

    # -- consuming -----------------------------------------------------------------------
    def worker(self, listener: str, worker_id: str | None = None) -> Worker:
        """A new worker of a listener (for several workers in one process)."""
        from changeflow.mcq.registry import require_listener

        with self.store.read() as conn:
            row = require_listener(conn, listener)
        after = row["alert_after"] or default_alert_after(row["frequency"], self.mark_interval)
        marker = Marker(self.store, listener, interval=self.mark_interval, listener=listener,
                        expect_every=max(row["frequency"], self.mark_interval),
                        alert_after=after)
        return Worker(self.store, listener, marker=marker, worker_id=worker_id)

    def _default(self, listener: str) -> Worker:
        w = self._workers.get(listener)
        if w is None:
            w = self._workers[listener] = self.worker(listener)
        return w

    def get_changes(self, proc_name: str, tname: str | None = None) -> ChangeRec:
        """The listener's next change, or a record whose ``change_type`` is ``None``."""
        return self._default(proc_name).get_changes(tname)

    def ack_change(self, rec: ChangeRec) -> None:
        """Mark a change this object got from :meth:`get_changes` as processed."""
        self._holder(rec, "ack").ack_change(rec)

    def put_back(self, rec: ChangeRec, hold_until: dt.datetime | None = None, *,
                 delay: float | None = None) -> dt.datetime | None:
        """Give a change back: ``retry_count`` rises, held until ``hold_until``."""
        return self._holder(rec, "put-back").put_back(rec, hold_until, delay=delay)

    def _holder(self, rec: ChangeRec, action: str) -> Worker:
        w = self._workers.get(rec.proc_name)
        if w is None:
            raise NotYourEntryError(
                f"{action} of entry {rec.entry_number}: this caller never got changes of "
                f"listener {rec.proc_name!r}; nothing was changed")
        return w
