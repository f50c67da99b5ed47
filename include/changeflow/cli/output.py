"""One output convention for every command: aligned tables in human units, or JSON/YAML.

Every listing command takes ``--output table|json|yaml`` (``-o``; ``--json`` is kept
as a short form of ``-o json``), as ``airflow`` does. Tables are aligned, in human
units: durations (``1.2 s``, ``3 min``), bytes (``1.5 MiB``), times relative to now
(``2 min ago``, ``in 30 s``), zero as ``0`` and false as ``no``. JSON and YAML carry
the raw values (ISO times, numbers), for scripts.

A column is declared with a kind that says how to show it:

>>> rows = [{"queue": "hr.q", "depth": 0, "bytes": 1536, "secure": False}]
>>> print(table(rows, [Col("queue"), Col("depth", "count"), Col("bytes", "bytes"),
...                    Col("secure", "bool")]))
QUEUE  DEPTH  BYTES    SECURE
hr.q       0  1.5 KiB  no
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import click

from changeflow.units import human_bytes

FORMATS = ("table", "json", "yaml")


def human_duration(seconds: float | None) -> str:
    """A duration for people.

    >>> human_duration(0), human_duration(0.1996), human_duration(75), human_duration(7300)
    ('0 s', '0.2 s', '1 min 15 s', '2 h 1 min')
    """
    if seconds is None:
        return "-"
    s = float(seconds)
    if s == 0:
        return "0 s"
    if s < 10:
        return f"{s:.1f} s" if s >= 0.05 else f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        m, sec = divmod(int(round(s)), 60)
        return f"{m} min {sec} s" if sec else f"{m} min"
    if s < 86400:
        h, rest = divmod(int(round(s)), 3600)
        return f"{h} h {rest // 60} min" if rest // 60 else f"{h} h"
    d, rest = divmod(int(round(s)), 86400)
    return f"{d} d {rest // 3600} h" if rest // 3600 else f"{d} d"


def relative_time(t: dt.datetime | str | None, now: dt.datetime | None = None) -> str:
    """A time relative to now, in words.

    >>> now = dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)
    >>> relative_time(now - dt.timedelta(seconds=90), now), relative_time(
    ...     now + dt.timedelta(seconds=30), now)
    ('1 min 30 s ago', 'in 30 s')
    """
    if t is None or t == "":
        return "-"
    if isinstance(t, str):
        t = dt.datetime.fromisoformat(t)
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    now = now or dt.datetime.now(dt.UTC)
    delta = (t - now).total_seconds()
    if abs(delta) < 1:
        return "now"
    words = human_duration(abs(round(delta)))
    return f"in {words}" if delta > 0 else f"{words} ago"


def human_count(n: int | float | None) -> str:
    """An integer with thousands separators; ``None`` as ``-``.

    >>> human_count(0), human_count(1234567)
    ('0', '1,234,567')
    """
    if n is None:
        return "-"
    return f"{n:,.0f}" if isinstance(n, int) or float(n).is_integer() else f"{n:,.2f}"


def _bool(v: Any) -> str:
    return "-" if v is None else ("yes" if v else "no")


def _text(v: Any) -> str:
    if v is None or v == "":
        return "-"
    if isinstance(v, dt.datetime):
        return v.isoformat(timespec="seconds")
    return str(v)


KINDS: dict[str, Callable[[Any], str]] = {
    "text": _text,
    "count": human_count,
    "bytes": human_bytes,
    "duration": human_duration,
    "time": relative_time,
    "bool": _bool,
}
_RIGHT = {"count", "duration"}


@dataclass(frozen=True)
class Col:
    """A table column: the row key, how to show it (a :data:`KINDS` key), its header."""

    key: str
    kind: str = "text"
    header: str | None = None
    width: int | None = None

    def show(self, row: dict[str, Any]) -> str:
        text = KINDS[self.kind](row.get(self.key))
        if self.width and len(text) > self.width:
            text = text[: self.width - 1] + "…"
        return text

    @property
    def title(self) -> str:
        return (self.header or self.key).upper()


def table(rows: Sequence[dict[str, Any]], columns: Sequence[Col]) -> str:
    """Rows as an aligned text table (numbers right-aligned)."""
    cells = [[c.show(r) for c in columns] for r in rows]
    widths = [max([len(c.title), *(len(row[i]) for row in cells)]) for i, c in
              enumerate(columns)]

    def line(values: Iterable[str]) -> str:
        parts = []
        for i, (c, v) in enumerate(zip(columns, values, strict=True)):
            last = i == len(columns) - 1
            if c.kind in _RIGHT:
                parts.append(v.rjust(widths[i]))
            else:
                parts.append(v if last else v.ljust(widths[i]))
        return "  ".join(parts).rstrip()

    return "\n".join([line(c.title for c in columns), *(line(r) for r in cells)])


def fields(data: dict[str, Any] | Sequence[Any]) -> str:
    """A record as aligned ``name  value`` lines (nested values inline).

    >>> print(fields({"rule": "R1", "rule_sets": ["S1", "S2"], "action_context": {}}))
    rule            R1
    rule sets       S1, S2
    action context  -
    """
    items = list(data.items() if isinstance(data, dict) else enumerate(data))
    width = max((len(str(k)) for k, _ in items), default=0)
    return "\n".join(f"{str(k).replace('_', ' '):<{width}}  {_inline(v)}".rstrip()
                     for k, v in items)


def _inline(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k}={_inline(x)}" for k, x in v.items()) or "-"
    if isinstance(v, list | tuple):
        return ", ".join(_inline(x) for x in v) or "-"
    if isinstance(v, bool):
        return _bool(v)
    return _text(v)


def _plain(data: Any) -> Any:
    return json.loads(json.dumps(data, default=_default))


def _default(v: Any) -> Any:
    if isinstance(v, dt.datetime | dt.date):
        return v.isoformat()
    if hasattr(v, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(v)
    return str(v)


def emit(data: Any, output: str, columns: Sequence[Col] | None = None, *,
         empty: str = "(none)") -> None:
    """Print rows (or any data, for json/yaml) in the chosen format."""
    if output == "json":
        click.echo(json.dumps(_plain(data), indent=2))
    elif output == "yaml":
        import yaml

        click.echo(yaml.safe_dump(_plain(data), sort_keys=False, allow_unicode=True,
                                  width=1_000_000).rstrip())
    elif columns is None:
        click.echo(fields(data))
    elif not data:
        click.echo(empty)
    else:
        click.echo(table(data, columns))


#: ``ctx.meta`` key (shared by every context of one invocation): the format asked for.
OUTPUT = "changeflow.output"


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Record an explicit ``-o``/``--json`` for every context of the invocation."""
    if param.name == "as_json":
        if value:
            ctx.meta[OUTPUT] = "json"
    elif value is not None:
        ctx.meta[OUTPUT] = value
    return value


