"""The source side of a PostgreSQL capture: its replication slot and the source catalog.

:class:`SlotReader` holds the capture's session on the source database. It makes
sure one capture at a time uses a slot (an advisory lock, plus the slot's own
``active`` flag), creates the slot on first use, reconciles the slot with the
position the capture recorded, checks every captured table before anything is read
(a key to apply by, supported column types), peeks changes and advances the slot.
"""

from __future__ import annotations

import logging
import re
import time
from typing import TYPE_CHECKING, Any

from changeflow import lcr
from changeflow.capture import pg_decode
from changeflow.errors import TerminalError, TransientError
from changeflow.pgconn import int_to_lsn, lsn_to_int

if TYPE_CHECKING:
    import psycopg

    from changeflow.config import PostgresSource

log = logging.getLogger(__name__)

SYSTEM_SCHEMAS = ("pg_catalog", "information_schema", "pg_toast", "changeflow")
# Origins whose name says which apply tag they stand for: changeflow_<tag hex>_<apply>.
_ORIGIN = re.compile(r"^changeflow_([0-9a-fA-F]*)_")


class SlotMissingError(TerminalError):
    """The capture's replication slot does not exist (and may not be created)."""


class SlotBusyError(TransientError):
    """Another capture or replication client is using the slot."""


class SlotAheadError(TerminalError):
    """The slot was advanced past what this capture enqueued: changes were lost."""


class TableWithoutKeyError(TerminalError):
    """A captured table has neither a primary key nor a replica identity index."""


_KEYS_SQL = """
SELECT c.relreplident, i.indisprimary, i.indisreplident,
       array(SELECT a.attname::text FROM unnest(i.indkey) WITH ORDINALITY k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
             ORDER BY k.ord)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_index i ON i.indrelid = c.oid AND (i.indisprimary OR i.indisreplident)
WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')
"""

_COLUMNS_SQL = """
SELECT a.attname::text, t.oid::int, format_type(a.atttypid, a.atttypmod), t.typbasetype::int
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_type t ON t.oid = a.atttypid
WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


# One row per peek: the documents in slot order, joined, and the LSN past each commit.
_PEEK_SQL = """
SELECT string_agg(data, ',' ORDER BY n),
       array_agg((lsn - '0/0'::pg_lsn)::bigint ORDER BY n)
           FILTER (WHERE left(data, 13) = '{"action":"C"'),
       count(*)
FROM pg_logical_slot_peek_changes(%s, NULL, %s, VARIADIC %s::text[])
     WITH ORDINALITY AS c(lsn, xid, data, n)
