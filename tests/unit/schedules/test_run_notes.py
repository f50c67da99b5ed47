"""The note a finished window run gets (written by the plugin's listener)."""

from __future__ import annotations

import datetime as dt

from changeflow.airflow.listener import note_for
from changeflow.schedules import model
from changeflow.schedules.store import ScheduleRow

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
S = model.Schedule("p", start=T0, duration=60, next_time=3600)


def test_skipped_run_of_a_disabled_schedule_says_why() -> None:
    row = ScheduleRow(S, disabled=True, disabled_reason="user")
    assert note_for(row, skipped=True, failed=False) == "not attempted: schedule disabled (user)"


def test_skipped_run_waiting_for_a_later_retry_names_it() -> None:
    state = model.FailureState(failures=4, last_error_msg="DestinationUnavailableError: x",
                               last_error_time=T0, next_retry=T0 + dt.timedelta(hours=1))
    note = note_for(ScheduleRow(S, state=state), skipped=True, failed=False)
    assert note == ("not attempted: waiting for retry 5, due 2024-01-01T01:00:00+00:00 in a "
                    "later window (last error: DestinationUnavailableError: x)")


def test_failed_run_gets_the_error_and_the_auto_disable() -> None:
    state = model.FailureState(failures=16, last_error_msg="E: down", last_error_time=T0)
    row = ScheduleRow(S, disabled=True, disabled_reason="failures", state=state)
    assert note_for(row, skipped=False, failed=True) == (
        "failure 16: E: down — schedule disabled (failures)")
    assert note_for(ScheduleRow(S), skipped=False, failed=False) is None
