"""Bad input, tags in a two-site loop, and the import-table pattern (seed 004)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from changeflow.apply.postgres import apply_pg_once
from changeflow.capture.pg_decode import UnsupportedTypeError
from changeflow.capture.pg_source import (
    SlotBusyError,
    SlotMissingError,
    TableWithoutKeyError,
    lock_key,
)
from changeflow.capture.postgres import run_pg_capture
from changeflow.config import load_config
from changeflow.errors import TerminalError, TransientError
from changeflow.pgconn import SourceUnreachableError
from changeflow.sites import queue_site
from changeflow.testing.pg_cluster import free_port

pytestmark = pytest.mark.postgres


def _one_way(pg: Any, workdir: Path, pipeline_file: Any, monkeypatch: Any, *,
             tables: str = "[public.t]", source_extra: str = "",
             target_extra: str = "") -> tuple[Any, str, str]:
    tag = uuid.uuid4().hex[:8]
    src, dst = f"e_src_{tag}", f"e_dst_{tag}"
    monkeypatch.setenv(f"CF_ESRC_{tag}", pg.createdb(src))
    monkeypatch.setenv(f"CF_EDST_{tag}", pg.createdb(dst))
    path = pipeline_file(workdir, f"""
        queues:
          - {{name: strm.q1, site: s1}}
        captures:
          - name: cap
            queue: strm.q1@s1
            source: {{type: postgres, database: PG1.EXAMPLE.COM, url_env: CF_ESRC_{tag},
                      slot: eslot_{tag}, tables: {tables} {source_extra}}}
        applies:
          - name: topg
            queue: strm.q1@s1
            target: {{type: postgres, url_env: CF_EDST_{tag} {target_extra}}}
    """)
    return load_config(path), src, dst


def _errors(cfg: Any) -> list[Any]:
    from changeflow.apply import errorq

    rt, _ = queue_site(cfg, "strm.q1@s1")
    return errorq.entries(rt.store, "topg")


def test_source_unreachable_is_transient(workdir: Path, pipeline_file: Any,
                                         monkeypatch: Any) -> None:
    monkeypatch.setenv("CF_NOWHERE", f"postgresql://postgres@127.0.0.1:{free_port()}/x")
    path = pipeline_file(workdir, """
        queues: [{name: strm.q1, site: s1}]
        captures:
          - name: cap
            queue: strm.q1@s1
            source: {type: postgres, database: PG1, url_env: CF_NOWHERE, slot: s}
    """)
    with pytest.raises(SourceUnreachableError, match="unreachable after 2 attempts") as err:
        run_pg_capture(None, load_config(path), "cap", connect_attempts=2)
    assert isinstance(err.value, TransientError)


def test_slot_missing_and_taken(pg: Any, workdir: Path, pipeline_file: Any,
                                monkeypatch: Any) -> None:
    cfg, src, _ = _one_way(pg, workdir, pipeline_file, monkeypatch,
                           source_extra=", create_slot: false")
    pg.sql(src, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    with pytest.raises(SlotMissingError, match="does not exist.*pg_create_logical_replication"):
        run_pg_capture(None, cfg, "cap")
    slot = cfg.captures[0].source.slot
    pg.sql(src, f"SELECT pg_create_logical_replication_slot('{slot}', 'wal2json')")
    with pg.connect(src) as other:
        other.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (lock_key(slot),))
        with pytest.raises(SlotBusyError, match="in use"):
            run_pg_capture(None, cfg, "cap", busy_wait=0.5)
    assert run_pg_capture(None, cfg, "cap").messages == 0  # free again


def test_table_without_key_and_unsupported_type_are_refused(
    pg: Any, workdir: Path, pipeline_file: Any, monkeypatch: Any
) -> None:
    cfg, src, _ = _one_way(pg, workdir, pipeline_file, monkeypatch)
    pg.sql(src, "CREATE TABLE t (id int, v text)")
    with pytest.raises(TableWithoutKeyError, match="no primary key.*ADD COLUMN cf_id") as err:
        run_pg_capture(None, cfg, "cap")
    assert isinstance(err.value, TerminalError)
    pg.sql(src, "ALTER TABLE t ADD PRIMARY KEY (id); ALTER TABLE t ADD COLUMN span interval")
    with pytest.raises(UnsupportedTypeError, match=r"public\.t\.span has type interval"):
        run_pg_capture(None, cfg, "cap")


def test_constraint_violation_goes_to_error_queue_whole(
    pg: Any, workdir: Path, pipeline_file: Any, monkeypatch: Any
) -> None:
    cfg, src, dst = _one_way(pg, workdir, pipeline_file, monkeypatch)
    pg.sql(src, "CREATE TABLE t (id int PRIMARY KEY, v int)")
    pg.sql(dst, "CREATE TABLE t (id int PRIMARY KEY, v int CHECK (v < 100))")
    run_pg_capture(None, cfg, "cap")
    pg.sql(src, """
        INSERT INTO t VALUES (1, 1);
        BEGIN; INSERT INTO t VALUES (2, 2); INSERT INTO t VALUES (3, 500); COMMIT;
        UPDATE t SET v = 10 WHERE id = 1;
    """)
    run_pg_capture(None, cfg, "cap")
    result = apply_pg_once(None, cfg, "topg")
    assert result.errors == 1 and result.transactions == 2
    with pg.connect(dst) as c:
        assert c.execute("SELECT * FROM t ORDER BY id").fetchall() == [(1, 10)]  # not half
    [err] = _errors(cfg)
    assert err.apply == "topg" and err.source_database == "PG1.EXAMPLE.COM"
    assert err.transaction_id and err.commit_scn and err.failing_msg_id
    assert "t_v_check" in err.error_message


def test_import_table_trigger_applies_business_rules(
    pg: Any, workdir: Path, pipeline_file: Any, monkeypatch: Any
) -> None:
    cfg, src, dst = _one_way(
        pg, workdir, pipeline_file, monkeypatch, tables="[public.person]",
        target_extra=", import_tables: {PUBLIC.PERSON: public.person_import}")
    pg.sql(src, "CREATE TABLE person (id int PRIMARY KEY, lastname text, status text)")
    pg.sql(dst, """
        CREATE TABLE sa_person (person_number int PRIMARY KEY, last_name text NOT NULL,
                                location text);
        CREATE TABLE person_import (id int, lastname text, status text,
                                    cf_command_type text, cf_commit_scn bigint);
        CREATE FUNCTION person_import_trg() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE old_loc text;
        BEGIN
          SELECT location INTO old_loc FROM sa_person WHERE person_number = NEW.id;
          IF NOT FOUND THEN
            INSERT INTO sa_person VALUES (NEW.id, NEW.lastname,
                                          coalesce(NEW.status, 'No Status'));
          ELSIF NEW.cf_command_type = 'DELETE' OR NEW.status IS NULL THEN
            UPDATE sa_person SET location = CASE WHEN old_loc LIKE 'Former-%' THEN old_loc
                ELSE 'Former-' || old_loc END WHERE person_number = NEW.id;
          ELSE
            UPDATE sa_person SET last_name = NEW.lastname, location = NEW.status
             WHERE person_number = NEW.id;
          END IF;
          RETURN NULL;
        END $$;
        CREATE TRIGGER t_person_import BEFORE INSERT ON person_import
          FOR EACH ROW EXECUTE FUNCTION person_import_trg();
    """)
    run_pg_capture(None, cfg, "cap")
    pg.sql(src, """
        INSERT INTO person VALUES (1, 'Finke', 'Staff');
        INSERT INTO person VALUES (2, NULL, 'Student');
        UPDATE person SET status = NULL WHERE id = 1;
    """)
    run_pg_capture(None, cfg, "cap")
    result = apply_pg_once(None, cfg, "topg")
    assert result.errors == 1  # person 2: the trigger's insert violates NOT NULL
    with pg.connect(dst) as c:
        assert c.execute("SELECT * FROM sa_person").fetchall() == [(1, "Finke", "Former-Staff")]
        assert c.execute("SELECT count(*) FROM person_import").fetchone() == (0,)
    assert "last_name" in _errors(cfg)[0].error_message


def test_two_site_loop_does_not_cycle(pg: Any, workdir: Path, pipeline_file: Any,
                                      monkeypatch: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    a, b = f"loop_a_{tag}", f"loop_b_{tag}"
    monkeypatch.setenv("CF_LOOP_A", pg.createdb(a))
    monkeypatch.setenv("CF_LOOP_B", pg.createdb(b))
    for db in (a, b):
        pg.sql(db, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    path = pipeline_file(workdir, f"""
        queues:
          - {{name: strm.qa, site: s1}}
          - {{name: strm.qb, site: s2}}
        captures:
          - {{name: cap_a, queue: strm.qa@s1, source: {{type: postgres, database: A.DB,
              url_env: CF_LOOP_A, slot: loop_a_{tag}, tables: [public.t]}}}}
          - {{name: cap_b, queue: strm.qb@s2, source: {{type: postgres, database: B.DB,
              url_env: CF_LOOP_B, slot: loop_b_{tag}, tables: [public.t]}}}}
        applies:
          - {{name: to_b, queue: strm.qa@s1, target: {{type: postgres, url_env: CF_LOOP_B}}}}
          - {{name: to_a, queue: strm.qb@s2, target: {{type: postgres, url_env: CF_LOOP_A}}}}
    """)
    cfg = load_config(path)
    run_pg_capture(None, cfg, "cap_a")
    run_pg_capture(None, cfg, "cap_b")
    pg.sql(a, "INSERT INTO t VALUES (1, 'from a')")
    assert run_pg_capture(None, cfg, "cap_a").messages == 1
    assert apply_pg_once(None, cfg, "to_b").changes == 1
    back = run_pg_capture(None, cfg, "cap_b")
    assert back.messages == 0 and back.tagged_skipped == 1  # the apply's change is tagged
    pg.sql(b, "UPDATE t SET v = 'from b' WHERE id = 1")
    assert run_pg_capture(None, cfg, "cap_b").messages == 1
    assert apply_pg_once(None, cfg, "to_a").changes == 1
    again = run_pg_capture(None, cfg, "cap_a")
    assert again.messages == 0 and again.tagged_skipped == 1
    for db in (a, b):
        with pg.connect(db) as c:
            assert c.execute("SELECT * FROM t").fetchall() == [(1, "from b")]
