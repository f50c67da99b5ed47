"""changeflow: Oracle Streams and Advanced Queuing semantics on Spark, Parquet and Airflow."""

from __future__ import annotations

__version__ = "0.1.0"
