"""The IDAP requests as plain values: what a parsed SOAP body asks the service to do.

Element names and defaults are seed 003's: ``producer_options`` (``destination`` with
``lookup_type`` DATABASE, ``visibility`` ON_COMMIT, ``transformation``),
``message_set`` of ``message`` (``message_header``, ``message_payload``),
``consumer_options`` (``destination``, ``consumer_name``, ``wait_time``, ``selector``,
``visibility`` ON_COMMIT, ``dequeue_mode`` REMOVE, ``navigation_mode`` NEXT_MESSAGE,
``transformation``), ``register_options`` (``destination``, ``consumer_name``,
``notify_url``), and an optional ``<AQXmlCommit/>`` inside a send, publish or receive.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from xml.etree.ElementTree import Element

SEND, PUBLISH, RECEIVE, REGISTER = "AQXmlSend", "AQXmlPublish", "AQXmlReceive", "AQXmlRegister"
COMMIT, ROLLBACK = "AQXmlCommit", "AQXmlRollback"
OPERATIONS = (SEND, PUBLISH, RECEIVE, REGISTER, COMMIT, ROLLBACK)
#: The response element of each request.
RESPONSES = {op: f"{op}Response" for op in OPERATIONS}


@dataclass(frozen=True)
class Destination:
    """A queue or topic: ``schema.queue_name`` (``lookup_type`` DATABASE, the default)."""

    name: str
    lookup_type: str = "DATABASE"


@dataclass(frozen=True)
class OutMessage:
    """One message of a send or publish: its header (MessageProperties keys) and payload.

    ``payload`` is the element inside ``message_payload``; it is decoded against the
    destination's payload type when the request runs.
    """

    number: int
    properties: dict[str, Any]
    payload: Element


@dataclass(frozen=True)
class Enqueue:
    """``AQXmlSend`` (single-consumer queue) or ``AQXmlPublish`` (multi-consumer)."""

    op: str
    destination: Destination
    messages: tuple[OutMessage, ...]
    visibility: str = "ON_COMMIT"
    transformation: str | None = None
    commit: bool = False


@dataclass(frozen=True)
class Receive:
    """``AQXmlReceive``: ``batch_size`` messages at most (Oracle's demos send it)."""

    destination: Destination
    consumer_name: str | None = None
    wait_time: float | None = None  # None: FOREVER (bounded by the service's max_wait_time)
    selector: dict[str, str] = field(default_factory=dict)
    visibility: str = "ON_COMMIT"
    dequeue_mode: str = "REMOVE"
    navigation_mode: str = "NEXT_MESSAGE"
    transformation: str | None = None
    batch_size: int = 1
    commit: bool = False


@dataclass(frozen=True)
class Register:
    """``AQXmlRegister``: notify ``notify_url`` when a message for the consumer arrives."""

    destination: Destination
    notify_url: str
    consumer_name: str | None = None


@dataclass(frozen=True)
class Commit:
    """``AQXmlCommit`` alone: commit the session's transaction."""


@dataclass(frozen=True)
class Rollback:
    """``AQXmlRollback`` alone: roll the session's transaction back."""


Request = Enqueue | Receive | Register | Commit | Rollback


@dataclass(frozen=True)
class PropagationHeader:
    """The SOAP header a changeflow propagation sends with its requests.

    ``kind`` is ``batch`` (LCR batches ``first``..``last`` of the source queue, written
    as one destination batch; a range the destination holds already is skipped) or
    ``messages`` (user messages, recognised by their ``message_id``).
    """

    propagation: str
    source: str
    kind: str
    first: int | None = None
    last: int | None = None

    @property
    def producer(self) -> str:
        """The producer the destination records the range under."""
        return f"propagation:{self.propagation}@{self.source}"


@dataclass(frozen=True)
class Envelope:
    """A parsed SOAP envelope: one IDAP request and the propagation header, if any."""

    request: Request
    op: str
    propagation: PropagationHeader | None = None
