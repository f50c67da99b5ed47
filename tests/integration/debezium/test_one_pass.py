"""One JSON pass when the files' first events describe them, two when they do not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from changeflow import lcr
from changeflow.debezium.capture import run_debezium_capture

pytestmark = pytest.mark.spark

ID = {"type": "int64", "optional": False, "field": "id"}
NAME = {"type": "string", "optional": True, "field": "name"}
NOTE = {"type": "string", "optional": True, "field": "note"}


def _schema(fields: list[dict[str, Any]]) -> dict[str, Any]:
    image = {"type": "struct", "optional": True, "fields": fields}
    return {"type": "struct", "name": "inv.inventory.people.Envelope", "optional": False,
            "fields": [{**image, "field": "before"}, {**image, "field": "after"},
                       {"type": "string", "field": "op"}]}


def _event(dbz: Any, schema: dict[str, Any], op: str, after: dict[str, Any], lsn: int,
           table: str = "people") -> dict[str, Any]:
    source = dbz.pg_source(lsn, lsn, lsn, table=table, ts_ms=1700000000000)
    return {"schema": schema, "payload": {"before": None, "after": after, "source": source,
                                          "op": op, "ts_ms": 1700000001000}}


def _capture(dbz: Any, tmp_path: Path, root: Path) -> Any:
    return dbz.capture(tmp_path, root, [{"name": "inventory.people", "key": ["id"]}])


def _values(row: dict[str, Any]) -> dict[str, Any]:
    return {k: lcr.decode_value(v) for k, v in row["new_values"]}


def test_files_alike_are_read_once(spark: Any, tmp_path: Path, dbz: Any) -> None:
    root = tmp_path / "topics"
    s = _schema([ID, NAME])
    for f in range(3):
        dbz.write_events(root / "inv.inventory.people" / f"p+0+{f:010d}.json", [
            _event(dbz, s, "c" if i < 4 else "u", {"id": i % 4, "name": f"n{f}-{i}"},
                   1000 * f + 10 * i + 10) for i in range(6)])
    cfg = _capture(dbz, tmp_path, root)
    result = run_debezium_capture(spark, cfg, "dbz")
    assert (result.passes, result.events, result.messages) == (1, 18, 18)
    assert result.tables == ["inventory.people"]
    rows = dbz.queue_rows(cfg, dbz.QUEUE)
    assert sorted(_values(r)["NAME"] for r in rows) == sorted(
        f"n{f}-{i}" for f in range(3) for i in range(6))
    assert {r["command_type"] for r in rows} == {"INSERT", "UPDATE"}
    assert len(dbz.batch_dirs(tmp_path)) == 1


def test_a_schema_change_inside_a_file_is_surveyed(spark: Any, tmp_path: Path,
                                                   dbz: Any) -> None:
    """The first event does not describe a later one (a column added): the events are
    surveyed and captured with both schemas, and the one-pass batch is not kept."""
    root = tmp_path / "topics"
    old, new = _schema([ID, NAME]), _schema([ID, NAME, NOTE])
    dbz.write_events(root / "inv.inventory.people" / "p+0+0000000000.json", [
        _event(dbz, old, "c", {"id": 1, "name": "Ann"}, 10),
        _event(dbz, new, "c", {"id": 2, "name": "Bob", "note": "added"}, 20),
    ])
    cfg = _capture(dbz, tmp_path, root)
    result = run_debezium_capture(spark, cfg, "dbz")
    assert (result.passes, result.messages) == (3, 2)
    rows = {r["commit_scn"]: _values(r) for r in dbz.queue_rows(cfg, dbz.QUEUE)}
    assert rows == {10: {"ID": 1, "NAME": "Ann"}, 20: {"ID": 2, "NAME": "Bob", "NOTE": "added"}}
    assert len(dbz.batch_dirs(tmp_path)) == 1


def test_an_event_of_a_table_the_first_events_do_not_name(spark: Any, tmp_path: Path,
                                                          dbz: Any) -> None:
    """A file mixing tables: the second table's events are surveyed, not dropped."""
    root = tmp_path / "topics"
    s = _schema([ID, NAME])
    dbz.write_events(root / "mixed" / "m+0+0000000000.json", [
        _event(dbz, s, "c", {"id": 1, "name": "Ann"}, 10),
        _event(dbz, s, "c", {"id": 9, "name": "Zed"}, 20, table="others"),
    ])
    cfg = dbz.capture(tmp_path, root, [{"name": "inventory.people", "key": ["id"]},
                                       {"name": "inventory.others", "key": ["id"]}])
    result = run_debezium_capture(spark, cfg, "dbz")
    assert (result.passes, result.messages) == (3, 2)
    assert result.tables == ["inventory.others", "inventory.people"]
    names = {r["object_name"]: _values(r)["NAME"] for r in dbz.queue_rows(cfg, dbz.QUEUE)}
    assert names == {"PEOPLE": "Ann", "OTHERS": "Zed"}
    assert len(dbz.batch_dirs(tmp_path)) == 1


def test_a_later_schemaless_event_with_an_undeclared_column_fails_the_run(
        spark: Any, tmp_path: Path, dbz: Any) -> None:
    """Without schema blocks only the images' keys show a column the table does not
    have: the first event guesses right, a later one holds another column. The one pass
    counts it a miss, and the survey names it; nothing is enqueued (the column is never
    dropped silently)."""
    from changeflow.debezium.reader import DebeziumFileError

    root = tmp_path / "topics"
    src = dbz.pg_source
    dbz.write_events(root / "inv.inventory.people" / "p+0+0000000000.json", [
        {"before": None, "after": {"id": 1, "name": "Ann"}, "op": "c", "ts_ms": 1,
         "source": src(10, 10, 10, table="people", ts_ms=1700000000000)},
        {"before": None, "after": {"id": 2, "name": "Bob", "colour": "red"}, "op": "c",
         "ts_ms": 1, "source": src(20, 20, 20, table="people", ts_ms=1700000000000)}])
    cfg = dbz.capture(tmp_path, root, [{"name": "inventory.people", "key": ["id"],
                                        "columns": {"id": "bigint", "name": "text"}}])
    with pytest.raises(DebeziumFileError, match="column 'colour', which the declared table"):
        run_debezium_capture(spark, cfg, "dbz")
    assert dbz.queue_rows(cfg, dbz.QUEUE) == []
    assert dbz.batch_dirs(tmp_path) == []
