"""Airflow integration: DAG factory, spark-submit specs, DAG rendering and the plugin."""
