"""PostgreSQL triggers: ordinary SQL logs changes, directly (the store is the source's
database) or through the source's change log and the pump (the store is elsewhere)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sqlalchemy import select

from changeflow.mcq import pump as pump_mod
from changeflow.mcq import triggers
from changeflow.mcq.api import MetaChangeQueue
from changeflow.mcq.model import McqError, UnknownTableError
from changeflow.mcq.triggers import TriggerSpec
from changeflow.state.leases import Lease
from changeflow.state.schema_mcq import queue, tables
from changeflow.testing.pg_cluster import PgCluster

pytestmark = pytest.mark.postgres

PHONES = """
CREATE TABLE directory_telephone (tele_id integer PRIMARY KEY, person_id integer NOT NULL,
    tele_type text NOT NULL, phone text, note text);
INSERT INTO directory_telephone VALUES (1, 1001, 'campus', '276-6000', NULL),
                                       (2, 1002, 'home', '555-0100', NULL);
"""
SPEC = TriggerSpec(table="directory_telephone", tname="PERSON", subtype="Telephone",
                   person_id="person_id", aux_string="tele_type", columns=["phone", "tele_type"])


def db(url: str) -> str:
    return url.split("?")[0].rsplit("/", 1)[1]


def entries(mcq: MetaChangeQueue) -> list[dict[str, Any]]:
    with mcq.store.read() as conn:
        return [dict(r._mapping) for r in conn.execute(select(queue).order_by(
            queue.c.entry_number))]


def test_an_update_in_postgres_queues_one_entry_per_interested_listener(
        pg: PgCluster, pgdb: str, pg_mcq: MetaChangeQueue) -> None:
    pg.sql(db(pgdb), PHONES)
    done = triggers.install(pg_mcq.store, pgdb, SPEC)
    assert done["mode"] == "direct" and done["rowid"] == ["tele_id"]
    assert done["triggers"] == ["mcq_person_telephone", "mcq_person_telephone_upd"]
    pg.sql(db(pgdb), "UPDATE directory_telephone SET phone = '276-0000' WHERE tele_id = 1")
    rows = entries(pg_mcq)
    assert sorted(r["proc_name"] for r in rows) == ["BEST", "LDAP"]
    assert {(r["tname"], r["subtype"], r["change_type"], r["person_id"], r["aux_string"],
             r["rrowid"], r["queue_name"] == r["proc_name"]) for r in rows} == {
        ("PERSON", "Telephone", "C", 1001, "campus", "1", True)}
    rec = pg_mcq.get_changes("LDAP")
    assert (rec.person_id, rec.change_type) == (1001, "C")
    pg_mcq.ack_change(rec)


def test_inserts_deletes_rollbacks_and_housekeeping(pg: PgCluster, pgdb: str,
                                                    pg_mcq: MetaChangeQueue) -> None:
    pg.sql(db(pgdb), PHONES)
    triggers.install(pg_mcq.store, pgdb, SPEC)
    pg.sql(db(pgdb), """
        UPDATE directory_telephone SET note = 'checked';         -- not a watched column
        UPDATE directory_telephone SET phone = phone;             -- changes nothing
        BEGIN; UPDATE directory_telephone SET phone = 'x'; ROLLBACK;
        INSERT INTO directory_telephone VALUES (3, 1003, 'fax', '1', NULL);
        DELETE FROM directory_telephone WHERE tele_id = 2;
    """)
    ldap = [(r["change_type"], r["person_id"], r["rrowid"]) for r in entries(pg_mcq)
            if r["proc_name"] == "LDAP"]
    assert ldap == [("I", 1003, "3"), ("D", 1002, "2")]


def test_the_first_log_records_the_trigger_and_statement(pg: PgCluster, pgdb: str,
                                                         pg_mcq: MetaChangeQueue) -> None:
    pg.sql(db(pgdb), PHONES)
    triggers.install(pg_mcq.store, pgdb, SPEC)
    pg.sql(db(pgdb), "UPDATE directory_telephone SET phone = '1' WHERE tele_id = 2")
    with pg_mcq.store.read() as conn:
        stack = conn.execute(select(tables.c.call_stack).where(
            tables.c.subtype == "Telephone")).scalar_one()
    assert "trigger mcq_person_telephone_upd on public.directory_telephone" in stack
    assert "UPDATE directory_telephone SET phone = '1'" in stack
    assert "PL/pgSQL function" in stack  # PG_CONTEXT, the PostgreSQL call stack


def test_an_unregistered_pair_strict_fails_the_statement_warn_drops(
        pg: PgCluster, pgdb: str, pg_mcq: MetaChangeQueue) -> None:
    pg.sql(db(pgdb), PHONES)
    strict = TriggerSpec(**{**SPEC.__dict__, "strict": True})
    triggers.install(pg_mcq.store, pgdb, strict)
    pg_mcq.drop_table("PERSON", "Telephone", force=True)
    with pytest.raises(RuntimeError, match="unknown table PERSON/Telephone"):
        pg.sql(db(pgdb), "UPDATE directory_telephone SET phone = 'x' WHERE tele_id = 1")
    assert pg.sql(db(pgdb), "SELECT phone FROM directory_telephone WHERE tele_id = 1") \
        .strip() == "276-6000"
    pg_mcq.add_table("PERSON", "Telephone")
    triggers.install(pg_mcq.store, pgdb, SPEC)  # warn
    pg_mcq.drop_table("PERSON", "Telephone", force=True)
    pg.sql(db(pgdb), "UPDATE directory_telephone SET phone = 'x' WHERE tele_id = 1")
    assert entries(pg_mcq) == []


def test_install_refuses_bad_input_and_installs_nothing(pg: PgCluster, pgdb: str,
                                                        pg_mcq: MetaChangeQueue) -> None:
    pg.sql(db(pgdb), PHONES)
    bad = [
        (TriggerSpec(**{**SPEC.__dict__, "subtype": "Fax"}), UnknownTableError, "PERSON/Fax"),
        (TriggerSpec(**{**SPEC.__dict__, "table": "nope"}), McqError, "'nope' does not exist"),
        (TriggerSpec(**{**SPEC.__dict__, "aux_string": "kind"}), McqError, "'kind' is not a col"),
        (TriggerSpec(**{**SPEC.__dict__, "person_id": "phone"}), McqError, "whole number"),
    ]
    for spec, err, msg in bad:
        with pytest.raises(err, match=msg):
            triggers.install(pg_mcq.store, pgdb, spec)
    assert triggers.installed(pgdb) == []
    other = pg.createdb("mcq_other")
    pg.sql("mcq_other", PHONES)
    with pytest.raises(McqError, match="mode direct needs"):
        triggers.install(pg_mcq.store, other, SPEC, mode="direct")


def test_uninstall(pg: PgCluster, pgdb: str, pg_mcq: MetaChangeQueue) -> None:
    pg.sql(db(pgdb), PHONES)
    triggers.install(pg_mcq.store, pgdb, SPEC)
    assert [t["trigger"] for t in triggers.installed(pgdb)] == [
        "mcq_person_telephone", "mcq_person_telephone_upd"]
    assert triggers.uninstall(pgdb, "directory_telephone", "PERSON", "Telephone") == [
        "mcq_person_telephone", "mcq_person_telephone_upd"]
    pg.sql(db(pgdb), "UPDATE directory_telephone SET phone = 'y'")
    assert entries(pg_mcq) == []
    with pytest.raises(McqError, match="has no MCQ trigger"):
        triggers.uninstall(pgdb, "directory_telephone", "PERSON", "Telephone")


def test_outbox_and_pump_when_the_store_is_elsewhere(pg: PgCluster, pgdb: str,
                                                     lite_mcq: MetaChangeQueue) -> None:
    pg.sql(db(pgdb), PHONES)
    done = triggers.install(lite_mcq.store, pgdb, SPEC)
    assert done["mode"] == "outbox"
    pg.sql(db(pgdb), "UPDATE directory_telephone SET phone = 'z'")
    log = pg.sql(db(pgdb), "SELECT count(*) FROM changeflow_mcq.changeflow_mcq_log")
    assert log.strip() == "2" and entries(lite_mcq) == []
    r = pump_mod.pump(lite_mcq.store, "hrdb", pgdb)
    assert (r.moved, r.entries) == (2, 4)
    assert pg.sql(db(pgdb), "SELECT count(*) FROM changeflow_mcq.changeflow_mcq_log").strip() \
        == "0"
    got = sorted((e["proc_name"], e["person_id"]) for e in entries(lite_mcq))
    assert got == [("BEST", 1001), ("BEST", 1002), ("LDAP", 1001), ("LDAP", 1002)]
    with lite_mcq.store.read() as conn:
        stack = conn.execute(select(tables.c.call_stack).where(
            tables.c.subtype == "Telephone")).scalar_one()
    assert "trigger mcq_person_telephone_upd" in stack and "source hrdb" in stack
    assert pump_mod.pump(lite_mcq.store, "hrdb", pgdb).moved == 0


def test_a_pump_that_died_between_its_commits_moves_nothing_twice(
        pg: PgCluster, pgdb: str, lite_mcq: MetaChangeQueue) -> None:
    pg.sql(db(pgdb), PHONES)
    triggers.install(lite_mcq.store, pgdb, SPEC)
    pg.sql(db(pgdb), "UPDATE directory_telephone SET phone = 'z'")
    with psycopg.connect(pgdb) as src:
        rows = src.execute("SELECT " + ", ".join(pump_mod._COLS) + " FROM "
                           "changeflow_mcq.changeflow_mcq_log ORDER BY log_id").fetchall()
    from changeflow.mcq.log import Logger

    with Lease(lite_mcq.store, "mcq-pump:hrdb") as lease:  # step 1 only, then "crash"
        pump_mod._move(lite_mcq.store, Logger(lite_mcq.store), "hrdb", rows, lease,
                       pump_mod.PumpResult("hrdb"))
    assert len(entries(lite_mcq)) == 4
    r = pump_mod.pump(lite_mcq.store, "hrdb", pgdb)
    assert (r.recovered, r.moved) == (2, 0)
    assert len(entries(lite_mcq)) == 4


def test_a_strict_pump_stops_on_an_unregistered_pair_and_keeps_the_rows(
        pg: PgCluster, pgdb: str, lite_mcq: MetaChangeQueue) -> None:
    pg.sql(db(pgdb), PHONES)
    triggers.install(lite_mcq.store, pgdb, SPEC)
    lite_mcq.drop_table("PERSON", "Telephone", force=True)
    pg.sql(db(pgdb), "UPDATE directory_telephone SET phone = 'q'")
    with pytest.raises(UnknownTableError, match="PERSON/Telephone"):
        pump_mod.pump(lite_mcq.store, "hrdb", pgdb, strict=True)
    assert pg.sql(db(pgdb), "SELECT count(*) FROM changeflow_mcq.changeflow_mcq_log").strip() \
        == "2"
    lax = pump_mod.pump(lite_mcq.store, "hrdb", pgdb, strict=False)
    assert (lax.moved, lax.entries, lax.dropped) == (2, 0, 2)
