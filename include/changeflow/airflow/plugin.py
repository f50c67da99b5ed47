"""The changeflow Airflow plugin: the window timetable, the listeners, the UI page.

The listeners: the run listener (:mod:`changeflow.airflow.listener`) and the lifecycle
listener that runs the AQ time manager beside the scheduler (:mod:`changeflow.airflow.qmon`).

Registered once, from the project's plugins folder (``plugins/changeflow_plugin.py``;
``scripts/env.sh`` sets ``AIRFLOW__CORE__PLUGINS_FOLDER``), and not also as a package
entry point: an editable install leaves the package's metadata twice on ``sys.path``
(``site-packages`` and ``include/changeflow.egg-info``), and Airflow registered the
entry point twice ("Plugin 'changeflow' already registered"). Every Airflow component
(scheduler, DAG processor, API server, workers) needs the plugins folder set: the
scheduler deserializes the propagation DAGs' timetable through it.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from changeflow.airflow import listener, qmon
from changeflow.airflow.ui.app import PREFIX, create_app
from changeflow.schedules.timetable import PropagationWindowTimetable


class ChangeflowPlugin(AirflowPlugin):
    """Registers changeflow's Airflow extensions."""

    name = "changeflow"
    timetables = [PropagationWindowTimetable]
    listeners = [listener, qmon]
    fastapi_apps = [{"app": create_app(), "url_prefix": PREFIX, "name": "changeflow"}]
    external_views = [{
        "name": "changeflow", "href": f"{PREFIX}/", "destination": "nav",
        "url_route": "changeflow", "nav_top_level": True, "icon": f"{PREFIX}/icon.svg",
    }]
