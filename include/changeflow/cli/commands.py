"""Imports every command module so that each registers itself on :data:`main`."""

from __future__ import annotations

from changeflow.cli import apply as _apply  # noqa: F401
from changeflow.cli import aq as _aq  # noqa: F401
from changeflow.cli import dags as _dags  # noqa: F401
from changeflow.cli import doctor as _doctor  # noqa: F401
from changeflow.cli import mcq as _mcq  # noqa: F401
from changeflow.cli import pipeline as _pipeline  # noqa: F401
from changeflow.cli import quality as _quality  # noqa: F401
from changeflow.cli import queues as _queues  # noqa: F401
from changeflow.cli import rules as _rules  # noqa: F401
from changeflow.cli import schedules as _schedules  # noqa: F401
from changeflow.cli import serve as _serve  # noqa: F401
from changeflow.cli import targets as _targets  # noqa: F401
from changeflow.cli import views as _views  # noqa: F401
