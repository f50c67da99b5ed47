"""Issue 32, items 9-11 (seed 004): roles, dropping a listener, Get_Changes before Ack_Change.

- a listener's ROLE is "needed to access this queue": on PostgreSQL a database user
  without it may not get or acknowledge its changes (SQLite has no roles);
- dropping a listener with force removes its pending entries, as flush does: they are
  never counted as processed;
- a listener that calls Get_Changes again before Ack_Change gets the same record again
  (the default for a listener run by one worker); several workers keep their claims.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from changeflow.mcq.api import MetaChangeQueue
from changeflow.mcq.model import McqError, RoleRequiredError
from changeflow.mcq.store import sqlalchemy_url
from changeflow.state import StateStore
from changeflow.state.schema_mcq import queue
from changeflow.testing.pg_cluster import PgCluster

from .conftest import seeded


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def mcq(request: pytest.FixtureRequest) -> MetaChangeQueue:
    """The seeded MCQ on SQLite, then on PostgreSQL."""
    name = "lite_mcq" if request.param == "sqlite" else "pg_mcq"
    return request.getfixturevalue(name)


def entries(mcq: MetaChangeQueue, listener: str) -> list[tuple]:
    with mcq.store.read() as conn:
        return [tuple(r) for r in conn.execute(
            select(queue.c.pkey_string, queue.c.queue_name, queue.c.proc_date.isnot(None))
            .where(queue.c.proc_name == listener).order_by(queue.c.entry_number))]


# -- item 11: Get_Changes before Ack_Change ---------------------------------------------------
def test_get_changes_again_before_the_ack_returns_the_same_record(mcq: MetaChangeQueue) -> None:
    for k in ("a", "b", "c"):
        mcq.log_update("LOGINS", pkey_string=k)
    first = mcq.get_changes("ADSI")
    again = mcq.get_changes("ADSI")  # the paper: the same record until it is acked
    assert (first.pkey_string, again.pkey_string) == ("a", "a")
    assert again.entry_number == first.entry_number
    # the listener crashes and restarts (a new process): it starts where it stopped
    restarted = MetaChangeQueue(mcq.store)
    rec = restarted.get_changes("ADSI")
    assert rec.pkey_string == "a"
    restarted.ack_change(rec)
    got = []
    while not (rec := restarted.get_changes("ADSI")).is_end:
        got.append(rec.pkey_string)
        restarted.ack_change(rec)
    assert got == ["b", "c"]


def test_a_put_back_still_holds_with_immediate_redelivery(mcq: MetaChangeQueue) -> None:
    mcq.log_update("LOGINS", pkey_string="a")
    mcq.log_update("LOGINS", pkey_string="b")
    mcq.put_back(mcq.get_changes("ADSI"), delay=600)
    assert mcq.get_changes("ADSI").pkey_string == "b"


def test_several_workers_keep_their_claims(mcq: MetaChangeQueue) -> None:
    mcq.add_listener("ADSI", frequency="5s", workers=2)
    mcq.log_update("LOGINS", pkey_string="a")
    mcq.log_update("LOGINS", pkey_string="b")
    w1, w2 = mcq.worker("ADSI"), mcq.worker("ADSI")
    assert (w1.get_changes().pkey_string, w2.get_changes().pkey_string) == ("a", "b")
    assert w1.get_changes().is_end  # a, b claimed: handed out again after the timeout
    mcq.add_listener("ADSI", frequency="5s", workers=2, redeliver="immediate")
    assert mcq.worker("ADSI").get_changes().pkey_string == "a"  # chosen explicitly


def test_redeliver_is_checked(mcq: MetaChangeQueue) -> None:
    with pytest.raises(McqError, match="redeliver must be immediate or claim_timeout"):
        mcq.add_listener("X", redeliver="sometimes")
    with pytest.raises(McqError, match="workers must be at least 1"):
        mcq.add_listener("X", workers=0)
    assert "X" not in {r["proc_name"] for r in _listeners(mcq)}


def _listeners(mcq: MetaChangeQueue) -> list[dict]:
    from changeflow.mcq.registry import list_listeners

    return list_listeners(mcq.store)


def test_the_cli_sets_and_shows_redelivery(lite_mcq: MetaChangeQueue, tmp_path) -> None:
    import json

    from changeflow.cli import main

    path = tmp_path / "m.yaml"
    path.write_text("version: 1\nsites:\n  s1: {staging_root: st, target_root: t, state_url: "
                    f'"{lite_mcq.store.url}", database: D1}}\nmcq: {{site: s1}}\n')
    run = CliRunner().invoke
    res = run(main, ["mcq", "listener", "add", "POOL", "--workers", "4", "--config", str(path)])
    assert res.exit_code == 0, res.output
    res = run(main, ["mcq", "listener", "list", "-o", "json", "--config", str(path)])
    rows = {r["proc_name"]: r for r in json.loads(res.output)}
    assert (rows["POOL"]["workers"], rows["POOL"]["redelivery"]) == (4, "claim_timeout")
    assert rows["LDAP"]["redelivery"] == "immediate"


# -- item 10: drop --force --------------------------------------------------------------------
def test_drop_force_never_counts_pending_entries_as_processed(mcq: MetaChangeQueue) -> None:
    for k in ("a", "b", "c"):
        mcq.log_update("LOGINS", pkey_string=k)
    rec = mcq.get_changes("ADSI")
    mcq.ack_change(rec)
    assert mcq.drop_listener("ADSI", force=True) == 2
    assert entries(mcq, "ADSI") == [("a", None, True)]  # only what it processed
    with mcq.store.read() as conn:
        processed = conn.execute(select(func.count()).select_from(queue).where(
            queue.c.proc_date.isnot(None))).scalar()
    assert processed == 1


# -- item 9: roles -----------------------------------------------------------------------------
def test_roles_are_not_enforced_on_sqlite(lite_mcq: MetaChangeQueue) -> None:
    lite_mcq.add_listener("LDAP", frequency="5s", role="mcq_ldap")
    lite_mcq.log_update("LOGINS", pkey_string="a")
    rec = lite_mcq.get_changes("LDAP")
    assert rec.pkey_string == "a"
    lite_mcq.ack_change(rec)


@pytest.mark.postgres
def test_a_listeners_role_is_needed_on_postgres(pg: PgCluster, pgdb: str) -> None:
    mcq = seeded(StateStore(sqlalchemy_url(pgdb)))
    mcq.add_listener("LDAP", frequency="5s", role="mcq_ldap")
    mcq.add_listener("ADSI", frequency="5s", role="no_such_role")
    for k in ("a", "b"):
        mcq.log_update("LOGINS", pkey_string=k)
    db = pgdb.split("@/", 1)[1].split("?", 1)[0]
    pg.sql(db, "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mcq_ldap') "
               "THEN CREATE ROLE mcq_ldap; CREATE ROLE alice LOGIN; CREATE ROLE bob LOGIN; "
               "END IF; END $$; GRANT mcq_ldap TO alice; "
               "GRANT ALL ON ALL TABLES IN SCHEMA public TO alice, bob; "
               "GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO alice, bob;")

    def as_user(user: str) -> MetaChangeQueue:
        return MetaChangeQueue(StateStore(sqlalchemy_url(pgdb.replace("postgres@",
                                                                      f"{user}@", 1))))

    alice, bob = as_user("alice"), as_user("bob")
    with pytest.raises(RoleRequiredError, match="bob may not consume listener 'LDAP'.*mcq_ldap"):
        bob.get_changes("LDAP")
    rec = alice.get_changes("LDAP")
    assert rec.pkey_string == "a"
    with pytest.raises(RoleRequiredError):  # nor acknowledge what another got
        bob.worker("LDAP", worker_id=rec.claimed_by).ack_change(rec)
    alice.ack_change(rec)
    assert entries(mcq, "LDAP")[0] == ("a", None, True)
    assert entries(mcq, "LDAP")[1][1] == "LDAP"  # b still pending: bob took nothing
    with pytest.raises(RoleRequiredError, match="no_such_role.*does not exist"):
        alice.get_changes("ADSI")
    assert mcq.get_changes("LDAP").pkey_string == "b"  # the superuser is a member of all
