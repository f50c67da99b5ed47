"""Sections of the changeflow page: each a JSON endpoint plus how the page shows it.

A section is a view function of a pipeline configuration returning rows (or a dict),
and columns saying how to show each key in human units (the kinds of
:mod:`changeflow.cli.output`: ``text count bytes duration time bool``, plus ``state``
for a coloured badge). Adding another area's view to the page is one call:

>>> from changeflow.airflow.ui.registry import Column, register, sections
>>> _ = register("example", "Example", lambda cfg: [{"queue": "hr.q", "depth": 3}],
...              [Column("queue"), Column("depth", "count")], order=900)
>>> [s.id for s in sections()][-1]
'example'
>>> unregister("example")

The page then fetches ``/changeflow/api/views/<id>?pipeline=<name>`` and renders the
rows as a table under the section's title. Reading a section needs DAG read access in
Airflow's auth manager, like every other route of the app.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

KINDS = ("text", "count", "bytes", "duration", "time", "bool", "state")


@dataclass(frozen=True)
class Column:
    """A column: the row key, its kind (see :data:`KINDS`), its header."""

    key: str
    kind: str = "text"
    header: str | None = None

    def as_dict(self) -> dict[str, str]:
        return {"key": self.key, "kind": self.kind,
                "header": self.header or self.key.replace("_", " ")}


@dataclass(frozen=True)
class RowAction:
    """A button on each row of a section (e.g. re-execute an apply error).

    Attributes:
        name: the URL name (``POST /changeflow/api/views/<section>/<name>``).
        label: the button's text.
        run: ``run(cfg, params, config_path) -> message``; ``params`` holds the row's
            values of ``keys``. Raises a ``ChangeflowError`` naming what is wrong.
        keys: the row keys sent with the request.
        when: show the button only on rows whose values equal these.
        danger: a destructive action (the page asks for confirmation).
    """

    name: str
    label: str
    run: Callable[[Any, dict[str, Any], str], str]
    keys: tuple[str, ...] = ()
    when: dict[str, Any] = field(default_factory=dict)
    danger: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label, "keys": list(self.keys),
                "when": self.when, "danger": self.danger}


@dataclass(frozen=True)
class Section:
    """One section of the page.

    Attributes:
        id: the URL name (``/changeflow/api/views/<id>``).
        title: the heading.
        fetch: the view function: ``fetch(cfg) -> rows``.
        columns: how to show the rows (a table); empty for custom renderers.
        renderer: ``table`` (generic) or the name of a renderer in ``static/app.js``.
        order: sections are shown by ascending order.
        description: a line under the title.
        actions: buttons on each row (:class:`RowAction`).
    """

    id: str
    title: str
    fetch: Callable[[Any], Any]
    columns: Sequence[Any] = field(default_factory=tuple)
    renderer: str = "table"
    order: int = 100
    description: str = ""
    actions: Sequence[RowAction] = field(default_factory=tuple)

    def action(self, name: str) -> RowAction:
        """One of the section's row actions.

        Raises:
            KeyError: the section has no such action.
        """
        for a in self.actions:
            if a.name == name:
                return a
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        cols = [c.as_dict() if isinstance(c, Column) else Column(
            c.key, c.kind, getattr(c, "header", None)).as_dict() for c in self.columns]
        return {"id": self.id, "title": self.title, "renderer": self.renderer,
                "order": self.order, "description": self.description, "columns": cols,
                "actions": [a.as_dict() for a in self.actions]}


_SECTIONS: dict[str, Section] = {}


def register(id: str, title: str, fetch: Callable[[Any], Any],  # noqa: A002 (the URL name)
             columns: Sequence[Any] = (), *, renderer: str = "table", order: int = 100,
             description: str = "", actions: Sequence[RowAction] = ()) -> Section:
    """Add (or replace) a section of the page. Returns it.

    Raises:
        ValueError: a column of an unknown kind.
    """
    for c in columns:
        if c.kind not in KINDS:
            raise ValueError(f"section {id}: column {c.key!r} has unknown kind {c.kind!r}; "
                             f"one of {', '.join(KINDS)}")
    section = Section(id, title, fetch, tuple(columns), renderer, order, description,
                      tuple(actions))
    _SECTIONS[id] = section
    return section


def unregister(id: str) -> None:  # noqa: A002
    """Remove a section (tests)."""
    _SECTIONS.pop(id, None)


def sections() -> list[Section]:
    """Every registered section, in page order."""
    _builtin()
    return sorted(_SECTIONS.values(), key=lambda s: (s.order, s.id))


def get(id: str) -> Section:  # noqa: A002
    """A section by id.

    Raises:
        KeyError: no such section.
    """
    _builtin()
    return _SECTIONS[id]


def _builtin() -> None:
    """The built-in sections: schedules, then the dictionary views (on first use)."""
    if "schedules" in _SECTIONS:
        return
    from changeflow.views import schedules

    register("schedules", "Propagation schedules", schedules.schedule_rows,
             renderer="schedules", order=10,
             description="One DAG per propagation, one run per window (seed 002).")
    register("undeliverable", "UNDELIVERABLE messages", schedules.undeliverable_rows,
             _columns(schedules.UNDELIVERABLE_COLUMNS), order=20,
             description="Messages an application error made undeliverable, moved to the "
                         "exception queue (seed 002).")
    view_sections()  # the dictionary views (captures, applies, queues, rules, lag, ...)


def _columns(declared: Sequence[tuple[str, ...]]) -> list[Column]:
    """Columns from a view's ``(key, kind[, header])`` declarations."""
    return [Column(c[0], c[1], c[2] if len(c) > 2 else None) for c in declared]


def view_sections(order: int = 100) -> list[str]:
    """Register one page section per dictionary view (:data:`changeflow.views.VIEWS`),
    with the row actions the views declare. Returns the section ids."""
    from changeflow.views import VIEWS
    from changeflow.views.actions import row_actions

    ids = []
    for i, view in enumerate(VIEWS.values()):
        def fetch(cfg: Any, view: Any = view) -> list[dict[str, Any]]:
            return view.fetch(cfg)

        section = register(f"view-{view.name}", view.title, fetch, _columns(view.columns),
                           order=order + i, description=f"Like Oracle's {view.oracle}.",
                           actions=[RowAction(**a) for a in row_actions(view.name)])
        ids.append(section.id)
    return ids
