"""Airflow loads this file from the plugins folder; the plugin itself lives in the library."""

from __future__ import annotations

from changeflow.airflow.plugin import ChangeflowPlugin

__all__ = ["ChangeflowPlugin"]
