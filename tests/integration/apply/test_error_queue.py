"""The error queue of a Parquet apply: show, re-execute (with a fix), delete, stop on error;
and the ``changeflow apply`` commands over it."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from changeflow.apply import errorq, views
from changeflow.apply.engine import ApplyStoppedError, apply_once
from changeflow.apply.errorq import ErrorNotFoundError
from changeflow.apply.reexec import execute_errors
from changeflow.cli import main
from changeflow.sites import queue_site

from .conftest import QUEUE, row, table_rows, vals

pytestmark = pytest.mark.spark
APPLY = "applies: [{name: ap, queue: strmadmin.apply_q@site2, buckets: 2}]"


def _failing_batch(spark, cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    enqueue(cfg, [row("INSERT", new=vals(id=1, name="a"), txn="t1", scn=10)])
    apply_once(spark, cfg, "ap")
    enqueue(cfg, [
        # t2 updates a row that does not exist yet: a conflict, t2 goes to the error queue
        row("UPDATE", new=vals(id=2, name="b2"), old=vals(id=2, name="b"), txn="t2", scn=20,
            pos=1),
        row("INSERT", new=vals(id=5, name="e"), txn="t2", scn=20, pos=2),
        row("INSERT", new=vals(id=3, name="c"), txn="t3", scn=30),
    ])
    res = apply_once(spark, cfg, "ap")
    assert (res.transactions, res.errors) == (1, 1)


def test_reexecute_with_a_fix_then_fail_again_then_delete(spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg = make_cfg(APPLY)
    _failing_batch(spark, cfg, enqueue)
    rt, q = queue_site(cfg, QUEUE)
    [entry] = errorq.entries(rt.store, "ap")
    shown = views.error_lcrs(cfg, "ap", entry.id)
    assert [(r["position"], r["command_type"], r["failing"]) for r in shown["lcrs"]] == [
        (1, "UPDATE", True), (2, "INSERT", False)]
    assert shown["lcrs"][0]["new_values"] == {"ID": 2, "NAME": "b2"}
    # re-executed as it is: it fails again and stays, with one more attempt
    res = execute_errors(cfg, "ap", [entry.id], spark=spark)
    assert res.applied == [] and entry.id in res.failed
    [again] = errorq.entries(rt.store, "ap")
    assert again.attempts == 2 and "delete conflict" in again.error_message
    # with a fix: the UPDATE of the missing row becomes an INSERT
    def fix(lcrs):  # type: ignore[no-untyped-def]
        lcrs[0].set_command_type("INSERT")
        for column in ("ID", "NAME"):
            lcrs[0].delete_column(column, "OLD")
        return lcrs

    res = execute_errors(cfg, "ap", None, fix=fix, spark=spark)
    assert res.applied == [entry.id] and not res.failed
    assert errorq.entries(rt.store, "ap") == []
    assert table_rows(spark, cfg) == [(1, "a"), (2, "b2"), (3, "c"), (5, "e")]
    with pytest.raises(ErrorNotFoundError, match=f"no error {entry.id}"):
        execute_errors(cfg, "ap", [entry.id], spark=spark)
    # a replay of the re-executed transaction is skipped: it is done now
    enqueue(cfg, [row("INSERT", new=vals(id=5, name="e"), txn="t2", scn=20, pos=2)])
    assert apply_once(spark, cfg, "ap").skipped == 1


def test_reexecution_keeps_commit_order(spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    """A re-executed transaction does not override what a later commit of its source wrote."""
    cfg = make_cfg(APPLY)
    enqueue(cfg, [row("INSERT", new=vals(id=1, name="a"), txn="t1", scn=10),
                  row("UPSERT", new=vals(id=1, name="old"), txn="t2", scn=20),
                  row("UPDATE", new=vals(id=1, name="new"), old=vals(id=1), txn="t3", scn=30)])
    apply_once(spark, cfg, "ap")
    rt, _ = queue_site(cfg, QUEUE)
    [entry] = errorq.entries(rt.store, "ap")

    def fix(lcrs):  # type: ignore[no-untyped-def]
        lcrs[0].set_command_type("UPDATE")
        lcrs[0].set_value("OLD", "ID", 1)
        return lcrs

    assert execute_errors(cfg, "ap", [entry.id], fix=fix, spark=spark).applied == [entry.id]
    assert table_rows(spark, cfg) == [(1, "new")]


def test_stop_on_error(spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg = make_cfg("""
        applies: [{name: ap, queue: strmadmin.apply_q@site2, buckets: 2,
                   errors: {stop_on_error: true}}]
    """)
    enqueue(cfg, [row("INSERT", new=vals(id=1, name="a"), txn="t1", scn=10),
                  row("DELETE", old=vals(id=7), txn="t2", scn=20),
                  row("INSERT", new=vals(id=3, name="c"), txn="t3", scn=30)])
    with pytest.raises(ApplyStoppedError, match="stopped at transaction t2"):
        apply_once(spark, cfg, "ap")
    assert table_rows(spark, cfg) == [(1, "a")]
    res = apply_once(spark, cfg, "ap")  # the next run goes on after it
    assert (res.transactions, res.skipped) == (1, 2)
    assert table_rows(spark, cfg) == [(1, "a"), (3, "c")]


def test_cli_lists_shows_and_deletes(spark, make_cfg, enqueue) -> None:  # type: ignore[no-untyped-def]
    cfg = make_cfg(APPLY)
    _failing_batch(spark, cfg, enqueue)
    runner = CliRunner()
    path = cfg.source_path
    out = runner.invoke(main, ["apply", "errors", "list", "--config", path, "-o", "json"])
    assert out.exit_code == 0, out.output
    [e] = json.loads(out.output)
    assert (e["transaction_id"], e["n_messages"], e["error_kind"]) == ("t2", 2, "conflict")
    out = runner.invoke(main, ["apply", "errors", "show", str(e["id"]), "--apply", "ap",
                               "--config", path])
    assert out.exit_code == 0 and "delete conflict" in out.output
    out = runner.invoke(main, ["apply", "errors", "delete", "999", "--apply", "ap",
                               "--config", path])
    assert out.exit_code != 0 and "no error 999" in out.output
    out = runner.invoke(main, ["apply", "conflict-handlers", "set", "--apply", "ap", "--config",
                               path, "--table", "hr.emp", "--method", "maximum", "--column",
                               "bogus", "--resolution-column", "bogus"])
    assert out.exit_code != 0 and "'bogus' is not a column" in out.output
    out = runner.invoke(main, ["apply", "conflict-handlers", "set", "--apply", "ap", "--config",
                               path, "--table", "hr.emp", "--conflict", "delete", "--method",
                               "overwrite"])
    assert out.exit_code == 0, out.output
    out = runner.invoke(main, ["apply", "conflict-handlers", "list", "--apply", "ap",
                               "--config", path, "-o", "json"])
    assert [(h["conflict"], h["method"]) for h in json.loads(out.output)] == [
        ("delete", "OVERWRITE")]
    out = runner.invoke(main, ["apply", "progress", "--config", path, "-o", "json"])
    [p] = json.loads(out.output)
    assert (p["errors_in_queue"], p["pending_messages"]) == (1, 0)
    out = runner.invoke(main, ["apply", "errors", "delete", str(e["id"]), "--apply", "ap",
                               "--config", path])
    assert out.exit_code == 0 and views.list_errors(cfg) == []
