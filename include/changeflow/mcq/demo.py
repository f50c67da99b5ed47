"""The Meta Change Queue demo's PostgreSQL part (``changeflow mcq demo``; ``make demo``).

On a throwaway PostgreSQL cluster (:class:`~changeflow.testing.pg_cluster.PgCluster`,
which ``changeflow mcq demo`` starts and removes, so the demo needs no server of its own):

1. ``hrdb``: people, their telephones and logins; ``insite``: the space-management
   system with its import table ``simon_person_import`` and the vendor's trigger
   (Figure 3, in PL/pgSQL) that applies its rules to ``sa_person``;
2. the configuration's tables, listeners and interests are registered, and the log
   triggers installed on ``hrdb`` (outbox mode: the demo's MCQ store is SQLite);
3. Insite is loaded through the MCQ (seed "Manual Entries"): every person is queued
   for it in the bulk lane, twice, to show that a refresh is idempotent, and the
   Insite listener runs once: the initial load;
4. ordinary SQL changes people, telephones and logins, plus a "housekeeping" update
   of a column no trigger watches;
5. the pump moves the change log into the MCQ, and the Insite listener runs again: a
   new person without a first name is refused by the vendor's trigger and put back,
   a deleted person becomes "Former-<status>" there (the vendor keeps people);
6. the verification: ``sa_person`` holds what the vendor's rules make of ``people``.

The generic XML listener (FEED) then runs as an Airflow DAG from ``scripts/demo.sh``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from changeflow.mcq import triggers, views
from changeflow.mcq.listeners.runner import run_listener
from changeflow.mcq.pump import pump
from changeflow.mcq.refresh import refresh, rows_from_query
from changeflow.mcq.store import open_mcq, section

if TYPE_CHECKING:
    from changeflow.config import PipelineConfig


class PgCluster(Protocol):
    """The PostgreSQL server the demo creates its databases in (a started
    :class:`changeflow.testing.pg_cluster.PgCluster`)."""

    def createdb(self, db: str) -> str:
        """Create a database; returns its URL."""
        ...

    def sql(self, db: str, text: str) -> str:
        """Run a SQL script in a database."""
        ...

HRDB = """
CREATE TABLE people (person_id integer PRIMARY KEY, lastname text, firstname text,
                     orgn_code text, status text, title text, last_seen timestamptz);
CREATE TABLE directory_telephone (tele_id serial PRIMARY KEY, person_id integer NOT NULL,
                                  tele_type text NOT NULL, phone text);
CREATE TABLE logins (username text PRIMARY KEY, owner integer, unixuid integer);
CREATE TABLE buildings (code text PRIMARY KEY, name text);
"""

INSITE = """
CREATE TABLE sa_person (person_id serial PRIMARY KEY, entered_date timestamptz,
  entered_by text, updated_date timestamptz, updated_by text, person_number bigint UNIQUE,
  person_last_name varchar(24) NOT NULL, person_first_name varchar(16),
  person_text1 text, person_location varchar(24), person_memo text);
CREATE TABLE simon_person_import (spriden_id bigint, lastname text, firstname text,
  orgn_code text, status text, title text);
CREATE FUNCTION t_simon_person_import() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r sa_person%ROWTYPE; new_status text;
BEGIN
  SELECT * INTO r FROM sa_person WHERE person_number = NEW.spriden_id;
  IF NOT FOUND THEN
    IF NEW.lastname IS NULL THEN RETURN NULL; END IF;  -- someone we never had is gone
    IF NEW.firstname IS NULL THEN
      RAISE EXCEPTION 'INSITE: new person % has no first name', NEW.spriden_id;
    END IF;
    new_status := coalesce(NEW.status, 'No Status');
    INSERT INTO sa_person (entered_date, entered_by, person_number, person_last_name,
      person_first_name, person_text1, person_location, person_memo)
    VALUES (now(), user, NEW.spriden_id, upper(substr(NEW.lastname, 1, 24)),
      upper(substr(NEW.firstname, 1, 16)), NEW.orgn_code, substr(new_status, 1, 24),
      upper(NEW.title));
  ELSE
    IF NEW.status IS NULL THEN  -- no current status: keep what they were
      IF substr(r.person_location, 1, 7) = 'Former-' THEN new_status := r.person_location;
      ELSE new_status := 'Former-' || r.person_location; END IF;
    ELSE new_status := NEW.status; END IF;
    UPDATE sa_person SET updated_date = now(), updated_by = user,
      person_last_name = coalesce(upper(substr(NEW.lastname, 1, 24)), r.person_last_name),
      person_first_name = coalesce(upper(substr(NEW.firstname, 1, 16)), r.person_first_name),
      person_location = substr(new_status, 1, 24), person_text1 = NEW.orgn_code,
      person_memo = upper(NEW.title)
    WHERE person_id = r.person_id;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER t_simon_person_import BEFORE INSERT ON simon_person_import
  FOR EACH ROW EXECUTE FUNCTION t_simon_person_import();
