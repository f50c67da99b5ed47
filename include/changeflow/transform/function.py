"""Custom rule-based transformations: a user's Python function (``STREAMS$_TRANSFORM_FUNCTION``).

The action context names the function as ``package.module:function``. It is imported
when the client's rule sets are loaded (a missing one is refused then), and called
with one message at a time as a dict with the LCR contract's field names, its
``old_values``/``new_values`` as ``{COLUMN: value}``; it returns the (changed) dict,
or ``None`` to discard the message. Columns keep their logical types; a column the
function adds gets the type of its Python value.

A function decorated with :func:`dataframe_transform` instead receives the Spark
DataFrame of the messages its rule selected and returns one with the same columns:
the way to keep a transformation inside the JVM.

Per-message functions run in Python workers through ``mapInArrow`` (one Arrow batch at
a time), so they cost what Python costs; the declarative kinds do not.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from changeflow import lcr
from changeflow.rules.transforms import TransformDefinitionError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

MessageFunction = Callable[[dict[str, Any]], "dict[str, Any] | None"]


def dataframe_transform(fn: Callable[[DataFrame], DataFrame]) -> Callable[[DataFrame], DataFrame]:
    """Mark a function as a DataFrame -> DataFrame transformation."""
    fn.changeflow_dataframe = True  # type: ignore[attr-defined]
    return fn


def load(path: str, *, rule: str) -> Callable[..., Any]:
    """Import ``package.module:function``.

    Raises:
        TransformDefinitionError: naming the rule, when it cannot be imported.
    """
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise TransformDefinitionError(
            f"rule {rule}: transform function {path!r} must be written package.module:function")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise TransformDefinitionError(
            f"rule {rule}: transform function {path!r} cannot be imported: {exc}") from None
    if not callable(fn):
        raise TransformDefinitionError(f"rule {rule}: {path!r} is not callable")
    return fn  # type: ignore[no-any-return]


def _plain(values: dict[str, Any] | None) -> tuple[dict[str, Any] | None, dict[str, str]]:
    if values is None:
        return None, {}
    items = values.items() if isinstance(values, dict) else values
    out, types = {}, {}
    for k, v in items:
        out[k] = lcr.decode_value(v) if v is not None else None
        types[k] = (v or {}).get("type") or "VARCHAR2"
    return out, types


def _fits(value: Any, logical: str) -> bool:
    import datetime as dt
    import decimal

    if logical == "NUMBER":
        return isinstance(value, int | decimal.Decimal) and not isinstance(value, bool)
    if logical == "BINARY_DOUBLE":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if logical.startswith("TIMESTAMP"):
        return isinstance(value, dt.datetime)
    return lcr.logical_type_of(value) == logical


def _typed(values: dict[str, Any] | None, types: dict[str, str]) -> list[tuple[str, Any]] | None:
    """``{COLUMN: value}`` back to map entries, keeping each column's type where it fits."""
    if values is None:
        return None
    out = []
    for k, v in values.items():
        t = types.get(k)
        if v is not None and (t is None or not _fits(v, t)):
            t = lcr.logical_type_of(v)
        out.append((k, lcr.encode_value(v, t)))
    return out


def apply_message(fn: MessageFunction, row: dict[str, Any]) -> dict[str, Any] | None:
    """Call ``fn`` on one LCR row (Arrow/pylist form) and encode its answer back."""
    old, old_types = _plain(row.get("old_values"))
    new, new_types = _plain(row.get("new_values"))
    message = {**row, "old_values": old, "new_values": new}
    out = fn(dict(message))
    if out is None:
        return None
    result = {k: out.get(k) for k in lcr.FIELD_NAMES}
    result["old_values"] = _typed(out.get("old_values"), old_types)
    result["new_values"] = _typed(out.get("new_values"), {**old_types, **new_types})
    return result


def _batches(fn: MessageFunction, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa

    schema = lcr.arrow_schema()
    for batch in batches:
        rows = [apply_message(fn, r) for r in batch.to_pylist()]
        kept = [r for r in rows if r is not None]
        yield pa.RecordBatch.from_pylist(kept, schema=schema)


def apply_function(df: DataFrame, fn: Callable[..., Any]) -> DataFrame:
    """Run a custom transformation over the LCRs of ``df`` (contract columns only).

    The function's module is shipped to the Python workers by value (unless it is part
    of an installed package), so a function in a project's own file works on a cluster
    without installing it on every worker.
    """
    if getattr(fn, "changeflow_dataframe", False):
        return fn(df)  # type: ignore[no-any-return]
    _ship(fn)
    return df.mapInArrow(lambda it: _batches(fn, it), df.schema)


def _ship(fn: Callable[..., Any]) -> None:
    import sys

    from pyspark import cloudpickle

    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    where = getattr(module, "__file__", None) or ""
    if module is not None and "site-packages" not in where and \
            not module.__name__.startswith("changeflow."):
        cloudpickle.register_pickle_by_value(module)