def _options(f: Callable[..., Any], expose: bool) -> Callable[..., Any]:
    f = click.option("--json", "as_json", is_flag=True, expose_value=expose,
                     callback=_remember, help="same as --output json")(f)
    return click.option("--output", "-o", "output", type=click.Choice(FORMATS), default=None,
                        expose_value=expose, callback=_remember,
                        help="output format: table (default), json or yaml; accepted "
                             "before or after the subcommand")(f)


def output_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--output/-o table|json|yaml`` and ``--json``; the command gets ``output``.

    The choice may also be given before the subcommand (``changeflow schedules -o json
    create ...``): every group accepts it (:func:`accepts_output`), and :func:`chosen`
    falls back to it.
    """
    return _options(f, True)


def accepts_output(f: Callable[..., Any]) -> Callable[..., Any]:
    """The same options, recorded for :func:`current_output` instead of passed on."""
    return _options(f, False)


def current_output() -> str:
    """The format asked for anywhere on the command line (``table`` when none)."""
    ctx = click.get_current_context(silent=True)
    return str(ctx.meta.get(OUTPUT, "table")) if ctx is not None else "table"


def chosen(output: str | None, as_json: bool) -> str:
    """The format a command prints in: ``--json``, else its ``-o``, else one given before
    the subcommand, else ``table``."""
    if as_json:
        return "json"
    return output or current_output()
