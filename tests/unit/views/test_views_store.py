"""Views over a state store filled by hand: exact depths, backlogs, lag quantiles, errors."""

from __future__ import annotations

import datetime as dt
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from changeflow.config import load_config
from changeflow.obs import lag as L
from changeflow.sites import open_pipeline
from changeflow.state import schema, schema_obs, utcnow
from changeflow.views import VIEWS, UnknownComponentError, get

PIPELINE = """
version: 1
sites:
  s1: {{staging_root: {root}/staging, target_root: {root}/targets,
       state_url: "sqlite:///{root}/state.db", database: DBS1}}
queues: [{{name: hr.q, site: s1}}]
captures:
  - {{name: cap, queue: hr.q, source: {{type: snapshot, database: DBS1, root: {root}/src,
      tables: [{{name: hr.t, key: [id]}}]}}}}
applies: [{{name: app, queue: hr.q}}]
"""


@pytest.fixture()
def cfg(tmp_path: Path) -> Any:
    (tmp_path / "p.yaml").write_text(textwrap.dedent(PIPELINE.format(root=tmp_path)))
    cfg = load_config(tmp_path / "p.yaml")
    open_pipeline(cfg)
    from changeflow.sites import site

    store = site(cfg, "s1").store
    now = utcnow()
    B, C = schema.queue_batches, schema.queue_consumers
    with store.begin() as c:
        c.execute(B.insert(), [{"queue": "hr.q", "batch_id": f"b{i}", "path": f"/x/b{i}",
                                "n_messages": 10 * i, "n_bytes": 100, "producer": "capture:cap",
                                "created_at": now, "oldest_time": now - dt.timedelta(hours=i),
                                "state": "quarantined" if i == 5 else "ready"}
                               for i in range(1, 7)])
        c.execute(C.insert().values(queue="hr.q", consumer="user:u", kind="user", position=2,
                                    updated_at=now))
        c.execute(C.update().where(C.c.consumer == "apply:app").values(position=4))
        c.execute(schema_obs.lag_hist.insert(), [
            {"apply": "app", "source_database": "DBS1", "recorded_at": now, "n": 3,
             "max_seconds": 9.0, "bins": json.dumps(L.histogram([1.0, 2.0, 9.0]))},
            {"apply": "app", "source_database": "DBS1", "recorded_at": now - dt.timedelta(hours=2),
             "n": 1, "max_seconds": 999.0, "bins": json.dumps(L.histogram([999.0]))}])
    return cfg


def test_queue_depth_per_state_and_consumer_backlogs(cfg: Any) -> None:
    (q,) = get("queues").fetch(cfg)
    # batches 1..6 of 10..60 messages; 5 is quarantined; the slowest consumer is at 2
    assert (q["processed"], q["ready"], q["quarantined"]) == (10 + 20, 30 + 40 + 60, 50)
    assert q["consumers"] == 2 and q["oldest_message"] is not None
    backlog = {c["consumer"]: (c["position"], c["pending_batches"], c["pending_messages"])
               for c in get("consumers").fetch(cfg, "hr.q@s1")}
    assert backlog == {"user:u": (2, 3, 30 + 40 + 60), "apply:app": (4, 1, 60)}
    assert [e["state"] for e in get("exceptions").fetch(cfg)] == []


def test_lag_only_counts_the_last_hour(cfg: Any) -> None:
    (row,) = get("lag").fetch(cfg)
    assert row["transactions"] == 3 and row["max"] == 9.0
    assert row["p50"] == pytest.approx(2.0, rel=0.02) and row["p95"] == pytest.approx(9.0, rel=0.02)
    assert row["path"] == "DBS1 → cap → app"
    assert get("applies").fetch(cfg, "app")[0]["transactions_applied"] == 4


@pytest.mark.parametrize("view, name", [("captures", "nope"), ("applies", "cap"),
                                        ("queues", "hr.other"), ("rules", "ghost"),
                                        ("lag", "nope"), ("runs", "nope"),
                                        ("user-queues", "hr.none"), ("listeners", "L1")])
def test_unknown_components_are_refused(cfg: Any, view: str, name: str) -> None:
    with pytest.raises(UnknownComponentError, match=f"named {name!r}"):
        get(view).fetch(cfg, name)


def test_unknown_view() -> None:
    with pytest.raises(UnknownComponentError, match="no view named 'dba_x'"):
        get("dba_x")
    assert {"captures", "propagations", "applies", "apply-errors", "queues", "consumers",
            "exceptions", "rules", "lag", "runs", "user-queues", "listeners", "targets",
            "target-snapshots"} == set(VIEWS)
