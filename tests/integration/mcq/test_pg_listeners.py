"""The import-table listener (Figure 6) against a real vendor trigger, and refreshes from
SQL queries, on PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from changeflow.config import load_config
from changeflow.errors import TransientError
from changeflow.mcq import views
from changeflow.mcq.api import MetaChangeQueue
from changeflow.mcq.demo import INSITE, run_demo
from changeflow.mcq.listeners.pg_import import PgImport
from changeflow.mcq.listeners.runner import drain
from changeflow.mcq.refresh import refresh, rows_from_query
from changeflow.testing.pg_cluster import PgCluster

pytestmark = pytest.mark.postgres
ROOT = Path(__file__).resolve().parents[3]
PEOPLE = """
CREATE TABLE people (person_id integer PRIMARY KEY, lastname text, firstname text,
                     orgn_code text, status text, title text);
INSERT INTO people SELECT g, 'Last' || g, 'First' || g, 'ORG', 'Employee', 'T'
  FROM generate_series(1, 100) g;
"""
QUERY = ("SELECT person_id AS spriden_id, lastname, firstname, orgn_code, status, title "
         "FROM people WHERE person_id = %(person_id)s")


def db(url: str) -> str:
    return url.split("?")[0].rsplit("/", 1)[1]


def test_the_demo_end_to_end(tmp_path: Path, pg: PgCluster) -> None:
    """Triggers (outbox), pump, an idempotent backfill, the import listener and its
    vendor's business rules, verified against the source."""
    cfg = load_config(ROOT / "config" / "demo-mcq.yaml")
    mcq_cfg = cfg.mcq.model_copy(update={"site": None,  # type: ignore[union-attr]
                                         "state_url": f"sqlite:///{tmp_path}/mcq.db"})
    cfg = cfg.model_copy(update={"mcq": mcq_cfg})
    lines: list[str] = []
    demo_pg = PgCluster().start()  # its own: the demo creates hrdb and insite
    try:
        assert run_demo(cfg, demo_pg, people=12, echo=lines.append), "\n".join(lines)
    finally:
        demo_pg.stop()
    text = "\n".join(lines)
    assert "backfill 2 of Insite: 0 queued (bulk), 12 already pending" in text
    assert "new person 14 has no first name" in text


def test_import_listener_puts_back_refusals_and_stops_when_the_target_is_down(
        pg: PgCluster, pgdb: str, lite_mcq: MetaChangeQueue) -> None:
    pg.sql(db(pgdb), PEOPLE + "UPDATE people SET firstname = NULL WHERE person_id = 3;")
    target = pg.createdb("insite_t")
    pg.sql("insite_t", INSITE)
    for pid in (1, 2, 3, 4):
        lite_mcq.log_update("PERSON", "PEOPLE", person_id=pid)
    h = PgImport(pgdb, target, "simon_person_import", {"PERSON": QUERY})
    r = drain(lite_mcq.worker("BEST"), h)
    h.close()
    assert (r.processed, r.put_back) == (3, 1)
    assert "new person 3 has no first name" in r.errors[0]
    assert pg.sql("insite_t", "SELECT person_number, person_last_name, person_location "
                  "FROM sa_person ORDER BY 1").split() == [
        "1|LAST1|Employee", "2|LAST2|Employee", "4|LAST4|Employee"]
    [held] = views.pending_entries(lite_mcq.store, "BEST")
    assert (held["person_id"], held["retry_count"]) == (3, 1)
    lite_mcq.log_update("PERSON", "PEOPLE", person_id=5)
    down = PgImport(pgdb, target.replace(f"port={pg.port}", "port=1"), "simon_person_import",
                    {"PERSON": QUERY})
    with pytest.raises(TransientError, match="unreachable"):
        drain(lite_mcq.worker("BEST"), down)
    assert [e["person_id"] for e in views.pending_entries(lite_mcq.store, "BEST")] == [3, 5]


def test_refresh_from_a_query_all_or_nothing(pg: PgCluster, pgdb: str,
                                             lite_mcq: MetaChangeQueue) -> None:
    pg.sql(db(pgdb), PEOPLE)
    r = refresh(lite_mcq.store, "BEST", "PERSON", "PEOPLE",
                rows_from_query(pgdb, "SELECT person_id FROM people WHERE person_id <= 60"))
    assert (r.queued, r.interested) == (60, True)
    failing = "SELECT person_id, NULL::text AS aux_string FROM people " \
              "WHERE 1 / (person_id - 90) IS NOT NULL OR person_id > 0 ORDER BY person_id"
    with pytest.raises(Exception, match="division by zero"):
        refresh(lite_mcq.store, "BEST", "PERSON", "PEOPLE", rows_from_query(pgdb, failing))
    assert len(views.pending_entries(lite_mcq.store, "BEST", limit=500)) == 60
    again = refresh(lite_mcq.store, "BEST", "PERSON", "PEOPLE",
                    rows_from_query(pgdb, "SELECT person_id FROM people"))
    assert (again.queued, again.already_pending) == (40, 60)
    rec = lite_mcq.get_changes("BEST")
    assert rec.bulk and rec.person_id == 1
