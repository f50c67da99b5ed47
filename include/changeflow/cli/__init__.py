"""The ``changeflow`` command line.

Each concept registers its own command group in its own module; this module only
assembles them.
"""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="changeflow")
def main() -> None:
    """changeflow: Oracle Streams semantics on Spark, Parquet and Airflow."""


def _register() -> None:
    from changeflow.cli import commands  # noqa: F401  (imports register the commands)


_register()
