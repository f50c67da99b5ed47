"""The views as sections of the changeflow page in the Airflow UI.

:func:`register_sections` adds every view to the page's registry
(:mod:`changeflow.airflow.ui.registry`): each becomes a table the page fetches from
``/changeflow/api/views/<id>?pipeline=<name>`` and refreshes on its own, for the
pipeline chosen in the page. The apply error queue and the exception queue carry row
actions (:mod:`changeflow.views.actions`): re-execute or delete an apply error, release
a quarantined batch.
"""

from __future__ import annotations

from typing import Any


def register_sections(order: int = 100) -> list[str]:
    """Register one page section per view. Returns the section ids."""
    from changeflow.airflow.ui.registry import Column, register
    from changeflow.views import VIEWS
    from changeflow.views.actions import row_actions

    ids = []
    for i, view in enumerate(VIEWS.values()):
        def fetch(cfg: Any, view: Any = view) -> list[dict[str, Any]]:
            return view.fetch(cfg)

        cols = [Column(c[0], c[1], c[2] if len(c) > 2 else None) for c in view.columns]
        section = register(f"view-{view.name}", view.title, fetch, cols, order=order + i,
                           description=f"Like Oracle's {view.oracle}.",
                           actions=row_actions(view.name))
        ids.append(section.id)
    return ids
