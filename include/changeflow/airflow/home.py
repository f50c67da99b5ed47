"""Finding the project's Airflow before touching it, from the CLI as from the README.

``changeflow schedules disable`` changes two things: the schedule (in the state store)
and the DAG's pause state (in Airflow's metadata database). Run with only ``PATH`` and
``CHANGEFLOW_CONFIG`` set, it must find the same Airflow that ``make airflow`` runs,
not create a stray ``~/airflow/airflow.db``. :func:`prepare` decides where Airflow is
*before* Airflow is imported (Airflow reads its configuration at import):

1. ``AIRFLOW_HOME`` set: that Airflow, as configured there;
2. otherwise the project the configuration file belongs to (the directory holding
   ``scripts/env.sh`` above it, or above the working directory): its embedded
   Airflow under ``work/airflow``, configured exactly as ``scripts/env.sh`` does;
3. otherwise: :class:`AirflowNotFound`, saying what to set, before anything changed.

:func:`check_database` then refuses an Airflow whose metadata database is missing or
not initialised, also before anything changed.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from changeflow.errors import ConfigError


class AirflowNotFound(ConfigError):
    """The project's Airflow cannot be found, or its database is not initialised."""


@dataclass(frozen=True)
class AirflowHome:
    """Where Airflow is: its home, its metadata database URL, how it was found."""

    home: str
    sql_alchemy_conn: str
    found_by: str


def project_root(*starts: str | os.PathLike[str] | None) -> Path | None:
    """The changeflow project a path belongs to (the directory with ``scripts/env.sh``)."""
    for start in starts:
        if not start:
            continue
        p = Path(start).resolve()
        for d in [p, *p.parents] if p.is_dir() else list(p.parents):
            if (d / "scripts" / "env.sh").is_file() and (d / "dags").is_dir():
                return d
    return None


def embedded_env(root: Path) -> dict[str, str]:
    """The Airflow settings ``scripts/env.sh`` gives the embedded Airflow of ``root``."""
    work = os.environ.get("CHANGEFLOW_WORK") or str(root / "work")
    home = f"{work}/airflow"
    return {
        "CHANGEFLOW_HOME": str(root),
        "AIRFLOW_HOME": home,
        "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(root / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": f"{home}/logs",
    }


def prepare(config_path: str | None = None) -> AirflowHome:
    """Point this process at the project's Airflow (before ``import airflow``).

    Raises:
        AirflowNotFound: no ``AIRFLOW_HOME`` and no project around the configuration.
    """
    if os.environ.get("AIRFLOW_HOME"):
        home = os.environ["AIRFLOW_HOME"]
        conn = os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN") or _configured_conn(home)
        return AirflowHome(home, conn, "AIRFLOW_HOME")
    root = project_root(config_path, os.getcwd())
    if root is None:
        raise AirflowNotFound(
            "cannot find the Airflow this pipeline runs in: set AIRFLOW_HOME (and "
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN if it is not in its airflow.cfg), run the "
            "command through the project's scripts/env.sh, or pass --no-airflow to change "
            "only the schedule")
    if "airflow" in sys.modules:  # too late to point it elsewhere: say so
        raise AirflowNotFound("Airflow was imported before its home was chosen; set "
                              "AIRFLOW_HOME explicitly")
    env = embedded_env(root)
    for key, value in env.items():
        os.environ.setdefault(key, value)
    return AirflowHome(os.environ["AIRFLOW_HOME"],
                       os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"], f"project {root}")


def _configured_conn(home: str) -> str:
    import configparser

    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(Path(home) / "airflow.cfg")
    return cfg.get("database", "sql_alchemy_conn", fallback=f"sqlite:///{home}/airflow.db")


def check_database(where: AirflowHome) -> None:
    """Refuse an Airflow whose metadata database is missing or not migrated.

    Raises:
        AirflowNotFound: naming the database and the command that initialises it.
    """
    from sqlalchemy import create_engine, inspect

    url = where.sql_alchemy_conn
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).is_file():
        raise AirflowNotFound(
            f"Airflow's database {url} ({where.found_by}) does not exist: start Airflow once "
            "(`make airflow`) or run `scripts/env.sh airflow db migrate`")
    engine = create_engine(url)
    try:
        ok = inspect(engine).has_table("dag")
    except Exception as exc:  # noqa: BLE001 (reported as the refusal)
        raise AirflowNotFound(f"Airflow's database {url} cannot be read: {exc}") from exc
    finally:
        engine.dispose()
    if not ok:
        raise AirflowNotFound(
            f"Airflow's database {url} ({where.found_by}) is not initialised: run "
            "`scripts/env.sh airflow db migrate` (or `make airflow`)")
