"""Views, run records, JSON run events, progress and metrics over a real pipeline run."""

from __future__ import annotations

import json
import textwrap
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from changeflow.config import load_config
from changeflow.runner import run_component
from changeflow.views import get

pytestmark = pytest.mark.spark

RULES = """
rules:
  HR: {condition: "(:dml.get_object_owner() = 'HR')"}
  JOBS: {condition: "(:dml.get_object_name() = 'JOBS')"}
  NOT_T: {condition: "(:dml.get_object_name() = 'T')"}
rule_sets:
  P: {rules: [HR, JOBS]}
  N: {rules: [NOT_T]}
clients:
  prop: {type: propagation, positive_rule_set: P, negative_rule_set: N}
"""


def _pipeline(spark: Any, root: Path) -> Any:
    for table, rows in (("hr.regions", [(1, "a"), (2, "b"), (3, "c")]), ("hr.t", [(9, "x")])):
        spark.createDataFrame(rows, "id int, name string").write.parquet(
            str(root / "src" / table / "snap=1"))
    (root / "rules.yaml").write_text(textwrap.dedent(RULES))
    (root / "p.yaml").write_text(textwrap.dedent(f"""
        version: 1
        rules: rules.yaml
        sites:
          s1: {{staging_root: s1/staging, target_root: s1/targets,
               state_url: "sqlite:///s1/state.db", database: DBS1}}
          s2: {{staging_root: s2/staging, target_root: s2/targets,
               state_url: "sqlite:///s2/state.db", database: DBS2}}
        queues: [{{name: hr.q, site: s1}}, {{name: hr.q, site: s2}}]
        captures:
          - {{name: cap, queue: hr.q@s1, source: {{type: snapshot, database: DBS1,
              root: {root / 'src'}, tables: [{{name: hr.regions, key: [id]}},
                                              {{name: hr.t, key: [id]}}]}}}}
        propagations: [{{name: prop, source_queue: hr.q@s1, destination_queue: hr.q@s2}}]
        applies: [{{name: app, queue: hr.q@s2}}]
    """))
    return load_config(root / "p.yaml")


def test_views_after_a_run(spark: Any, tmp_path: Path, capfd: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("CHANGEFLOW_PROGRESS_SECONDS", "0.3")
    cfg = _pipeline(spark, tmp_path)
    for kind, name in (("capture", "cap"), ("propagation", "prop"), ("apply", "app")):
        run_component(spark, cfg, kind, name)

    out, err = capfd.readouterr()
    events = [json.loads(line) for line in err.splitlines()
              if line.startswith("{") and '"event"' in line]
    assert '"event"' not in out  # run events are logged, never mixed with standard output
    ends = {e["component"]: e for e in events if e["event"] == "end"}
    assert ends["capture:cap"]["messages"] == 4 and ends["propagation:prop"]["messages"] == 3
    assert ends["apply:app"]["status"] == "succeeded" and ends["apply:app"]["seconds"] > 0
    assert len({e["run_id"] for e in events}) == 3  # one id per run, on every event
    assert any(e["event"] == "progress" for e in events)

    (cap,) = get("captures").fetch(cfg)
    assert (cap["position"], cap["messages_captured"], cap["lag"], cap["state"]) == (
        "snapshot 1", 4, "0 snapshots", "IDLE")
    (app,) = get("applies").fetch(cfg)
    assert app["position"] >= 1 and app["pending_messages"] == 0
    assert app["transactions_applied"] == 1 and app["last_applied_commit_time"] is not None
    (prop,) = get("propagations").fetch(cfg)
    assert prop["pending_messages"] == 0 and prop["state"] == "IDLE"
    matched = {(r["rule_set_type"], r["rule"]): (r["matched"], r["evaluated"])
               for r in get("rules").fetch(cfg, "prop")}
    assert matched == {("POSITIVE", "HR"): (4, 4), ("POSITIVE", "JOBS"): (0, 4),
                       ("NEGATIVE", "NOT_T"): (1, 4)}
    (path,) = get("lag").fetch(cfg)
    assert path["path"] == "DBS1 → cap → prop → app" and path["transactions"] == 1
    runs = get("runs").fetch(cfg)
    assert sorted(r["component"] for r in runs) == ["apply:app", "capture:cap", "propagation:prop"]
    assert all(r["status"] == "succeeded" for r in runs)

    from changeflow.cli import main

    cli = CliRunner()
    out = cli.invoke(main, ["views", "captures", "--json", "--config", cfg.source_path])
    assert out.exit_code == 0 and json.loads(out.output)[0]["messages_captured"] == 4
    table = cli.invoke(main, ["views", "rules", "prop", "--config", cfg.source_path])
    assert table.exit_code == 0 and "NOT_T" in table.output
    bad = cli.invoke(main, ["views", "applies", "nope", "--config", cfg.source_path])
    assert bad.exit_code != 0 and "no apply named 'nope'" in bad.output


def test_metrics_endpoint(spark: Any, tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from changeflow.testing.pg_cluster import free_port
    from changeflow.views.metrics import serve

    cfg = _pipeline(spark, tmp_path)
    run_component(spark, cfg, "capture", "cap")
    run_component(spark, cfg, "propagation", "prop")
    server, _ = serve(cfg.source_path, port=free_port())
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics") as r:
            text = r.read().decode()
    finally:
        server.shutdown()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples[("changeflow_messages_total", (("component", "capture:cap"),))] == 4
    pending = ("changeflow_consumer_pending_messages",
               (("consumer", "apply:app"), ("queue", "hr.q@s2")))
    assert samples[pending] == 3
    assert samples[("changeflow_queue_messages", (("queue", "hr.q@s2"), ("state", "ready")))] == 3
    assert samples[("changeflow_run_failed", (("component", "propagation:prop"),))] == 0