"""


def lock_key(slot: str) -> str:
    """The advisory-lock text a capture holds while it uses ``slot``."""
    return f"changeflow.pgcapture.{slot}"


class SlotReader:
    """A capture's session on its source database.

    Args:
        conn: an autocommit connection to the source.
        source: the capture's source spec.
        capture: the capture's name (for messages).
    """

    def __init__(self, conn: psycopg.Connection[Any], source: PostgresSource, capture: str):
        self.conn = conn
        self.source = source
        self.capture = capture
        self._keys: dict[tuple[str, str], list[str]] = {}
        self._origins: dict[int, bytes] = {}
        self._origin_sources: dict[int, str] = {}
        self._pending: int | None = None  # acknowledged, not yet advanced (advance_soon)
        self._advanced_at = time.monotonic()

    # -- ownership ---------------------------------------------------------------
    def lock(self, busy_wait: float = 30.0) -> None:
        """Take the slot for this session, waiting up to ``busy_wait`` seconds.

        Raises:
            SlotBusyError: another capture (or replication client) still holds it.
        """
        deadline = time.monotonic() + busy_wait
        while True:
            got = self.conn.execute(
                "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))",
                (lock_key(self.source.slot),),
            ).fetchone()
            pid = self._active_pid()
            if got and got[0] and pid is None:
                return
            if got and got[0]:
                self.conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))",
                                  (lock_key(self.source.slot),))
            if time.monotonic() >= deadline:
                holder = f"backend pid {pid}" if pid else "another changeflow capture"
                raise SlotBusyError(
                    f"capture {self.capture}: replication slot {self.source.slot!r} is in use "
                    f"by {holder}; a slot serves one capture at a time"
                )
            time.sleep(0.5)

    def _active_pid(self) -> int | None:
        row = self.conn.execute(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
            (self.source.slot,),
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    # -- opening -----------------------------------------------------------------
    def open(self, recorded: int | None) -> None:
        """Create or check the slot, reconcile it with ``recorded``, check the tables.

        Args:
            recorded: the end LSN the capture last enqueued (from the state store).
        """
        confirmed = self._slot_position(recorded)
        if recorded is not None and confirmed < recorded:
            log.info("capture %s: slot %s is behind the enqueued position; advancing to %s",
                     self.capture, self.source.slot, int_to_lsn(recorded))
            self.advance(recorded)
        elif recorded is not None and confirmed > recorded:
            raise SlotAheadError(
                f"capture {self.capture}: slot {self.source.slot!r} is at "
                f"{int_to_lsn(confirmed)} but only changes up to "
                f"{int_to_lsn(recorded)} were enqueued: something else consumed the "
                "slot and those changes are lost; re-instantiate the targets, then reset the "
                "capture's position"
            )
        self.check_tables()

    def _slot_position(self, recorded: int | None) -> int:
        slot = self.source.slot
        row = self.conn.execute(
            "SELECT plugin, slot_type, confirmed_flush_lsn::text, database "
            "FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
        if row is None:
            if recorded is not None or not self.source.create_slot:
                lost = (f"; changes after {int_to_lsn(recorded)} were never captured "
                        "and the targets must be re-instantiated") if recorded else ""
                raise SlotMissingError(
                    f"capture {self.capture}: replication slot {slot!r} does not exist{lost}. "
                    f"Create it with SELECT pg_create_logical_replication_slot('{slot}', "
                    "'wal2json') or set create_slot: true"
                )
            row = self.conn.execute(
                "SELECT pg_create_logical_replication_slot(%s, 'wal2json')", (slot,)
            ).fetchone()
            log.info("capture %s: created replication slot %s", self.capture, slot)
            return self._slot_position(None)
        plugin, slot_type, confirmed, database = row
        current_db = self.conn.execute("SELECT current_database()").fetchone()
        if slot_type != "logical" or plugin != "wal2json" or (current_db and
                                                               database != current_db[0]):
            raise SlotMissingError(
                f"capture {self.capture}: slot {slot!r} is a {slot_type} slot of plugin "
                f"{plugin!r} on database {database!r}; the capture needs a logical wal2json "
                "slot on the database it connects to"
            )
        return lsn_to_int(confirmed)

    # -- tables ------------------------------------------------------------------
    def captured_tables(self) -> list[tuple[str, str]]:
        """The ``(schema, table)`` pairs this capture is configured to read."""
        if self.source.tables:
            return [tuple(t.split(".", 1)) for t in self.source.tables]  # type: ignore[misc]
        schemas = list(self.source.schemas)
        rows = self.conn.execute(
            "SELECT n.nspname::text, c.relname::text FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p') "
            "AND NOT c.relispartition AND n.nspname <> ALL(%s) "
            "AND (cardinality(%s::text[]) = 0 OR n.nspname = ANY(%s)) "
            "AND n.nspname NOT LIKE 'pg_temp%%' ORDER BY 1, 2",
            (list(SYSTEM_SCHEMAS), schemas, schemas),
        ).fetchall()
        return [(r[0], r[1]) for r in rows]

    def check_tables(self) -> None:
        """Refuse, before reading anything, a captured table the capture cannot carry.

        Raises:
            TableWithoutKeyError: no primary key and no replica identity index.
            UnsupportedTypeError: a column type outside :data:`pg_decode.TYPE_MAP`.
        """
        for schema, table in self.captured_tables():
            cols = self.conn.execute(_COLUMNS_SQL, (schema, table)).fetchall()
            if not cols:
                log.warning("capture %s: table %s.%s does not exist (yet)", self.capture,
                            schema, table)
                continue
            for col, oid, type_name, base in cols:
                if oid not in pg_decode.TYPE_MAP:
                    raise pg_decode.UnsupportedTypeError(
                        f"capture {self.capture}: column {schema}.{table}.{col} has type "
                        f"{type_name}{' (a domain)' if base else ''}, which the LCR contract "
                        "cannot hold; capture a view or generated column casting it to a "
                        "supported type (see docs/postgres.md), or leave the table out"
                    )
            self.key_columns(schema, table)

    def key_columns(self, schema: str, table: str) -> list[str]:
        """Canonical key column names of a table (cached).

        Raises:
            TableWithoutKeyError: with guidance on adding a key.
        """
        found = self._keys.get((schema, table))
        if found is not None:
            return found
        rows = self.conn.execute(_KEYS_SQL, (schema, table)).fetchall()
        ident = rows[0][0] if rows else "d"
        by_ri = [r[3] for r in rows if r[2]]
        by_pk = [r[3] for r in rows if r[1]]
        cols = by_ri[0] if ident == "i" and by_ri else by_pk[0] if by_pk else None
        if ident == "n" or not cols:
            identity = {"n": "NOTHING", "f": "FULL"}.get(ident, "DEFAULT")
            raise TableWithoutKeyError(
                f"capture {self.capture}: table {schema}.{table} has no primary key "
                f"(replica identity {identity}),"
                " so its updates and deletes cannot be identified or applied. Add one, e.g. "
                f'ALTER TABLE "{schema}"."{table}" ADD COLUMN cf_id bigserial PRIMARY KEY, or '
                "give it a unique index on NOT NULL columns and ALTER TABLE ... REPLICA "
                "IDENTITY USING INDEX; or leave the table out of the capture"
            )
        keys = [lcr.canonical_identifier(c) for c in cols]
        self._keys[(schema, table)] = keys
        return keys

    # -- reading -----------------------------------------------------------------
    def options(self) -> list[str]:
        """The wal2json options of every peek."""
        opts = ["format-version", "2", "include-xids", "1", "include-timestamp", "1",
                "include-type-oids", "1", "include-types", "0", "include-origin", "1",
                "include-transaction", "1", "filter-tables", "changeflow.*"]
        adds = [t for t in self.source.tables] + [f"{s}.*" for s in self.source.schemas]
        if adds:
            opts += ["add-tables", ",".join(adds)]
        return opts

    def peek(self, limit: int) -> pg_decode.Peek:
        """Up to about ``limit`` decoded rows, whole transactions only; not consumed.

        The server joins the documents into one text (a JSON array's body) and lists the
        LSN of each commit, so a peek costs one value per batch, not one row per change.
        """
        row = self.conn.execute(_PEEK_SQL, (self.source.slot, limit, self.options())
                                ).fetchone()
        if row is None or not row[2]:
            return pg_decode.Peek("", [], 0)
        return pg_decode.Peek(row[0] or "", [int(x) for x in row[1] or []], int(row[2]))

    def current_lsn(self) -> int:
        """The source's WAL write position: every committed transaction ends at or before it."""
        row = self.conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        return lsn_to_int(row[0]) if row else 0

    def advance(self, lsn: int) -> None:
        """Acknowledge everything up to ``lsn``: the slot will not return it again."""
        row = self.conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (self.source.slot,),
        ).fetchone()
        if row and row[0] and lsn_to_int(row[0]) >= lsn:
            return
        self.conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                          (self.source.slot, int_to_lsn(lsn)))

    def advance_soon(self, lsn: int, every: float) -> None:
        """Acknowledge up to ``lsn``, advancing the slot at most every ``every`` seconds
        (:meth:`flush_advance` does what is left).

        For a capture that reads a *copy* of its slot (a stream or the read-ahead): its
        own slot then only holds WAL back, and a run resumes from the position recorded
        with its batches (:meth:`open`), not from the slot's. Each advance decodes the
        WAL from the slot's restart point, up to 15 s of it on a busy server (running
        transactions are logged that often), on the capture's thread and the server.
        """
        self._pending = max(lsn, self._pending or 0)
        if time.monotonic() - self._advanced_at >= every:
            self.flush_advance()

    def flush_advance(self) -> None:
        """Advance the slot to what :meth:`advance_soon` acknowledged."""
        if self._pending is not None:
            self.advance(self._pending)
            self._pending = None
        self._advanced_at = time.monotonic()

    def tag(self, origin: int) -> bytes | None:
        """The LCR tag of a transaction from its replication origin (None for origin 0).

        An origin named ``changeflow_<hex>_<apply>`` stands for tag ``<hex>``; any other
        origin's name becomes the tag's bytes.
        """
        if not origin:
            return None
        if origin not in self._origins:
            row = self.conn.execute(
                "SELECT roname FROM pg_replication_origin WHERE roident = %s", (origin,)
            ).fetchone()
            name = row[0] if row else f"origin_{origin}"
            if _ORIGIN.match(name) and "~" in name:
                self._origin_sources[origin] = name.split("~", 1)[1]
            m = _ORIGIN.match(name)
            self._origins[origin] = bytes.fromhex(m.group(1)) if m and m.group(1) else (
                b"\x00" if m else name.encode())
        return self._origins[origin]

    def origin_source(self, origin: int) -> str | None:
        """The source database an apply's origin carries (``changeflow_<tag>_<apply>~<db>``).

        A capture of tagged changes (apply forwarding) keeps it as the LCRs' source
        database name, so the original source survives the hop.
        """
        if not origin:
            return None
        self.tag(origin)
        return self._origin_sources.get(origin)
