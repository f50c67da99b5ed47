"""Directed networks (seed 001): queue forwarding across three sites, and two-way setups
where source-database conditions (Parquet targets) and apply tags (PostgreSQL) stop
changes from cycling."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from changeflow.config import load_config
from changeflow.runner import run_component

ROOT = Path(__file__).resolve().parents[3]


def _rows(cfg: Any, ref: str) -> list[dict[str, Any]]:
    from changeflow.debezium.export import queue_batches
    from changeflow.queues import arrow_io

    batches = queue_batches(cfg, ref)
    return arrow_io.read_arrow_batches(batches).to_pylist() if batches else []


@pytest.mark.spark
def test_three_sites_queue_forwarding(spark: Any, tmp_path: Path, monkeypatch: Any) -> None:
    from changeflow.demo.verify import verify
    from changeflow.views import lag, rules

    for n in (1, 2, 3):
        for what, sub in (("STAGING", "staging"), ("TARGETS", "targets")):
            monkeypatch.setenv(f"CHANGEFLOW_SITE{n}_{what}", str(tmp_path / f"site{n}" / sub))
        monkeypatch.setenv(f"CHANGEFLOW_SITE{n}_STATE_URL",
                           f"sqlite:///{tmp_path / f'site{n}' / 'state.db'}")
    monkeypatch.setenv("CHANGEFLOW_DEMO_SOURCE", str(tmp_path / "source"))
    # two of the demo's tables keep the test short; the capture takes the tables it finds
    for table, rows, ddl in (
            ("regions", [(1, "Europe"), (2, "Americas"), (3, "Asia")],
             "region_id int, region_name string"),
            ("countries", [("UK", "United Kingdom", 1), ("US", "United States", 2)],
             "country_id string, country_name string, region_id int")):
        spark.createDataFrame(rows, ddl).write.parquet(
            str(tmp_path / "source" / f"hr.{table}" / "snap=1"))
    cfg = load_config(ROOT / "config" / "demo-3site.yaml")  # the shipped configuration

    captured = run_component(spark, cfg, "capture", "capture_hr").messages
    run_component(spark, cfg, "propagation", "dbs1_to_dbs2")
    forwarded = run_component(spark, cfg, "propagation", "dbs2_to_dbs3")
    assert forwarded.messages_propagated == captured > 0
    at_site3 = _rows(cfg, "strmadmin.streams_queue@site3")
    assert len(at_site3) == captured
    assert {r["source_database_name"] for r in at_site3} == {"DBS1.EXAMPLE.COM"}
    for apply in ("apply_dbs2", "apply_dbs3"):
        run_component(spark, cfg, "apply", apply)
        assert verify(spark, cfg, apply).ok, apply

    (path,) = [p for p in lag.lag(cfg) if p["apply"] == "apply_dbs3"]
    assert path["path"] == ("DBS1.EXAMPLE.COM → capture_hr → dbs1_to_dbs2 → dbs2_to_dbs3 → "
                            "apply_dbs3")
    assert path["transactions"] >= 1 and 0 <= path["p50"] <= path["p95"] < 600
    forward_rules = [r for r in rules.rules(cfg, "dbs2_to_dbs3") if r["rule"] == "DBS1_DML"]
    assert forward_rules[0]["evaluated"] == captured
    assert forward_rules[0]["matched"] == captured - sum(
        1 for r in at_site3 if r["kind"] == "DDL")


TWO_WAY_RULES = """
rules:
  FROM_A: {condition: ":dml.get_source_database_name() = 'DBA.EXAMPLE.COM'"}
  FROM_B: {condition: ":dml.get_source_database_name() = 'DBB.EXAMPLE.COM'"}
  ANY: {condition: ":dml.get_object_owner() = 'HR'"}
rule_sets:
  A: {rules: [FROM_A]}
  B: {rules: [FROM_B]}
  ALL: {rules: [ANY]}
clients:
  a_to_b: {type: propagation, positive_rule_set: %(a)s}
  b_to_a: {type: propagation, positive_rule_set: %(b)s}
  apply_a: {type: apply, positive_rule_set: B}
  apply_b: {type: apply, positive_rule_set: A}
