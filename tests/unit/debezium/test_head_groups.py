"""The files' first lines as survey groups (the one-pass guess), without Spark."""

from __future__ import annotations

import json

from changeflow.debezium.config import DebeziumSource
from changeflow.debezium.onepass import guess_from, head_groups

SCHEMA = {"type": "struct", "fields": [
    {"type": "struct", "field": "after", "optional": True, "fields": [
        {"type": "int64", "field": "id"}, {"type": "string", "field": "name"}]}]}
SOURCE = {"connector": "postgresql", "schema": "shop", "table": "people", "lsn": 1}


def test_events_become_groups_and_the_rest_is_left_out() -> None:
    event = {"schema": SCHEMA, "payload": {"op": "c", "after": {"id": 1, "name": "a"},
                                           "before": None, "source": SOURCE}}
    lines = [("f1", json.dumps(event, indent=2).replace("\n", " ")),
             ("f2", "not json"),
             ("f3", json.dumps({"status": "BEGIN", "id": "t1", "event_count": 2})),
             ("f4", json.dumps({"op": "d", "before": {"id": 2}, "after": None,
                                "source": SOURCE}))]
    groups = head_groups(lines)
    assert [(g.file, g.op, g.image_keys, g.all_keys) for g in groups] == [
        ("f1", "c", ["id", "name"], ["id", "name"])] * 2 + [("f4", "d", ["id"], ["id"])]
    # the schema block as compact JSON text and as the line spells it
    compact, spelt = (g.schema_text or "" for g in groups[:2])
    assert compact == json.dumps(SCHEMA, separators=(",", ":"))
    assert spelt != compact and json.loads(spelt) == SCHEMA and spelt in lines[0][1]
    assert json.loads(groups[0].signature or "null") == [
        {"field": "id", "type": "int64"}, {"field": "name", "type": "string"}]
    assert groups[2].schema_text is None


def test_no_guess_when_the_first_events_would_be_refused() -> None:
    source = DebeziumSource.model_validate({"type": "debezium", "database": "PG1", "root": "/x",
                                            "tables": [{"name": "shop.people", "key": ["id"]}]})
    good = {"schema": SCHEMA, "payload": {"op": "c", "after": {"id": 1}, "source": SOURCE}}
    g = guess_from(head_groups([("f1", json.dumps(good))]), source)
    assert g is not None and list(g.tables) == ["shop.people"]
    assert g.schemas["shop.people"] == {json.dumps(SCHEMA, separators=(",", ":")),
                                        json.dumps(SCHEMA)}
    unknown = {"schema": SCHEMA, "payload": {"op": "c", "after": {"id": 1, "colour": "red"},
                                             "source": SOURCE}}
    assert guess_from(head_groups([("f1", json.dumps(unknown))]), source) is None
    mongo = {"op": "c", "after": {"id": 1}, "source": {**SOURCE, "connector": "mongodb"}}
    assert guess_from(head_groups([("f1", json.dumps(mongo))]), source) is None
