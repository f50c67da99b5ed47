"""The process monitor: throttled marks, silence limits, one alert per silence, recovery."""

from __future__ import annotations

import datetime as dt

from changeflow.mcq import monitor
from changeflow.mcq.api import MetaChangeQueue
from changeflow.state.schema import utcnow


def test_marks_are_throttled(mcq: MetaChangeQueue) -> None:
    m = monitor.Marker(mcq.store, "LDAP", interval=300)
    assert m.mark() is True
    assert [m.mark() for _ in range(50)] == [False] * 50
    assert m.writes == 1
    [row] = [r for r in monitor.status(mcq.store) if r["proc"] == "LDAP"]
    assert row["marks"] == 1
    m.interval = 0
    assert m.mark() is True and m.writes == 2


def test_get_changes_marks_at_most_once_per_interval(mcq: MetaChangeQueue) -> None:
    w = mcq.worker("ADSI")
    for _ in range(20):
        w.get_changes()
    assert w.marker is not None and w.marker.writes == 1
    [row] = [r for r in monitor.status(mcq.store) if r["proc"] == "ADSI"]
    assert row["marks"] == 1 and row["listener"] == "ADSI"


def test_default_silence_limits() -> None:
    assert monitor.default_alert_after(5) == 450.0  # 5 min between marks + half
    assert monitor.default_alert_after(86400) == 129600.0


def test_one_alert_per_silence_then_recovery(mcq: MetaChangeQueue) -> None:
    mcq.add_listener("LDAP", frequency="5s", alert_after=60)
    t0 = utcnow()
    monitor.write_mark(mcq.store, "LDAP", listener="LDAP", alert_after=60)
    assert [a.proc for a in monitor.due(mcq.store, t0 + dt.timedelta(seconds=30))] == []
    late = monitor.due(mcq.store, t0 + dt.timedelta(seconds=61))
    ldap = [a for a in late if a.proc == "LDAP"]
    assert len(ldap) == 1 and ldap[0].event == monitor.SILENT
    assert ldap[0].silent_for is not None and ldap[0].silent_for > 60
    assert "silent for" in ldap[0].subject
    assert [a for a in monitor.due(mcq.store, t0 + dt.timedelta(seconds=120))
            if a.proc == "LDAP"] == []  # alerted once
    monitor.write_mark(mcq.store, "LDAP")
    back = [a for a in monitor.due(mcq.store, utcnow()) if a.proc == "LDAP"]
    assert [a.event for a in back] == [monitor.RECOVERED]


def test_a_listener_that_never_marked(mcq: MetaChangeQueue) -> None:
    now = utcnow()
    assert [a.proc for a in monitor.due(mcq.store, now)] == []
    later = now + dt.timedelta(seconds=451)  # LDAP and ADSI: 5 s listeners
    alerts = {a.proc: a for a in monitor.due(mcq.store, later)}
    assert set(alerts) == {"LDAP", "ADSI"}
    assert alerts["LDAP"].last_mark is None and "never marked" in alerts["LDAP"].subject


def test_other_processes(mcq: MetaChangeQueue) -> None:
    t = monitor.mark_process(mcq.store, "Insite-Push_People", expect_every=86400)
    [row] = [r for r in monitor.status(mcq.store) if r["proc"] == "Insite-Push_People"]
    assert row["alert_after"] == 129600.0 and row["listener"] is None
    later = t + dt.timedelta(days=2)
    assert "Insite-Push_People" in {a.proc for a in monitor.due(mcq.store, later)}