"""


def _two_way(spark: Any, root: Path, conditions: bool) -> tuple[Any, list[int]]:
    root.mkdir()
    for site, ids in (("a", (1, 2)), ("b", (3, 4))):
        spark.createDataFrame([(i, f"r{i}") for i in ids], "region_id int, region_name string") \
            .write.parquet(str(root / f"src_{site}" / "hr.regions" / "snap=1"))
    sets = {"a": "A", "b": "B"} if conditions else {"a": "ALL", "b": "ALL"}
    (root / "rules.yaml").write_text(TWO_WAY_RULES % sets)
    (root / "p.yaml").write_text(textwrap.dedent(f"""
        version: 1
        rules: rules.yaml
        quality: {{enabled: false}}
        sites:
          a: {{staging_root: a/staging, target_root: a/targets, state_url: "sqlite:///a/s.db",
              database: DBA.EXAMPLE.COM}}
          b: {{staging_root: b/staging, target_root: b/targets, state_url: "sqlite:///b/s.db",
              database: DBB.EXAMPLE.COM}}
        queues: [{{name: strm.q, site: a}}, {{name: strm.q, site: b}}]
        captures:
          - {{name: cap_a, queue: strm.q@a, source: {{type: snapshot, database: DBA.EXAMPLE.COM,
              root: {root / 'src_a'}, tables: [{{name: hr.regions, key: [region_id]}}]}}}}
          - {{name: cap_b, queue: strm.q@b, source: {{type: snapshot, database: DBB.EXAMPLE.COM,
              root: {root / 'src_b'}, tables: [{{name: hr.regions, key: [region_id]}}]}}}}
        propagations:
          - {{name: a_to_b, source_queue: strm.q@a, destination_queue: strm.q@b}}
          - {{name: b_to_a, source_queue: strm.q@b, destination_queue: strm.q@a}}
        applies: [{{name: apply_a, queue: strm.q@a}}, {{name: apply_b, queue: strm.q@b}}]
    """))
    cfg = load_config(root / "p.yaml")
    for cap in ("cap_a", "cap_b"):
        run_component(spark, cfg, "capture", cap)
    moved = []
    for _ in range(3):
        moved.append(sum(run_component(spark, cfg, "propagation", p).messages_propagated
                         for p in ("a_to_b", "b_to_a")))
    return cfg, moved


@pytest.mark.spark
def test_two_way_parquet_source_database_conditions_stop_cycles(spark: Any,
                                                                tmp_path: Path) -> None:
    from changeflow.apply.engine import targets_of
    from changeflow.targets.read import read_table

    cfg, moved = _two_way(spark, tmp_path / "with", conditions=True)
    assert moved == [4, 0, 0]  # each site's 2 changes cross once, and never come back
    for apply, expected in (("apply_a", [3, 4]), ("apply_b", [1, 2])):
        run_component(spark, cfg, "apply", apply)
        catalog = targets_of(cfg, cfg.component("apply", apply))
        assert sorted(r.region_id for r in read_table(spark, catalog, "hr.regions")
                      .collect()) == expected
    # the same network without the conditions sends every change round and round
    _, cycling = _two_way(spark, tmp_path / "without", conditions=False)
    assert cycling[1] > 0 and cycling[2] > 0


TABLE = "CREATE TABLE t (id int PRIMARY KEY, v text);"


@pytest.mark.postgres
def test_two_way_postgres_tags_stop_cycles(pg: Any, tmp_path: Path, monkeypatch: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    for site in ("a", "b"):
        monkeypatch.setenv(f"CF_{site.upper()}_{tag}", pg.createdb(f"{site}_{tag}"))
        pg.sql(f"{site}_{tag}", TABLE)
    (tmp_path / "p.yaml").write_text(textwrap.dedent(f"""
        version: 1
        sites:
          a: {{staging_root: a/staging, target_root: a/targets, state_url: "sqlite:///a/s.db",
              database: PGA.EXAMPLE.COM}}
          b: {{staging_root: b/staging, target_root: b/targets, state_url: "sqlite:///b/s.db",
              database: PGB.EXAMPLE.COM}}
        queues: [{{name: strm.q, site: a}}, {{name: strm.q, site: b}}]
        captures:
          - {{name: cap_a, queue: strm.q@a, source: {{type: postgres, database: PGA.EXAMPLE.COM,
              url_env: CF_A_{tag}, slot: a_{tag}, tables: [public.t]}}}}
          - {{name: cap_b, queue: strm.q@b, source: {{type: postgres, database: PGB.EXAMPLE.COM,
              url_env: CF_B_{tag}, slot: b_{tag}, tables: [public.t]}}}}
        applies:
          - {{name: apply_b, queue: strm.q@a, target: {{type: postgres, url_env: CF_B_{tag}}},
              apply_tag: "0b"}}
          - {{name: apply_a, queue: strm.q@b, target: {{type: postgres, url_env: CF_A_{tag}}},
              apply_tag: "0a"}}
    """))
    cfg = load_config(tmp_path / "p.yaml")
    from changeflow.apply.postgres import apply_pg_once
    from changeflow.capture.postgres import run_pg_capture

    for cap in ("cap_a", "cap_b"):
        run_pg_capture(None, cfg, cap)  # creates the slots
    pg.sql(f"a_{tag}", "INSERT INTO t VALUES (1, 'made at a');")
    pg.sql(f"b_{tag}", "INSERT INTO t VALUES (2, 'made at b');")
    assert [run_pg_capture(None, cfg, c).messages for c in ("cap_a", "cap_b")] == [1, 1]
    assert [apply_pg_once(None, cfg, a).changes for a in ("apply_b", "apply_a")] == [1, 1]
    # the applied changes are tagged (replication origins): the captures skip them
    again = [run_pg_capture(None, cfg, c) for c in ("cap_a", "cap_b")]
    assert [r.messages for r in again] == [0, 0]
    assert [r.tagged_skipped for r in again] == [1, 1]
    for site in ("a", "b"):
        with pg.connect(f"{site}_{tag}") as c:
            assert c.execute("SELECT id, v FROM t ORDER BY id").fetchall() == [
                (1, "made at a"), (2, "made at b")]
