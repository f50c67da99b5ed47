"""Tables of Advanced Queuing for applications (``messaging`` domain).

User messages live in the state store, as Oracle AQ keeps them in its queue tables:
``cf_aq_messages`` holds one row per message and recipient (a *delivery*), with the
payload, the message properties, the recipient's state and the logical-transaction
lock. Queues themselves are rows of ``cf_queues`` (the queue catalog owns them);
``cf_aq_queue_tables`` adds the queue-table level properties.

``cf_aq_spilled`` holds buffered messages spilled from a process's memory.

``cf_aq_messages`` and ``cf_aq_spilled`` declare themselves holders of queue messages in
their ``info`` (``queue_messages``): the queue catalog counts such rows before it drops a
queue.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
    inspect,
    text,
)
from sqlalchemy.engine import Connection

from changeflow.state.schema import ID, metadata
from changeflow.state.steps import Step, create_indexes, create_tables

queue_tables = Table(
    "cf_aq_queue_tables",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("payload_type", String(200), nullable=False),
    Column("sort_order", String(40), nullable=False),
    Column("multiple_consumers", Boolean, nullable=False),
    # none | transactional (NEXT_TRANSACTION navigation needs transactional)
    Column("message_grouping", String(20), nullable=False),
    Column("secure", Boolean, nullable=False),
    Column("comment", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

message_types = Table(
    "cf_aq_types",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("kind", String(20), nullable=False),  # OBJECT (user types; others are built in)
    Column("fields_json", Text, nullable=False),  # [[name, type], ...] in declared order
    Column("comment", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

messages = Table(
    "cf_aq_messages",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("msg_id", String(64), nullable=False),
    Column("queue", String(200), nullable=False),
    # The recipient: an agent name ('' on single-consumer queues and for a remote topic)
    # and an address ('' locally; 'owner.queue@site' for a remote subscriber).
    Column("consumer", String(200), nullable=False),
    Column("address", String(300), nullable=False),
    # READY | WAITING | PROCESSED | EXPIRED | UNDELIVERABLE
    Column("state", String(16), nullable=False),
    # Ordering keys of the queue table's sort order: k1 (priority or 0), k2 (enqueue time
    # in microseconds or the commit sequence), then id.
    Column("k1", BigInteger, nullable=False),
    Column("k2", BigInteger, nullable=False),
    Column("txn_id", String(64), nullable=False),  # the enqueuing transaction (its group)
    Column("commit_seq", BigInteger),
    Column("priority", Integer, nullable=False),
    Column("enq_time", DateTime(timezone=True), nullable=False),
    Column("visible_at", DateTime(timezone=True), nullable=False),
    Column("expire_at", DateTime(timezone=True)),
    Column("delay", Float, nullable=False),
    Column("expiration", Float),
    Column("correlation", String(128)),
    Column("sender", String(500)),
    Column("recipients", Text),  # JSON list of [name, address] as enqueued
    Column("exception_queue", String(200)),
    Column("msg_type", String(200), nullable=False),
    Column("payload", Text),  # JSON (see changeflow.messaging.types)
    Column("payload_raw", LargeBinary),
    Column("size", Integer, nullable=False),
    Column("retry_count", Integer, nullable=False),
    # The logical transaction holding the message: R (dequeued REMOVE), L (LOCKED),
    # P (being propagated), with the time the lock lapses if nobody renews it.
    Column("lock_txn", String(100)),
    Column("lock_mode", String(1)),
    Column("lock_expires", DateTime(timezone=True)),
    Column("original_queue", String(200)),  # set when moved to an exception queue
    Column("reason", Text),  # why it is EXPIRED/UNDELIVERABLE
    Column("state_time", DateTime(timezone=True), nullable=False),
    UniqueConstraint("queue", "msg_id", "consumer", "address", name="uq_cf_aq_delivery"),
    sqlite_autoincrement=True,
    info={"queue_messages": {"column": "queue", "state_column": "state",
                             "live_states": ("READY", "WAITING")}},
)

ix_messages_dequeue = Index("ix_cf_aq_messages_dequeue", messages.c.queue, messages.c.consumer,
                            messages.c.state, messages.c.k1, messages.c.k2, messages.c.id)


def _partial(name: str, condition: str, *columns: Column) -> Index:
    """An index of the rows ``condition`` selects only: a plain enqueue touches none."""
    where = text(condition)
    return Index(name, *columns, sqlite_where=where, postgresql_where=where)


# Partial indexes: a READY local message without correlation, delay or expiration (the
# common enqueue) writes only the table, the dequeue index and the unique key.
ix_messages_waiting = _partial("ix_cf_aq_messages_waiting_p", "state = 'WAITING'",
                               messages.c.visible_at)
ix_messages_expiring = _partial("ix_cf_aq_messages_expiring_p", "expire_at IS NOT NULL",
                                messages.c.expire_at)
ix_messages_lock = _partial("ix_cf_aq_messages_lock_p", "lock_txn IS NOT NULL",
                            messages.c.lock_txn)
ix_messages_correlation = _partial("ix_cf_aq_messages_corr_p", "correlation IS NOT NULL",
                                   messages.c.queue, messages.c.correlation)
# Deliveries waiting for a propagation: looked up by address on every propagation pass.
ix_messages_address = _partial("ix_cf_aq_messages_address_p", "address <> ''",
                               messages.c.address, messages.c.queue, messages.c.state)
PARTIAL_INDEXES = (ix_messages_waiting, ix_messages_expiring, ix_messages_lock,
                   ix_messages_correlation, ix_messages_address)
#: Full indexes of the first schema version, replaced by the partial ones (step 3).
OLD_INDEXES = ("ix_cf_aq_messages_msg_id", "ix_cf_aq_messages_state", "ix_cf_aq_messages_lock",
               "ix_cf_aq_messages_corr", "ix_cf_aq_messages_address")

subscribers = Table(
    "cf_aq_subscribers",
    metadata,
    Column("queue", String(200), primary_key=True),
    Column("name", String(200), primary_key=True),  # '' for a remote topic (case 1)
    Column("address", String(300), primary_key=True),  # '' for a local subscriber
    Column("rule", Text),  # the condition as given
    Column("kind", String(20), nullable=False),  # subscriber | messaging_client
    Column("created_by", String(200)),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

agents = Table(
    "cf_aq_agents",
    metadata,
    Column("agent", String(200), primary_key=True),
    Column("db_user", String(200), primary_key=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

privileges = Table(
    "cf_aq_privileges",
    metadata,
    Column("queue", String(200), primary_key=True),
    Column("grantee", String(200), primary_key=True),
    Column("privilege", String(10), primary_key=True),  # ENQUEUE | DEQUEUE
    Column("grant_option", Boolean, nullable=False),
    Column("granted_by", String(200)),
    Column("granted_at", DateTime(timezone=True), nullable=False),
)

received = Table(
    "cf_aq_received",
    metadata,
    # Messages a propagation committed here: a retry after a crash enqueues nothing twice.
    Column("producer", String(200), primary_key=True),
    Column("msg_id", String(64), primary_key=True),
    Column("queue", String(200), nullable=False),
    Column("received_at", DateTime(timezone=True), nullable=False, index=True),
)

registrations = Table(
    "cf_aq_registrations",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("queue", String(200), nullable=False, index=True),
    Column("consumer", String(200), nullable=False),
    Column("notify_url", Text, nullable=False),
    Column("db_user", String(200)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("queue", "consumer", "notify_url", name="uq_cf_aq_registration"),
)

spilled = Table(
    "cf_aq_spilled",
    metadata,
    # Buffered messages spilled from a process's memory (Oracle's AQ$_<table>_p): one row
    # per message and recipient, in the queue's order (k1: priority or 0, k2: enqueue µs).
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("queue", String(200), nullable=False),
    Column("consumer", String(200), nullable=False),
    Column("msg_id", String(64), nullable=False),
    Column("msg_type", String(200), nullable=False),
    Column("payload", Text),
    Column("payload_raw", LargeBinary),
    Column("size", Integer, nullable=False),
    Column("properties", Text, nullable=False),  # JSON: priority, correlation, sender, ...
    Column("k1", BigInteger, nullable=False),
    Column("k2", BigInteger, nullable=False),
    Column("enq_time", DateTime(timezone=True), nullable=False),
    Column("spilled_at", DateTime(timezone=True), nullable=False),
    info={"queue_messages": {"column": "queue"}},
)
ix_spilled = Index("ix_cf_aq_spilled_order", spilled.c.queue, spilled.c.consumer, spilled.c.k1,
                   spilled.c.k2, spilled.c.id)


def _partial_indexes(conn: Connection) -> None:
    have = {i["name"] for i in inspect(conn).get_indexes(messages.name)}
    for name in OLD_INDEXES:
        if name in have:
            conn.execute(text(f"DROP INDEX {name}"))
    create_indexes(*PARTIAL_INDEXES)(conn)


MIGRATIONS = [
    Step(1, "AQ queue tables, message types, user messages, subscribers, agents, privileges, "
            "propagation receipts, notification registrations",
         create_tables(queue_tables, message_types, messages, subscribers, agents, privileges,
                       received, registrations)),
    Step(2, "index of deliveries by remote address", create_indexes(ix_messages_address)),
    Step(3, "partial indexes of user messages (a plain enqueue updates fewer pages)",
         _partial_indexes),
    Step(4, "buffered messages spilled from memory", create_tables(spilled)),
]
