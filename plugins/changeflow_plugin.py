"""Airflow loads this file from the plugins folder; the plugin itself lives in the library.

This is the plugin's only registration (no package entry point): see
``changeflow.airflow.plugin``.
"""

from __future__ import annotations

from changeflow.airflow.plugin import ChangeflowPlugin

__all__ = ["ChangeflowPlugin"]
