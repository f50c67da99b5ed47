"""The changeflow Airflow plugin (timetables and UI views register here)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from changeflow.schedules.timetable import PropagationWindowTimetable


class ChangeflowPlugin(AirflowPlugin):
    """Registers changeflow's Airflow extensions."""

    name = "changeflow"
    timetables = [PropagationWindowTimetable]
