"""The checks inside propagate_once and apply_once: a bad batch never reaches a consumer."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from changeflow import lcr
from changeflow.apply.engine import apply_once, targets_of
from changeflow.cli import main
from changeflow.propagation import propagate_once
from changeflow.quality import QualityError, results
from changeflow.queues import io as qio
from changeflow.queues.quarantine import quarantined
from changeflow.sites import consumer_name, queue_site
from changeflow.targets.read import read_table

from .conftest import row_lcr

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SRC, DST = "strmadmin.streams_queue@site1", "strmadmin.streams_queue@site2"


def _enqueue(spark, cfg, ref, df) -> None:  # type: ignore[no-untyped-def]
    """Enqueue directly (as a faulty producer would), bypassing every check."""
    rt, q = queue_site(cfg, ref)
    assert qio.enqueue(spark, rt.catalog, q, df, producer="test") is not None


def test_propagation_sets_the_bad_batch_aside_and_moves_on(spark, pipeline, lcr_frame) -> None:  # type: ignore[no-untyped-def]
    _enqueue(spark, pipeline, SRC, lcr_frame([row_lcr(1), row_lcr(2, "DELETE",
                                              new_values={"X": lcr.encode_value(1)})]))
    with pytest.raises(QualityError, match="delete_no_new_values") as info:
        propagate_once(spark, pipeline, "p12")
    seq = info.value.report.quarantine_seq
    assert seq is not None and "queues release" in str(info.value)
    dst_rt, dst_q = queue_site(pipeline, DST)
    assert dst_rt.catalog.info(dst_q).depth == 0  # no consumer sees it
    [held] = quarantined(dst_rt.catalog, dst_q)
    assert (held.seq, held.origin, held.n_messages) == (seq, "quality", 2)
    # The source moved on: the next (good) batch flows.
    src_rt, src_q = queue_site(pipeline, SRC)
    assert src_rt.catalog.pending(src_q, consumer_name("propagation", "p12")) == []
    _enqueue(spark, pipeline, SRC, lcr_frame([row_lcr(3, transaction_id="tx20",
                                                      commit_scn=20, msg_id="m3")]))
    assert propagate_once(spark, pipeline, "p12").messages_propagated == 1
    assert dst_rt.catalog.info(dst_q).depth == 1
    # Released from the CLI once fixed, it reaches the apply.
    out = CliRunner().invoke(main, ["queues", "release", DST, str(seq), "--config",
                                    pipeline.source_path])
    assert out.exit_code == 0, out.output
    assert dst_rt.catalog.info(dst_q).depth == 3


def test_clean_propagation_and_apply_pass(spark, pipeline, lcr_frame, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _enqueue(spark, pipeline, SRC, lcr_frame([row_lcr(1), row_lcr(2), row_lcr(3)]))
    res = propagate_once(spark, pipeline, "p12")
    assert res.messages_propagated == 3
    assert apply_once(spark, pipeline, "ap").messages == 3
    rt, _ = queue_site(pipeline, DST)
    stages = {r.stage: r.status for r in results.latest(rt.store)}
    assert stages == {"propagation:p12": "passed", "apply:ap": "passed"}
    assert any(line.startswith("quality propagation:p12 @site2: passed (3 rows")
               for line in results.summary(pipeline))
    runner = CliRunner()
    out = runner.invoke(main, ["quality", "latest", "--config", pipeline.source_path])
    assert out.exit_code == 0, out.output
    assert "propagation:p12" in out.output and "passed" in out.output
    out = runner.invoke(main, ["quality", "docs", "--config", pipeline.source_path,
                               "--out", str(tmp_path / "docs")])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "docs" / "index.html").exists()
    assert list((tmp_path / "docs" / "validations" / "lcr_batch").rglob("*.html"))


def _target_rows(spark, cfg):  # type: ignore[no-untyped-def]
    cat = targets_of(cfg, cfg.applies[0])
    return sorted(tuple(r) for r in read_table(spark, cat, "hr.regions").collect())


def test_apply_null_key_goes_to_the_error_queue(spark, pipeline, lcr_frame) -> None:  # type: ignore[no-untyped-def]
    from changeflow.apply import errorq

    image = {"REGION_ID": lcr.encode_value(None, "INTEGER"), "REGION_NAME": lcr.encode_value("x")}
    _enqueue(spark, pipeline, DST, lcr_frame([row_lcr(1, new_values=image)]))
    res = apply_once(spark, pipeline, "ap")
    assert (res.transactions, res.errors) == (0, 1)
    rt, _ = queue_site(pipeline, DST)
    [entry] = errorq.entries(rt.store, "ap")
    assert "key column 'region_id' is NULL" in entry.error_message
    assert _target_rows(spark, pipeline) == []


def test_replayed_lcrs_still_reconcile(spark, pipeline, lcr_frame) -> None:  # type: ignore[no-untyped-def]
    from changeflow.state import schema_apply

    msgs = [row_lcr(1), row_lcr(2), row_lcr(1, "DELETE", transaction_id="tx11", commit_scn=11,
                                              position=9)]
    _enqueue(spark, pipeline, DST, lcr_frame(msgs))
    apply_once(spark, pipeline, "ap")
    rt, _ = queue_site(pipeline, DST)
    with rt.store.begin() as conn:  # forget which transactions were applied: a true replay
        conn.execute(schema_apply.applied_txns.delete())
        conn.execute(schema_apply.watermarks.delete())
    _enqueue(spark, pipeline, DST, lcr_frame(msgs))
    assert apply_once(spark, pipeline, "ap").messages == 3
    assert _target_rows(spark, pipeline) == [(2, "r2")]
    assert {r.stage: r.status for r in results.latest(rt.store)} == {"apply:ap": "passed"}
