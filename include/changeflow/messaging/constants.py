"""The vocabulary of Advanced Queuing: dequeue modes, navigation, visibility, states.

The names are Oracle's (``DBMS_AQ``), so that the IDAP service can pass the text of a
SOAP element straight through: ``DequeueMode("REMOVE")``, ``Navigation("NEXT_MESSAGE")``.
Parsing is case-insensitive and an unknown value is refused with the accepted ones.

>>> DequeueMode.parse("browse")
<DequeueMode.BROWSE: 'BROWSE'>
>>> Navigation.parse("next")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
changeflow.messaging.errors.MessagePropertyError: unknown navigation 'next': use FIRST_MESSAGE, ...
>>> wait_seconds("FOREVER"), wait_seconds("NO_WAIT"), wait_seconds(2)
(None, 0.0, 2.0)
"""

from __future__ import annotations

import enum
from typing import Self

from changeflow.messaging.errors import MessagePropertyError

#: ``wait_time`` values (seconds otherwise), and the default priority (Oracle's).
FOREVER = -1
NO_WAIT = 0
DEFAULT_PRIORITY = 1


class _Choice(enum.StrEnum):
    """An Oracle option parsed from text (case-insensitive)."""

    @classmethod
    def parse(cls, value: str | _Choice) -> Self:
        if isinstance(value, cls):
            return value
        text = str(value).strip().upper()
        for member in cls:
            if member.value == text:
                return member
        names = [m.value for m in cls]
        choices = ", ".join(names[:-1]) + f" or {names[-1]}"
        raise MessagePropertyError(f"unknown {cls._label()} {value!r}: use {choices}")

    @classmethod
    def _label(cls) -> str:
        return cls.__name__.lower()


class DequeueMode(_Choice):
    """``dequeue_mode``: BROWSE reads, LOCKED reads and locks, REMOVE consumes."""

    BROWSE = "BROWSE"
    LOCKED = "LOCKED"
    REMOVE = "REMOVE"
    REMOVE_NODATA = "REMOVE_NODATA"

    @classmethod
    def _label(cls) -> str:
        return "dequeue mode"


class Navigation(_Choice):
    """``navigation_mode``: which message a dequeue retrieves."""

    FIRST_MESSAGE = "FIRST_MESSAGE"
    NEXT_MESSAGE = "NEXT_MESSAGE"
    NEXT_TRANSACTION = "NEXT_TRANSACTION"

    @classmethod
    def _label(cls) -> str:
        return "navigation"


class Visibility(_Choice):
    """``visibility``: part of the session's transaction, or a transaction of its own."""

    ON_COMMIT = "ON_COMMIT"
    IMMEDIATE = "IMMEDIATE"


class DeliveryMode(_Choice):
    """``delivery_mode``: a persistent message (the queue table) or a buffered one (memory).

    At dequeue, PERSISTENT_OR_BUFFERED takes either kind.
    """

    PERSISTENT = "PERSISTENT"
    BUFFERED = "BUFFERED"
    PERSISTENT_OR_BUFFERED = "PERSISTENT_OR_BUFFERED"

    @classmethod
    def _label(cls) -> str:
        return "delivery mode"


class State(enum.StrEnum):
    """A message's state for one recipient (seed 003's ``message_state`` and more)."""

    READY = "READY"  # 0: ready to be processed
    WAITING = "WAITING"  # 1: its delay (or retry delay) has not passed yet
    PROCESSED = "PROCESSED"  # 2: consumed and retained (retention_time)
    EXPIRED = "EXPIRED"  # 3: moved to an exception queue (expired or past max_retries)
    UNDELIVERABLE = "UNDELIVERABLE"  # moved to an exception queue: cannot be delivered

    @property
    def code(self) -> int:
        """Oracle's numeric ``message_state`` (UNDELIVERABLE is reported as 3)."""
        return {"READY": 0, "WAITING": 1, "PROCESSED": 2}.get(self.value, 3)


#: States in which a message waits for its recipient (a queue's depth).
LIVE_STATES = (State.READY.value, State.WAITING.value)
#: States of messages held by an exception queue.
EXCEPTION_STATES = (State.EXPIRED.value, State.UNDELIVERABLE.value)
SORT_ORDERS = ("enq_time", "priority", "commit_time", "priority,enq_time",
               "priority,commit_time")
MESSAGE_GROUPING = ("none", "transactional")
PRIVILEGES = ("ENQUEUE", "DEQUEUE", "ALL")


def sort_order(value: str) -> str:
    """Normalise a ``sort_list`` (``'PRIORITY, ENQ_TIME'`` -> ``'priority,enq_time'``).

    >>> sort_order("PRIORITY, ENQ_TIME")
    'priority,enq_time'
    """
    text = ",".join(p.strip().lower() for p in str(value).split(","))
    if text not in SORT_ORDERS:
        raise MessagePropertyError(
            f"unknown sort order {value!r}: use one of {', '.join(SORT_ORDERS)}")
    return text


def wait_seconds(value: float | int | str | None) -> float | None:
    """A ``wait_time`` in seconds; ``None`` means FOREVER.

    Accepts FOREVER (-1, ``None``, ``"FOREVER"``), NO_WAIT (0, ``"NO_WAIT"``) or seconds.
    """
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip().upper()
        if text == "FOREVER":
            return None
        if text == "NO_WAIT":
            return 0.0
        try:
            value = float(text)
        except ValueError:
            raise MessagePropertyError(
                f"wait_time {value!r} must be FOREVER, NO_WAIT or seconds") from None
    seconds = float(value)
    if seconds == FOREVER:
        return None
    if seconds < 0 or seconds != seconds:
        raise MessagePropertyError(f"wait_time {value!r} must be FOREVER, NO_WAIT or >= 0")
    return seconds
