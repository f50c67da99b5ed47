"""Manual refresh from a file: all or nothing, idempotent, bulk lane."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from changeflow.mcq import views
from changeflow.mcq.api import MetaChangeQueue
from changeflow.mcq.model import BadChangeError, McqError, UnknownListenerError, UnknownTableError
from changeflow.mcq.refresh import refresh, rows_from_file


def pending(mcq: MetaChangeQueue, listener: str) -> list[dict[str, Any]]:
    return views.pending_entries(mcq.store, listener, limit=1000)


def test_a_parquet_file_of_keys_into_one_listener(mcq: MetaChangeQueue, tmp_path: Path) -> None:
    path = tmp_path / "logins.parquet"
    pq.write_table(pa.table({"pkey_string": ["a", "b", "c"], "person_id": [1, 2, 3]}), path)
    r = refresh(mcq.store, "ADSI", "LOGINS", None, rows_from_file(str(path)))
    assert (r.selected, r.queued, r.already_pending, r.interested) == (3, 3, 0, True)
    got = pending(mcq, "ADSI")
    assert [(e["pkey_string"], e["person_id"], e["bulk"], e["change_type"]) for e in got] == [
        ("a", 1, True, "C"), ("b", 2, True, "C"), ("c", 3, True, "C")]
    assert pending(mcq, "LDAP") == []  # only the named listener


def test_a_refresh_is_idempotent(mcq: MetaChangeQueue, tmp_path: Path) -> None:
    path = tmp_path / "keys.csv"
    path.write_text("pkey_string,pkey_number\na,1\nb,\na,1\n")
    first = refresh(mcq.store, "ADSI", "LOGINS", None, rows_from_file(str(path)))
    assert (first.selected, first.queued) == (3, 2)
    again = refresh(mcq.store, "ADSI", "LOGINS", None, rows_from_file(str(path)))
    assert (again.queued, again.already_pending) == (0, 3)
    assert [(e["pkey_string"], e["pkey_number"]) for e in pending(mcq, "ADSI")] == [
        ("a", 1), ("b", None)]


def test_a_selection_failing_halfway_queues_nothing(mcq: MetaChangeQueue) -> None:
    def rows() -> Iterator[dict[str, Any]]:
        for i in range(100):
            if i == 60:
                raise OSError("connection to the source lost")
            yield {"pkey_string": f"u{i}"}

    with pytest.raises(OSError, match="source lost"):
        refresh(mcq.store, "ADSI", "LOGINS", None, rows())
    assert pending(mcq, "ADSI") == []


@pytest.mark.parametrize("rows,match", [
    ([{"pkey_string": "a"}, {"username": "b"}], r"\['username'\] are not entry keys"),
    ([{"pkey_number": "x"}], "row 1: pkey_number must be a whole number"),
    ([{"pkey_string": None}], "row 1: every key is empty"),
])
def test_bad_selections_queue_nothing(mcq: MetaChangeQueue, rows: list, match: str) -> None:
    with pytest.raises(BadChangeError, match=match):
        refresh(mcq.store, "ADSI", "LOGINS", None, rows)
    assert pending(mcq, "ADSI") == []


def test_unknown_listener_or_table(mcq: MetaChangeQueue) -> None:
    with pytest.raises(UnknownListenerError):
        refresh(mcq.store, "NOPE", "LOGINS", None, [{"pkey_string": "a"}])
    with pytest.raises(UnknownTableError):
        refresh(mcq.store, "ADSI", "PERSON", "Nope", [{"person_id": 1}])
    with pytest.raises(McqError, match="no such file"):
        list(rows_from_file("/nonexistent/keys.csv"))


def test_not_interested_is_a_manual_refresh(mcq: MetaChangeQueue) -> None:
    r = refresh(mcq.store, "ADSI", "PERSON", "Status", [{"person_id": 9}])
    assert r.queued == 1 and r.interested is False