"""

NAMES = ("Finke", "Mondore", "Powell", "Douglass", "Bogart", "Burzynski", "Holloway",
         "Whyman", "Kolstad", "Armstrong", "Linden", "Pratt")
FIRST = ("Jon", "Andy", "Alan", "Mike", "Rich", "Chet", "Lance", "Megan", "Rob", "Eric")
STATUSES = ("Employee", "Faculty", "Student", "Staff")
TRIGGERS = [
    triggers.TriggerSpec(table="people", tname="PERSON", subtype="PEOPLE",
                         person_id="person_id",
                         columns=["lastname", "firstname", "orgn_code", "status", "title"]),
    triggers.TriggerSpec(table="directory_telephone", tname="PERSON", subtype="Telephone",
                         person_id="person_id", aux_string="tele_type"),
    triggers.TriggerSpec(table="logins", tname="LOGINS", person_id="owner",
                         pkey_string="username", pkey_number="unixuid"),
]


def _seed(pg: PgCluster, people: int, rng: random.Random) -> None:
    rows, phones, logins = [], [], []
    for pid in range(1, people + 1):
        last, first = rng.choice(NAMES), rng.choice(FIRST)
        rows.append(f"({pid}, '{last}', '{first}', 'ORG{pid % 7}', "
                    f"'{rng.choice(STATUSES)}', 'Title {pid}', now())")
        phones.append(f"({pid}, 'campus', '276-{6000 + pid}')")
        logins.append(f"('{first.lower()}{pid}', {pid}, {10000 + pid})")
    pg.sql("hrdb", HRDB + "INSERT INTO people VALUES " + ", ".join(rows) + ";\n"
           "INSERT INTO directory_telephone (person_id, tele_type, phone) VALUES "
           + ", ".join(phones) + ";\nINSERT INTO logins VALUES " + ", ".join(logins) + ";")
    pg.sql("insite", INSITE)


def _changes(pg: PgCluster, people: int) -> None:
    """Ordinary SQL on the source: the triggers log it."""
    pg.sql("hrdb", f"""
        UPDATE people SET status = 'Former-Student' WHERE person_id % 5 = 0;
        UPDATE people SET lastname = 'Finke-Smith' WHERE person_id = 3;
        UPDATE directory_telephone SET phone = '276-0000' WHERE person_id IN (1, 2, 3);
        INSERT INTO people VALUES ({people + 1}, 'Newhire', 'Ann', 'ORG1', 'Employee',
                                   'Engineer', now());
        INSERT INTO people VALUES ({people + 2}, 'Nofirst', NULL, 'ORG2', 'Employee',
                                   'Clerk', now());
        INSERT INTO logins VALUES ('ann{people + 1}', {people + 1}, {10000 + people + 1});
        DELETE FROM people WHERE person_id = 7;
        UPDATE people SET last_seen = now();  -- housekeeping: no trigger watches it
    """)


def expected(pg: PgCluster, refused: set[int]) -> dict[int, tuple[str, str, str]]:
    """What the vendor's rules make of ``people``: person -> (last, first, location)."""
    out = {}
    for line in pg.sql("hrdb", "SELECT person_id, lastname, firstname, coalesce(status, '') "
                       "FROM people ORDER BY 1").splitlines():
        pid, last, first, status = line.split("|")
        if int(pid) not in refused:
            out[int(pid)] = (last.upper()[:24], first.upper()[:16], status[:24])
    return out


def actual(pg: PgCluster) -> dict[int, tuple[str, str, str]]:
    """``sa_person`` as the import trigger left it."""
    out = {}
    for line in pg.sql("insite", "SELECT person_number, person_last_name, person_first_name, "
                       "person_location FROM sa_person ORDER BY 1").splitlines():
        pid, last, first, loc = line.split("|")
        out[int(pid)] = (last, first, loc)
    return out


def run_demo(cfg: PipelineConfig, pg: PgCluster, *, people: int = 40,
             echo: Callable[[str], Any] = print) -> bool:
    """Run the demo (see the module doc) on a started cluster, which the caller stops.
    Returns whether the verification passed."""
    os.environ["CHANGEFLOW_MCQ_HRDB_URL"] = pg.createdb("hrdb")
    os.environ["CHANGEFLOW_MCQ_INSITE_URL"] = pg.createdb("insite")
    _seed(pg, people, random.Random(4))
    mcq = open_mcq(cfg)
    mcq.sync(section(cfg))
    for name in ("FEED", "Insite", "LDAP"):
        views.flush(mcq.store, name, confirm=name)
    for spec in TRIGGERS:
        done = triggers.install(mcq.store, os.environ["CHANGEFLOW_MCQ_HRDB_URL"], spec)
        echo(f"trigger {', '.join(done['triggers'])} on {done['table']} -> {done['pair']} "
             f"({done['mode']})")
    hrdb = os.environ["CHANGEFLOW_MCQ_HRDB_URL"]
    for attempt in (1, 2):
        r = refresh(mcq.store, "Insite", "PERSON", "PEOPLE",
                    rows_from_query(hrdb, "SELECT person_id FROM people"))
        echo(f"backfill {attempt} of Insite: {r.queued} queued (bulk), "
             f"{r.already_pending} already pending")
    first = run_listener(cfg, "Insite", once=True)
    echo(f"listener Insite (initial load): {first.processed} processed")
    _changes(pg, people)
    p = pump(mcq.store, "hrdb", hrdb, strict=section(cfg).strict)
    echo(f"pump hrdb: {p.moved} logged changes -> {p.entries} entries")
    result = run_listener(cfg, "Insite", once=True)
    echo(f"listener Insite (changes): {result.processed} processed, {result.put_back} "
         "put back")
    for err in result.errors:
        echo(f"  put back: {err}")
    want, got = expected(pg, {people + 2}), actual(pg)
    # person 7 was deleted: Insite keeps them, as "Former-<status>"
    ok = all(got.get(pid) == row for pid, row in want.items()) and \
        got.get(7, ("", "", ""))[2].startswith("Former-") and result.put_back == 1 and \
        first.processed == people and set(got) == set(want) | {7}
    echo(f"sa_person: {len(got)} rows, {len(want)} current people; person 7 (deleted): "
         f"{got.get(7, ('-', '-', '-'))[2]}")
    echo(f"MCQ demo verification: {'PASSED' if ok else 'FAILED'}")
    return ok
