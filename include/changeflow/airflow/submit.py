"""The spark-submit side of a changeflow job, as a small typed spec.

:func:`operator_kwargs` is pure: the same spec always gives the same keyword
arguments for ``SparkSubmitOperator``; tests check them (and the argv the provider's
hook builds from them) by exact equality.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from changeflow.jvm import (
    CDS_FLAGS,
    DRIVER_GC,
    DRIVER_JIT,
    JIT_OPTIONS,
    SESSION_CONF,
    cds_archive,
)

DEFAULT_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    # See changeflow.jvm: huge generated methods of large rule sets get JIT-compiled,
    # and row migration's map overlay stays in generated code; the driver collects with
    # the parallel collector, and its JIT's optimising compiler starts later.
    "spark.driver.extraJavaOptions": f"{JIT_OPTIONS} {DRIVER_GC} {DRIVER_JIT}",
    "spark.executor.extraJavaOptions": JIT_OPTIONS,
    # the settings of every changeflow session, as get_session gives them
    **SESSION_CONF,
}


@dataclass(frozen=True)
class SparkJobSpec:
    """What to submit: one run of one pipeline component.

    Attributes:
        kind: capture, propagation, apply or verify.
        name: the component's name in the configuration.
        config: path of the pipeline configuration file.
        jobs_dir: directory holding ``jobs/<kind>.py``.
        conn_id: the Airflow Spark connection (its host is the master).
        conf: extra Spark properties, merged over :data:`DEFAULT_CONF`.
        driver_memory: the driver's memory.
        jars_dir: the folder of the jars every job gets (``jars/spark`` of the
            project, filled by ``make setup``); passed as a glob, which spark-submit
            expands, so building the spec reads no directory.
        args: more arguments of the job (``--every``/``--for`` of an apply that keeps
            running), after ``--config`` and ``--name``.
    """

    kind: str
    name: str
    config: str
    jobs_dir: str
    conn_id: str = "spark_default"
    conf: dict[str, str] = field(default_factory=dict)
    driver_memory: str = "2g"
    jars_dir: str | None = None
    args: tuple[str, ...] = ()


def application(spec: SparkJobSpec) -> str:
    """The Python file spark-submit runs.

    >>> application(SparkJobSpec("capture", "c", "p.yaml", "/repo/jobs"))
    '/repo/jobs/capture.py'
    """
    return f"{spec.jobs_dir.rstrip('/')}/{spec.kind}.py"


def operator_kwargs(spec: SparkJobSpec) -> dict[str, Any]:
    """Keyword arguments for ``SparkSubmitOperator`` (without ``task_id``).

    >>> kw = operator_kwargs(SparkJobSpec("apply", "a1", "/c.yaml", "/repo/jobs"))
    >>> kw["application_args"]
    ['--config', '/c.yaml', '--name', 'a1']
    """
    # The driver also gets them on its class path: the Iceberg catalog's Java API is
    # reached from Python (py4j sees the driver's system class loader, not --jars').
    jars = {"jars": f"{spec.jars_dir.rstrip('/')}/*.jar",
            "driver_class_path": f"{spec.jars_dir.rstrip('/')}/*"} if spec.jars_dir else {}
    conf = {**DEFAULT_CONF, **spec.conf}
    if spec.jars_dir and "spark.driver.extraJavaOptions" not in spec.conf:
        # The driver starts from the class archive `make setup` made for this class path
        # (changeflow.jvm.cds_options); without one it starts as it would anyway.
        conf["spark.driver.extraJavaOptions"] = (
            f"{DEFAULT_CONF['spark.driver.extraJavaOptions']} -XX:SharedArchiveFile="
            f"{cds_archive('submit', spec.jars_dir.rstrip('/'))} {CDS_FLAGS}")
    return {
        "application": application(spec),
        "application_args": ["--config", spec.config, "--name", spec.name, *spec.args],
        "conn_id": spec.conn_id,
        "name": f"changeflow-{spec.kind}-{spec.name}",
        "conf": conf,
        "driver_memory": spec.driver_memory,
        "verbose": False,
        **jars,
    }
