"""Messages, their properties and the agents that send and receive them (seed 003).

:class:`MessageProperties` is ``message_header`` of an IDAP request: priority (smaller
is more urgent), delay, expiration (counted from the end of the delay), correlation,
recipient list, exception queue and sender. :class:`Message` is what a dequeue
returns: the payload, those properties and what the queue knows about the message
(its stable id, enqueue time, state, attempts).

>>> Agent.parse("Priority@ws.ws_bookedorders_topic@db2")
Agent(name='PRIORITY', address='ws.ws_bookedorders_topic@db2', protocol=0)
>>> MessageProperties(delay=-1)
Traceback (most recent call last):
...
changeflow.messaging.errors.MessagePropertyError: delay must be >= 0 seconds, not -1
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass, field
from typing import Any

from changeflow.messaging.constants import DEFAULT_PRIORITY, State
from changeflow.messaging.errors import MessagePropertyError

_NAME = re.compile(r'^[A-Za-z_][A-Za-z0-9_$#.:-]*$|^"[^"]+"$')
MAX_CORRELATION = 128


def agent_name(name: str | None) -> str:
    """An agent, user or consumer name as stored: unquoted names fold to upper case.

    >>> agent_name("priority"), agent_name('"MixedCase"'), agent_name(None)
    ('PRIORITY', 'MixedCase', '')
    """
    if name is None:
        return ""
    text = str(name).strip()
    if not text:
        return ""
    if not _NAME.match(text):
        raise MessagePropertyError(f"invalid agent name {name!r}")
    return text[1:-1] if text.startswith('"') else text.upper()


def queue_name(name: str) -> str:
    """A queue reference as stored (``owner.name``, lower case; a site suffix kept).

    >>> queue_name("HR.Orders@site1")
    'hr.orders@site1'
    """
    text = str(name).strip()
    base, _, site = text.partition("@")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$#]*\.[A-Za-z_][A-Za-z0-9_$#]*", base):
        raise MessagePropertyError(f"queue name {name!r} must be owner.name")
    return base.lower() + (f"@{site}" if site else "")


@dataclass(frozen=True)
class Agent:
    """A sender or recipient: an agent name and, for a remote one, ``owner.queue@site``.

    ``name`` may be empty: a remote agent without a name is the remote queue (topic)
    itself, whose own subscribers then get the message (seed 002, case 1).
    """

    name: str = ""
    address: str = ""
    protocol: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", agent_name(self.name))
        addr = (self.address or "").strip()
        object.__setattr__(self, "address", queue_name(addr) if addr else "")
        if not self.name and not self.address:
            raise MessagePropertyError("an agent needs a name or an address")

    @classmethod
    def parse(cls, value: str | Agent | tuple[str | None, str | None]) -> Agent:
        """An agent from ``NAME``, ``NAME@owner.queue@site`` or ``owner.queue@site``."""
        if isinstance(value, Agent):
            return value
        if isinstance(value, tuple):
            return cls(value[0] or "", value[1] or "")
        text = str(value).strip()
        if "@" in text:
            head, _, tail = text.partition("@")
            if "." in head:  # owner.queue@site: the remote queue itself
                return cls("", text)
            return cls(head, tail)
        return cls(text)

    def __str__(self) -> str:
        return f"{self.name}@{self.address}" if self.address else self.name


def _seconds(name: str, value: float | None, *, allow_none: bool) -> float | None:
    if value is None:
        if allow_none:
            return None
        raise MessagePropertyError(f"{name} must be a number of seconds")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise MessagePropertyError(f"{name} must be a number of seconds, not {value!r}") from None
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise MessagePropertyError(f"{name} must be >= 0 seconds, not {value!r}")
    return seconds


@dataclass(frozen=True)
class MessageProperties:
    """The properties an enqueue sets (IDAP ``message_header``).

    Args:
        priority: any integer; smaller is more urgent (default 1).
        delay: seconds before the message can be dequeued (0: at once).
        expiration: seconds the message stays available after its delay; ``None``
            never expires. An expired message moves to the exception queue (EXPIRED).
        correlation: an application identifier, for selectors (at most 128 characters).
        recipients: overrides the queue's subscribers (multi-consumer queues only).
        exception_queue: where the message goes when it expires or exceeds
            ``max_retries`` (default: the queue table's ``aq$_<table>_e``).
        sender: who enqueued it (on secure queues, an agent of the session's user).
        msg_id: a stable id chosen by the producer: enqueuing the same id into the
            same queue again is recognised and does nothing (a replay). Default: new.
    """

    priority: int = DEFAULT_PRIORITY
    delay: float = 0.0
    expiration: float | None = None
    correlation: str | None = None
    recipients: tuple[Agent, ...] = ()
    exception_queue: str | None = None
    sender: Agent | None = None
    msg_id: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            try:
                value = int(str(self.priority))
            except ValueError:
                raise MessagePropertyError(
                    f"priority must be an integer, not {self.priority!r}") from None
            object.__setattr__(self, "priority", value)
        object.__setattr__(self, "delay", _seconds("delay", self.delay, allow_none=False))
        object.__setattr__(self, "expiration",
                           _seconds("expiration", self.expiration, allow_none=True))
        if self.correlation is not None:
            text = str(self.correlation)
            if len(text) > MAX_CORRELATION:
                raise MessagePropertyError(
                    f"correlation is {len(text)} characters; at most {MAX_CORRELATION}")
            object.__setattr__(self, "correlation", text)
        object.__setattr__(self, "recipients",
                           tuple(Agent.parse(r) for r in (self.recipients or ())))
        if self.sender is not None and not isinstance(self.sender, Agent):
            object.__setattr__(self, "sender", Agent.parse(self.sender))
        if self.exception_queue:
            object.__setattr__(self, "exception_queue", queue_name(self.exception_queue))
        if self.msg_id is not None:
            text = str(self.msg_id).strip()
            if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", text):
                raise MessagePropertyError(
                    f"msg_id {self.msg_id!r} must be 1-64 letters, digits or _.:-")
            object.__setattr__(self, "msg_id", text)

    @classmethod
    def of(cls, value: MessageProperties | dict[str, Any] | None = None,
           **overrides: Any) -> MessageProperties:
        """Properties from an instance, a dict (IDAP/CLI/JSON) or keywords.

        Raises:
            MessagePropertyError: an unknown key or an invalid value.
        """
        if isinstance(value, MessageProperties) and not overrides:
            return value
        if value is None and all(v is None for v in overrides.values()):
            return _DEFAULT_PROPERTIES
        data: dict[str, Any] = {}
        if isinstance(value, MessageProperties):
            data = {f: getattr(value, f) for f in cls.__dataclass_fields__}
        elif value:
            data = dict(value)
        data.update({k: v for k, v in overrides.items() if v is not None})
        if "correlation_id" in data:
            data["correlation"] = data.pop("correlation_id")
        if "recipient_list" in data:
            data["recipients"] = data.pop("recipient_list")
        if "sender_id" in data:
            data["sender"] = data.pop("sender_id")
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise MessagePropertyError(
                f"unknown message properties {sorted(unknown)}; known: "
                + ", ".join(cls.__dataclass_fields__))
        if isinstance(data.get("recipients"), (str, Agent)):
            data["recipients"] = (data["recipients"],)
        return cls(**data)


_DEFAULT_PROPERTIES = MessageProperties()


@dataclass(frozen=True)
class Selector:
    """Which message a dequeue wants: by correlation, by message id, or a condition.

    A condition is written over message properties (``priority``, ``corrid``,
    ``enq_time``, ``retry_count``, JMS headers such as ``JMSPriority``) and payload
    fields (``tab.user_data.region``, ``:msg.region`` or, for JMS properties, the bare
    name), e.g. ``priority < 3 AND tab.user_data.region = 'WEST'``. ``correlation``
    accepts ``%`` and ``_`` wildcards, as Oracle's does.
    """

    correlation: str | None = None
    msg_id: str | None = None
    condition: str | None = None

    @classmethod
    def of(cls, value: Selector | str | dict[str, Any] | None) -> Selector | None:
        """A selector from an instance, a condition text or a dict (IDAP)."""
        if value is None or isinstance(value, Selector):
            return value
        if isinstance(value, str):
            return cls(condition=value) if value.strip() else None
        data = dict(value)
        if "message_id" in data:
            data["msg_id"] = data.pop("message_id")
        unknown = set(data) - {"correlation", "msg_id", "condition"}
        if unknown:
            raise MessagePropertyError(f"unknown selector keys {sorted(unknown)}")
        return cls(**data) if any(data.values()) else None


@dataclass(frozen=True)
class Message:
    """A dequeued (or browsed) message.

    ``payload`` is typed after the message's type: ``bytes`` for RAW, a ``dict`` of
    field values for object types and ANYDATA objects, a :mod:`JMS class
    <changeflow.messaging.payloads>` for JMS types, a ``dict`` of LCR fields for
    ``SYS.LCR$_ROW_RECORD``. It is ``None`` for REMOVE_NODATA.
    """

    msg_id: str
    queue: str
    consumer: str
    type_name: str
    payload: Any
    priority: int
    delay: float
    expiration: float | None
    correlation: str | None
    sender: Agent | None
    recipients: tuple[Agent, ...]
    exception_queue: str | None
    enq_time: dt.datetime
    state: State
    attempts: int
    original_queue: str | None = None
    reason: str | None = None
    txn_id: str = ""
    size: int = 0
    delivery_mode: str = "PERSISTENT"
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def properties(self) -> MessageProperties:
        """The properties the message was enqueued with (for re-enqueueing it)."""
        return MessageProperties(priority=self.priority, delay=self.delay,
                                 expiration=self.expiration, correlation=self.correlation,
                                 recipients=self.recipients,
                                 exception_queue=self.exception_queue, sender=self.sender)

    def as_dict(self) -> dict[str, Any]:
        """A plain dict (JSON-able except the payload's own values)."""
        return {
            "msg_id": self.msg_id, "queue": self.queue, "consumer": self.consumer,
            "type": self.type_name, "payload": self.payload, "priority": self.priority,
            "delay": self.delay, "expiration": self.expiration,
            "correlation": self.correlation,
            "sender": str(self.sender) if self.sender else None,
            "recipients": [str(r) for r in self.recipients],
            "exception_queue": self.exception_queue, "enq_time": self.enq_time,
            "state": self.state.value, "message_state": self.state.code,
            "attempts": self.attempts, "original_queue": self.original_queue,
            "reason": self.reason, "delivery_mode": self.delivery_mode,
        }
