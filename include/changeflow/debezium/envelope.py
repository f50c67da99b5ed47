"""The Debezium change-event envelope: field names, operations and positions, in one place.

A Debezium change event is a JSON object, written by Kafka Connect's JSON converter
either bare (``schemas.enable=false``) or wrapped as ``{"schema": ..., "payload": ...}``:

* ``op``: the operation, one of :class:`Op` (``c`` create, ``u`` update, ``d`` delete,
  ``r`` read during a snapshot, ``t`` truncate); an unknown code raises;
* ``before`` / ``after``: the row image before and after the change; which of them an
  operation fills is :attr:`Op.images`;
* ``source``: where the change comes from (connector, database, schema, table,
  transaction id, log position, commit time);
* ``ts_ms`` (and ``ts_us``/``ts_ns``): when the connector handled the event;
* ``transaction``: ``id``, ``total_order``, ``data_collection_order`` when the connector
  provides transaction metadata; the metadata topic itself holds ``status`` BEGIN/END
  events with ``event_count`` and ``data_collections``. The PostgreSQL connector writes
  ``id`` as ``"<txId>:<lsn>"`` (different on every event of a transaction): the
  transaction is ``source.txId``.

Records that are not change events, and what a capture does with them (:data:`SKIPPED`):
a tombstone (a ``null`` value, which follows a delete for log compaction), a heartbeat
(``{"ts_ms": ...}``), a logical-decoding message (``op`` :data:`MESSAGE`, from
``pg_logical_emit_message``) and transaction metadata are skipped and counted. Rows
flattened by the ``ExtractNewRecordState`` transform (a row plus :data:`DELETED`) carry
no position or transaction and are refused.

changeflow's LCRs map onto it one to one (``docs/debezium.md``):

>>> Op.of("u").command, Op.of("u").images
('UPDATE', ('before', 'after'))
>>> Op.for_command("DELETE")
<Op.DELETE: 'd'>
>>> Op.of("x")
Traceback (most recent call last):
...
changeflow.debezium.envelope.EnvelopeError: unknown Debezium op code 'x' (known: c, u, d, r, t)
"""

from __future__ import annotations

from enum import Enum

from changeflow.errors import TerminalError

# Envelope fields.
BEFORE, AFTER, SOURCE, OP, TS_MS, TS_US, TS_NS, TRANSACTION = (
    "before", "after", "source", "op", "ts_ms", "ts_us", "ts_ns", "transaction")
SCHEMA, PAYLOAD = "schema", "payload"
# Transaction metadata events (the connector's ``<prefix>.transaction`` topic).
STATUS, EVENT_COUNT, DATA_COLLECTIONS = "status", "event_count", "data_collections"
BEGIN, END = "BEGIN", "END"
#: The op of a logical-decoding message event (not a table change: skipped).
MESSAGE = "m"
#: The field ``ExtractNewRecordState`` adds to a flattened row (and ``__op``).
DELETED, FLAT_OP = "__deleted", "__op"
#: What the PostgreSQL connector writes for an unchanged TOASTed value
#: (``unavailable.value.placeholder``): the column did not change.
UNAVAILABLE = "__debezium_unavailable_value"
#: Record kinds a capture skips (counted), as :func:`changeflow.debezium.reader.event_kind`
#: names them.
SKIPPED = ("txmeta", "tombstone", "heartbeat", "message")

#: The ``source`` block: the PostgreSQL connector's fields, plus changeflow's own
#: (``cf_*``), which carry what an LCR holds and Debezium has no field for. Readers
#: that do not know them ignore them.
SOURCE_FIELDS: tuple[tuple[str, str, bool], ...] = (
    ("version", "string", False),
    ("connector", "string", False),
    ("name", "string", False),
    ("ts_ms", "int64", False),
    ("ts_us", "int64", True),
    ("ts_ns", "int64", True),
    ("snapshot", "string", True),
    ("db", "string", False),
    ("sequence", "string", True),
    ("schema", "string", False),
    ("table", "string", False),
    ("txId", "int64", True),
    ("lsn", "int64", True),
    ("xmin", "int64", True),
    ("cf_source_database", "string", True),
    ("cf_msg_id", "string", True),
    ("cf_tag", "string", True),
    ("cf_key_columns", "string", True),
)

#: Connectors whose events changeflow reads, and how it finds the commit position
#: (an SCN-like number ordering commits) and the position within the transaction.
CONNECTORS = ("postgresql", "changeflow")
CONNECTOR = "changeflow"  # what an export writes
VERSION = "2.7.0.Final"  # the Debezium envelope version an export follows


class EnvelopeError(TerminalError):
    """A change event does not follow the Debezium envelope."""


class Op(Enum):
    """The operation of a change event, and the LCR command it becomes."""

    CREATE = "c"
    UPDATE = "u"
    DELETE = "d"
    READ = "r"
    TRUNCATE = "t"

    @classmethod
    def of(cls, code: str | None) -> Op:
        """The operation of a code.

        Raises:
            EnvelopeError: for a missing or unknown code (never returns None).
        """
        for op in cls:
            if op.value == code:
                return op
        raise EnvelopeError(f"unknown Debezium op code {code!r} (known: "
                            + ", ".join(o.value for o in cls) + ")")

    @classmethod
    def for_command(cls, command: str) -> Op:
        """The operation an export writes for an LCR command type.

        Raises:
            EnvelopeError: for a command the envelope has no operation for.
        """
        found = {"INSERT": cls.CREATE, "UPDATE": cls.UPDATE, "DELETE": cls.DELETE,
                 "TRUNCATE TABLE": cls.TRUNCATE}.get(command)
        if found is None:
            raise EnvelopeError(f"LCR command {command!r} has no Debezium operation")
        return found

    @property
    def command(self) -> str:
        """The LCR command type (a snapshot read is an INSERT)."""
        return {"c": "INSERT", "r": "INSERT", "u": "UPDATE", "d": "DELETE",
                "t": "TRUNCATE TABLE"}[self.value]

    @property
    def images(self) -> tuple[str, ...]:
        """The row images this operation fills."""
        return {"c": (AFTER,), "r": (AFTER,), "u": (BEFORE, AFTER), "d": (BEFORE,),
                "t": ()}[self.value]

    @property
    def key_image(self) -> str | None:
        """The image that must hold the row's key."""
        return {"c": AFTER, "r": AFTER, "u": AFTER, "d": BEFORE, "t": None}[self.value]


def topic(prefix: str, owner: str, table: str) -> str:
    """The Kafka topic (and export directory) of a table, as Debezium names it.

    >>> topic("dbs1", "hr", "regions")
    'dbs1.hr.regions'
    """
    return f"{prefix}.{owner}.{table}"


def source_name(identifier: str) -> str:
    """The name a source database uses for a canonical LCR identifier.

    The inverse of :func:`changeflow.lcr.canonical_identifier`: an all-upper-case name
    was folded from lower case, anything else was quoted and is kept.

    >>> source_name("REGION_ID"), source_name("MixedCase")
    ('region_id', 'MixedCase')
    """
    return identifier.lower() if identifier == identifier.upper() else identifier
