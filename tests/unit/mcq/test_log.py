"""Log calls: one entry per interested listener, strictness, bad keys, origins, batches."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sqlalchemy import func, select, update

from changeflow.mcq.api import MetaChangeQueue
from changeflow.mcq.model import BadChangeError, UnknownListenerError, UnknownTableError
from changeflow.state.schema_mcq import queue, tables


def entries(mcq: MetaChangeQueue) -> list[dict[str, Any]]:
    with mcq.store.read() as conn:
        return [dict(r._mapping) for r in conn.execute(select(queue).order_by(
            queue.c.entry_number))]


def test_one_entry_per_interested_listener_with_the_seed_fields(mcq: MetaChangeQueue) -> None:
    assert mcq.log_update("PERSON", "Telephone", rrowid="r1", person_id=1001,
                          aux_string="campus") == 2
    rows = entries(mcq)
    assert sorted(r["proc_name"] for r in rows) == ["BEST", "LDAP"]
    for r in rows:
        assert r["queue_name"] == r["proc_name"]
        assert (r["tname"], r["subtype"], r["change_type"], r["rrowid"], r["person_id"],
                r["aux_string"]) == ("PERSON", "Telephone", "C", "r1", 1001, "campus")
        assert r["retry_count"] == 0 and r["hold_until"] is None and r["proc_date"] is None
        assert r["entry_date"] is not None and r["lane"] == 0
    assert rows[0]["entry_number"] < rows[1]["entry_number"]


def test_change_types_and_rising_entry_numbers(mcq: MetaChangeQueue) -> None:
    mcq.log_insert("LOGINS", pkey_string="a", pkey_number=1)
    mcq.log_update("logins", pkey_string="a")
    mcq.log_delete("LOGINS", pkey_string="a")
    rows = [r for r in entries(mcq) if r["proc_name"] == "ADSI"]
    assert [r["change_type"] for r in rows] == ["I", "C", "D"]
    numbers = [r["entry_number"] for r in entries(mcq)]
    assert numbers == sorted(set(numbers))


def test_a_wildcard_and_an_exact_interest_make_one_entry(mcq: MetaChangeQueue) -> None:
    mcq.add_interest("BEST", "PERSON", "Telephone")
    assert mcq.log_update("PERSON", "Telephone", person_id=1) == 2
    assert sorted(r["proc_name"] for r in entries(mcq)) == ["BEST", "LDAP"]


def test_nobody_interested_no_entry_no_error(mcq: MetaChangeQueue) -> None:
    mcq.add_table("BUILDINGS")
    assert mcq.log_update("BUILDINGS", pkey_string="VCC") == 0
    assert entries(mcq) == []


def test_strict_unknown_table_or_subtype_raises_and_logs_nothing(mcq: MetaChangeQueue) -> None:
    with pytest.raises(UnknownTableError, match="PERSON/Phone"):
        mcq.log_update("PERSON", "Phone", person_id=1)
    with pytest.raises(UnknownTableError, match="NOPE"):
        mcq.log_insert("NOPE", pkey_string="x")
    assert entries(mcq) == []


def test_warn_mode_drops_unknown_pairs(store: Any, mcq: MetaChangeQueue,
                                       caplog: pytest.LogCaptureFixture) -> None:
    lax = MetaChangeQueue(store, strict=False)
    with caplog.at_level(logging.WARNING):
        assert lax.log_update("PERSON", "Phone", person_id=1) == 0
    assert "PERSON/Phone" in caplog.text and "dropped" in caplog.text
    assert entries(mcq) == []


@pytest.mark.parametrize("keys,match", [
    ({"person_id": "12x"}, "person_id must be a whole number"),
    ({"pkey_number": 1.5}, "pkey_number must be a whole number"),
    ({"pkey_string": "x" * 256}, "pkey_string is 256 characters"),
    ({"person_id": True}, "person_id must be a whole number"),
])
def test_bad_keys_are_refused(mcq: MetaChangeQueue, keys: dict[str, Any], match: str) -> None:
    with pytest.raises(BadChangeError, match=match):
        mcq.log_update("PERSON", "Telephone", **keys)
    assert entries(mcq) == []


def test_unknown_change_type(mcq: MetaChangeQueue) -> None:
    with pytest.raises(BadChangeError, match="unknown change type 'X'"):
        mcq.log("X", "LOGINS", pkey_string="a")


def test_a_manual_entry_goes_to_one_listener_interested_or_not(mcq: MetaChangeQueue) -> None:
    assert mcq.log_update("PERSON", "Status", person_id=5, listener="ADSI") == 1
    [row] = entries(mcq)
    assert row["proc_name"] == "ADSI" and row["queue_name"] == "ADSI"
    with pytest.raises(UnknownListenerError, match="'CMMS'"):
        mcq.log_update("PERSON", "Status", person_id=5, listener="CMMS")
    assert len(entries(mcq)) == 1


def test_the_first_log_records_its_origin_and_again_when_cleared(mcq: MetaChangeQueue) -> None:
    def stack() -> tuple[Any, Any]:
        with mcq.store.read() as conn:
            r = conn.execute(select(tables.c.call_stack, tables.c.stack_date).where(
                tables.c.tname == "LOGINS")).one()
        return r.call_stack, r.stack_date

    assert stack() == (None, None)
    mcq.log_update("LOGINS", pkey_string="a")
    text, first = stack()
    assert "test_the_first_log_records_its_origin" in text and first is not None
    mcq.log_update("LOGINS", pkey_string="b")
    assert stack()[1] == first
    with mcq.store.begin() as conn:
        conn.execute(update(tables).where(tables.c.tname == "LOGINS").values(stack_date=None))
    mcq.logger.forget()  # another process would see it after its cache_seconds
    mcq.log_update("LOGINS", pkey_string="c")
    assert stack()[1] is not None and stack()[1] != first


def test_a_batch_commits_all_or_nothing(mcq: MetaChangeQueue) -> None:
    with mcq.batch() as b:
        for i in range(5):
            b.log_update("LOGINS", pkey_string=f"u{i}")
    assert len(entries(mcq)) == 10
    with pytest.raises(UnknownTableError), mcq.batch() as b:
        b.log_update("LOGINS", pkey_string="v1")
        b.log_update("NOPE", pkey_string="v2")
    assert len(entries(mcq)) == 10


def test_log_inside_the_callers_transaction(mcq: MetaChangeQueue) -> None:
    with pytest.raises(RuntimeError), mcq.store.begin() as conn:
        mcq.log_update("LOGINS", pkey_string="a", conn=conn)
        raise RuntimeError("the caller's own change failed")
    with mcq.store.read() as conn:
        assert conn.execute(select(func.count()).select_from(queue)).scalar() == 0
