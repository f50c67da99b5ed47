"""The changeflow Airflow plugin (timetables and UI views register here)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from changeflow.schedules.timetable import PropagationWindowTimetable
from changeflow.schedules.ui import PREFIX, create_app


class ChangeflowPlugin(AirflowPlugin):
    """Registers changeflow's Airflow extensions."""

    name = "changeflow"
    timetables = [PropagationWindowTimetable]
    fastapi_apps = [{"app": create_app(), "url_prefix": PREFIX, "name": "changeflow schedules"}]
    external_views = [{"name": "Propagation schedules", "href": f"{PREFIX}/schedules",
                       "destination": "nav", "category": "browse",
                       "url_route": "changeflow-schedules"}]
