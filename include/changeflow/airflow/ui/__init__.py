"""changeflow's page in the Airflow UI: a registry of JSON views and the app serving them.

See ``docs/airflow-ui.md``: :mod:`.registry` (sections other areas add views to),
:mod:`.app` (the FastAPI app the plugin mounts at ``/changeflow``), ``static/`` (the
page: plain HTML, CSS and JavaScript, no build step).
"""
