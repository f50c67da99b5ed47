"""The change record (seed Table 1 and Table 7), change types and the MCQ's errors.

A change says only *that* an object changed, never what changed: a listener fetches
the object's current state and must be able to apply the same change twice.

>>> ChangeType.parse("update"), ChangeType.parse("D")
(<ChangeType.CHANGE: 'C'>, <ChangeType.DELETE: 'D'>)
>>> ChangeType.parse("X")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
changeflow.mcq.model.BadChangeError: unknown change type 'X': use I (insert), ...
>>> end_of_queue("LDAP").is_end
True
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import asdict, dataclass, replace
from typing import Any

from changeflow.errors import SecurityError, TerminalError


class McqError(TerminalError):
    """A Meta Change Queue call was refused; nothing was changed."""


class UnknownListenerError(McqError):
    """A listener name is not registered in ``meta_change_listeners``."""


class UnknownTableError(McqError):
    """A (table, subtype) pair is not registered in ``meta_change_tables``."""


class NotYourEntryError(McqError):
    """An ack or put-back of an entry this worker does not hold (another listener's or
    another worker's, or its claim expired and it was handed out again)."""


class AlreadyAckedError(McqError):
    """An ack or put-back of an entry that was already processed."""


class RoleRequiredError(McqError, SecurityError):
    """The database user consuming a listener lacks the listener's role (seed Table 4)."""


class BadChangeError(McqError):
    """A log call, put-back or refresh with invalid values (a hold in the past, ...)."""


#: When an entry got but not acknowledged is handed out again (a listener's ``redeliver``).
REDELIVER = ("immediate", "claim_timeout")


def redelivery(redeliver: str | None, workers: int) -> str:
    """A listener's redelivery: as set, else ``immediate`` for one worker.

    >>> redelivery(None, 1), redelivery(None, 4), redelivery("immediate", 4)
    ('immediate', 'claim_timeout', 'immediate')
    """
    return redeliver or ("immediate" if workers <= 1 else "claim_timeout")


class ChangeType(enum.StrEnum):
    """The seed's change types: I (insert), C (change, i.e. update), D (deletion)."""

    INSERT = "I"
    CHANGE = "C"
    DELETE = "D"

    @classmethod
    def parse(cls, value: str | ChangeType) -> ChangeType:
        """A change type from ``I``/``C``/``D`` or ``insert``/``update``/``change``/``delete``.

        Raises:
            BadChangeError: anything else.
        """
        if isinstance(value, ChangeType):
            return value
        key = str(value).strip().upper()
        aliases = {"I": cls.INSERT, "INSERT": cls.INSERT, "C": cls.CHANGE, "U": cls.CHANGE,
                   "UPDATE": cls.CHANGE, "CHANGE": cls.CHANGE, "D": cls.DELETE,
                   "DELETE": cls.DELETE}
        if key not in aliases:
            raise BadChangeError(f"unknown change type {value!r}: use I (insert), "
                                 "C (change/update) or D (delete)")
        return aliases[key]


#: The lanes of a listener's queue: real-time entries flow before bulk ones.
REALTIME, BULK = 0, 1


@dataclass(frozen=True)
class ChangeRec:
    """One change entry for one listener, as ``get_changes`` returns it.

    ``change_type`` is ``None`` at the end of the queue (the seed's convention: loop
    until the change type is null). ``claimed_by`` identifies the worker that got it;
    ``ack_change`` and ``put_back`` check it.
    """

    proc_name: str
    tname: str | None = None
    subtype: str | None = None
    rrowid: str | None = None
    change_type: str | None = None
    person_id: int | None = None
    pkey_string: str | None = None
    pkey_number: int | None = None
    aux_string: str | None = None
    entry_date: dt.datetime | None = None
    entry_number: int | None = None
    hold_until: dt.datetime | None = None
    retry_count: int = 0
    queue_name: str | None = None
    proc_date: dt.datetime | None = None
    bulk: bool = False
    claimed_by: str | None = None

    @property
    def is_end(self) -> bool:
        """Whether this is the end-of-queue record (nothing pending)."""
        return self.change_type is None

    def keys(self) -> dict[str, Any]:
        """The entry's keys, as named parameters of a listener's query."""
        return {"tname": self.tname, "subtype": self.subtype, "rrowid": self.rrowid,
                "person_id": self.person_id, "pkey_string": self.pkey_string,
                "pkey_number": self.pkey_number, "aux_string": self.aux_string,
                "change_type": self.change_type, "entry_number": self.entry_number}

    def as_dict(self) -> dict[str, Any]:
        """Every field, for JSON output."""
        return asdict(self)

    def with_(self, **changes: Any) -> ChangeRec:
        """A copy with some fields changed."""
        return replace(self, **changes)


def end_of_queue(proc_name: str) -> ChangeRec:
    """The record ``get_changes`` returns when nothing is pending."""
    return ChangeRec(proc_name=proc_name)


def aware(t: dt.datetime | None) -> dt.datetime | None:
    """A stored time as a timezone-aware UTC time (SQLite returns naive ones)."""
    if t is None:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def rec_from_row(m: Any) -> ChangeRec:
    """A :class:`ChangeRec` from a ``meta_change_queue`` row mapping."""
    return ChangeRec(
        proc_name=m["proc_name"], tname=m["tname"], subtype=m["subtype"] or None,
        rrowid=m["rrowid"], change_type=m["change_type"], person_id=m["person_id"],
        pkey_string=m["pkey_string"], pkey_number=m["pkey_number"],
        aux_string=m["aux_string"], entry_date=aware(m["entry_date"]),
        entry_number=m["entry_number"], hold_until=aware(m["hold_until"]),
        retry_count=m["retry_count"], queue_name=m["queue_name"],
        proc_date=aware(m["proc_date"]), bulk=bool(m["lane"]), claimed_by=m["claimed_by"])
