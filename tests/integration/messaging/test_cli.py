"""``changeflow aq``: the commands against a real store, their output and their refusals."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from changeflow.cli import main
from changeflow.config import load_config
from changeflow.messaging import views
from changeflow.sites import site

PIPELINE = """
version: 1
sites:
  s1: {staging_root: st, target_root: t, state_url: "sqlite:///state.db", database: D1}
"""


@pytest.fixture()
def cli(tmp_path: Path):
    (tmp_path / "p.yaml").write_text(textwrap.dedent(PIPELINE))
    runner = CliRunner()

    def invoke(*args: str, code: int = 0) -> str:
        res = runner.invoke(main, ["aq", *args, "--config", str(tmp_path / "p.yaml")])
        assert res.exit_code == code, (res.output, res.exception)
        return res.output

    invoke.store = site(load_config(tmp_path / "p.yaml"), "s1").store  # type: ignore[attr-defined]
    invoke.tmp = tmp_path  # type: ignore[attr-defined]
    return invoke


def test_admin_enqueue_dequeue_and_views(cli) -> None:
    cli("create-type", "oe.order_t", "--field", "id:INTEGER", "--field", "region:VARCHAR2(8)")
    cli("create-queue-table", "oe.orders_qt", "--payload-type", "oe.order_t",
        "--multiple-consumers", "--sort-order", "priority,enq_time")
    cli("create-queue", "oe.orders", "--queue-table", "oe.orders_qt", "--max-retries", "0")
    out = cli("enqueue", "oe.orders", "--payload", '{"id": 1}', code=65)
    assert "stopped for enqueue" in out
    cli("start-queue", "oe.orders")
    cli("subscribers", "add", "oe.orders", "west", "--rule", "tab.user_data.region = 'WEST'")
    cli("subscribers", "add", "oe.orders", "audit")
    (tmp := cli.tmp / "orders.json").write_text(json.dumps(
        [{"id": 2, "region": "WEST"}, {"id": 3, "region": "EAST"}]))
    cli("enqueue", "oe.orders", "--file", str(tmp), "--array", "--priority", "2")
    ids = json.loads(cli("enqueue", "oe.orders", "--payload", '{"id": 1, "region": "WEST"}',
                         "--priority", "1", "--correlation", "c1", "-o", "json"))
    (q,) = json.loads(cli("queues", "oe.orders", "-o", "json"))
    assert (q["READY"], q["WAITING"], q["subscribers"]) == (5, 0, 2)
    subs = {s["name"]: s["pending"] for s in json.loads(cli("subscribers", "list", "-o", "json"))}
    assert subs == {"WEST": 2, "AUDIT": 3}
    got = json.loads(cli("dequeue", "oe.orders", "--consumer", "west", "--max", "5", "-o",
                         "json"))
    assert [(m["msg_id"], m["payload"]) for m in got][0] == (ids[0]["msg_id"],
                                                              {"id": 1, "region": "WEST"})
    assert len(got) == 2
    browse = cli("dequeue", "oe.orders", "--consumer", "audit", "--mode", "browse",
                 "--correlation", "c1")
    assert ids[0]["msg_id"] in browse and "PAYLOAD" in browse
    assert "(no message)" in cli("dequeue", "oe.orders", "--consumer", "west")
    table = cli("queues")
    assert "oe.orders" in table and "READY" in table and "UNDELIVERABLE" in table


def test_exceptions_requeue_delete_and_time_manager(cli) -> None:
    cli("create-queue-table", "app.q_qt")
    cli("create-queue", "app.q", "--queue-table", "app.q_qt", "--start")
    a = json.loads(cli("enqueue", "app.q", "--payload", '"00ff"', "--expiration", "0.2",
                       "-o", "json"))[0]["msg_id"]
    b = json.loads(cli("enqueue", "app.q", "--payload", '"01"', "--expiration", "0.2",
                       "-o", "json"))[0]["msg_id"]
    time.sleep(0.3)
    report = json.loads(cli("time-manager", "--once", "-o", "json"))
    assert report[0]["expired"] == 2
    listed = json.loads(cli("exceptions", "list", "app.q", "-o", "json"))
    assert {m["msg_id"] for m in listed} == {a, b} and listed[0]["state"] == "EXPIRED"
    assert "1 messages re-enqueued" in cli("exceptions", "requeue", "app.aq$_q_qt_e", a)
    assert "1 messages deleted" in cli("exceptions", "delete", "app.aq$_q_qt_e", "--all")
    assert views.queues(cli.store, "app.q")[0]["READY"] == 1
    (back,) = json.loads(cli("messages", "app.q", "-o", "json"))
    assert (back["msg_id"], back["state"], back["attempts"]) == (a, "READY", 0)


def test_privileges_and_refusals(cli) -> None:
    cli("create-queue-table", "hr.s_qt", "--secure")
    cli("create-queue", "hr.s", "--queue-table", "hr.s_qt", "--start")
    out = cli("enqueue", "hr.s", "--payload", '"00"', "--user", "app", code=65)
    assert "APP has no ENQUEUE privilege on secure queue hr.s" in out
    cli("grant", "enqueue", "hr.s", "app")
    cli("enqueue", "hr.s", "--payload", '"00"', "--user", "app")
    assert "ENQUEUE" in cli("privileges", "hr.s")
    cli("revoke", "enqueue", "hr.s", "app")
    cli("enqueue", "hr.s", "--payload", '"00"', "--user", "app", code=65)
    assert "not valid JSON" in cli("enqueue", "hr.s", "--payload", "{", code=2)
    assert "hexadecimal" in cli("enqueue", "hr.s", "--payload", "12", "--user", "hr", code=65)
    assert "does not exist" in cli("dequeue", "hr.nope", code=65)
    out = cli("dequeue", "hr.s", "--condition", "priority = = 1", "--user", "hr", code=65)
    assert "column 12" in out and "^" in out
    assert "still holds 1 messages" in cli("drop-queue", "hr.s", code=65)
    cli("drop-queue", "hr.s", "--force")
    cli("drop-queue-table", "hr.s_qt")
    assert json.loads(cli("queue-tables", "-o", "json")) == []
