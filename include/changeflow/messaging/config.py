"""The ``messaging`` section of a pipeline file: types, queue tables, queues, access.

.. code-block:: yaml

    messaging:
      max_message_size: 1048576       # bytes, encoded payload
      lock_timeout: 120               # seconds a dequeued message stays locked idle
      buffer_max_bytes: 16777216      # buffered messages kept in memory, then spilled
      buffer_spill_after: 300         # seconds a buffered message stays in memory
      types:
        - {name: oe.order_t, fields: {order_id: INTEGER, region: VARCHAR2(10),
                                      amount: NUMBER}}
      queue_tables:
        - {name: oe.orders_qt, site: site1, payload_type: oe.order_t,
           sort_order: "priority,enq_time", multiple_consumers: true}
      queues:
        - {name: oe.booked_orders, queue_table: oe.orders_qt, max_retries: 3}
      set_up_queues:                  # DBMS_STREAMS_ADM.SET_UP_QUEUE
        - {queue: strmadmin.streams_queue, site: site1, queue_users: [hr]}
      subscribers:
        - {queue: oe.booked_orders, name: shipping, rule: "tab.user_data.region = 'WEST'"}
        - {queue: oe.booked_orders, name: priority, address: ws.booked_orders@site2,
           rule: "priority = 1"}
      agents:
        - {name: shipping, users: [ship_app]}
      grants:
        - {privilege: dequeue, queue: oe.booked_orders, grantee: ship_app}

Everything declared is created when missing the first time a process connects (see
:mod:`changeflow.messaging.declare`); nothing that exists is changed, and a queue an
operator dropped stays dropped. The pipeline's own queues (``queues:``) are set up as
``SET_UP_QUEUE`` sets up a Streams queue (secure, transactional, commit-time) unless
their queue table is declared here. Site references are checked then, with the file and
key in the error.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from changeflow.messaging.constants import SORT_ORDERS


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TypeDecl(_Model):
    """An object type: its fields and their types, in order."""

    name: str
    fields: dict[str, str] = Field(min_length=1)
    comment: str | None = None


class QueueTableDecl(_Model):
    """A queue table (``DBMS_AQADM.CREATE_QUEUE_TABLE``)."""

    name: str
    site: str | None = None
    payload_type: str = "RAW"
    sort_order: str = "enq_time"
    multiple_consumers: bool = False
    message_grouping: Literal["none", "transactional"] = "none"
    secure: bool = False
    comment: str | None = None

    @field_validator("sort_order")
    @classmethod
    def _order(cls, v: str) -> str:
        text = ",".join(p.strip().lower() for p in v.split(","))
        if text not in SORT_ORDERS:
            raise ValueError(f"sort_order {v!r} must be one of {', '.join(SORT_ORDERS)}")
        return text


class AqQueueDecl(_Model):
    """A queue of a queue table (``DBMS_AQADM.CREATE_QUEUE``), started unless told not to."""

    name: str
    queue_table: str
    max_retries: int = Field(default=5, ge=0)
    retry_delay: float = Field(default=0.0, ge=0)
    retention_time: float = Field(default=0.0, ge=0)
    started: bool = True
    comment: str | None = None


class SetUpQueueDecl(_Model):
    """``DBMS_STREAMS_ADM.SET_UP_QUEUE``: a secure, transactional, commit-time queue."""

    queue: str = "strmadmin.streams_queue"
    queue_table: str | None = None
    site: str | None = None
    queue_users: list[str] = []
    comment: str | None = None


class SubscriberDecl(_Model):
    """A subscriber: a name, a remote address ``owner.queue@site``, or both; a rule."""

    queue: str
    name: str | None = None
    address: str | None = None
    rule: str | None = None


class AgentDecl(_Model):
    """An agent and the users that may act as it on secure queues."""

    name: str
    users: list[str] = Field(min_length=1)


class GrantDecl(_Model):
    """A queue privilege (``*`` as the queue: every queue of the site)."""

    privilege: Literal["enqueue", "dequeue", "all", "ENQUEUE", "DEQUEUE", "ALL"]
    queue: str
    grantee: str
    site: str | None = None


class MessagingConfig(_Model):
    """Advanced Queuing for applications (see ``docs/messaging.md``).

    ``client_users`` names the user each messaging client (``dequeue`` client of the
    rules file) runs as; by default the client's own name.
    """

    max_message_size: int = Field(default=1024 * 1024, ge=1)
    lock_timeout: float = Field(default=120.0, gt=0)
    buffer_max_bytes: int = Field(default=16 * 1024 * 1024, ge=0)
    buffer_spill_after: float | None = Field(default=300.0, gt=0)
    types: list[TypeDecl] = []
    queue_tables: list[QueueTableDecl] = []
    queues: list[AqQueueDecl] = []
    set_up_queues: list[SetUpQueueDecl] = []
    subscribers: list[SubscriberDecl] = []
    agents: list[AgentDecl] = []
    grants: list[GrantDecl] = []
    client_users: dict[str, str] = {}
