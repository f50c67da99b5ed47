"""Row migration for subset rules, as a DataFrame transform and for one message.

When an UPDATE satisfies a subset rule whose action context says ``INSERT`` (the row
moves into the subset) it becomes an INSERT; when it satisfies one that says
``DELETE`` (the row moves out) it becomes a DELETE. The INSERT carries the whole row
image known to the LCR: the old values overlaid with the new ones. The DELETE
carries the old values.

>>> msg = {"command_type": "UPDATE", "old_values": {"REGION_ID": 4, "NAME": "X"},
...        "new_values": {"REGION_ID": 2}}
>>> out = migrate_message(msg, "INSERT")
>>> out["command_type"], out["old_values"], out["new_values"]
('INSERT', None, {'REGION_ID': 2, 'NAME': 'X'})
>>> migrate_message(msg, "DELETE")["new_values"] is None
True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

ROW_SUBSET_KEY = "STREAMS$_ROW_SUBSET"
# Migration codes carried by the compiled rule sets: 0 keeps the message as it is.
KEEP, TO_INSERT, TO_DELETE = 0, 1, 2
CODES = {"INSERT": TO_INSERT, "DELETE": TO_DELETE}


def migrate_message(message: Mapping[str, Any], target: str | None) -> dict[str, Any]:
    """Return a copy of ``message`` converted to ``target`` (INSERT/DELETE), if it is an UPDATE.

    Args:
        message: the message dict (LCR contract field names).
        target: ``"INSERT"``, ``"DELETE"`` or ``None`` (no migration).
    """
    out = dict(message)
    if target not in CODES or message.get("command_type") != "UPDATE":
        return out
    old = dict(message.get("old_values") or {})
    new = dict(message.get("new_values") or {})
    out["command_type"] = target
    if target == "INSERT":
        out["new_values"] = {**old, **new}
        out["old_values"] = None
    else:
        out["old_values"] = old
        out["new_values"] = None
    return out


LAST_WIN_CONF = "spark.sql.mapKeyDedupPolicy"


def merged_values(last_win: bool = False) -> Column:
    """``old_values`` overlaid with ``new_values`` (new wins), as a Spark column.

    Args:
        last_win: the session's ``spark.sql.mapKeyDedupPolicy`` is ``LAST_WIN``, so a
            plain ``map_concat`` keeps the new value of a column in both maps. That form
            stays in whole-stage code generation; the other one needs ``map_filter``, a
            lambda Spark interprets, which takes the whole projection out of it.
            changeflow's sessions set ``LAST_WIN``.
    """
    from pyspark.sql import functions as F

    old, new = F.col("old_values"), F.col("new_values")
    if last_win:
        overlay = F.map_concat(old, new)
    else:
        old_only = F.map_filter(old, lambda k, _v: ~F.array_contains(F.map_keys(new), k))
        overlay = F.map_concat(old_only, new)
    return F.when(old.isNull(), new).when(new.isNull(), old).otherwise(overlay)


def last_win(df: DataFrame) -> bool:
    """True when ``df``'s session resolves duplicate map keys by keeping the last one."""
    policy = df.sparkSession.conf.get(LAST_WIN_CONF, "EXCEPTION") or "EXCEPTION"
    return policy.upper() == "LAST_WIN"


def migrate(df: DataFrame, code: Column) -> DataFrame:
    """Apply row migration to a DataFrame of messages, driven by a migration code column.

    Args:
        df: messages with the LCR contract columns.
        code: ``1`` turns an UPDATE into an INSERT, ``2`` into a DELETE, anything else
            keeps the row unchanged.

    Returns:
        The same columns in the same order.
    """
    from pyspark.sql import functions as F

    is_update = F.col("command_type") == F.lit("UPDATE")
    to_insert = is_update & (code == F.lit(TO_INSERT))
    to_delete = is_update & (code == F.lit(TO_DELETE))
    columns = {
        "command_type": F.when(to_insert, F.lit("INSERT"))
        .when(to_delete, F.lit("DELETE"))
        .otherwise(F.col("command_type")),
        "new_values": F.when(to_insert, merged_values(last_win(df)))
        .when(to_delete, F.lit(None))
        .otherwise(F.col("new_values")),
        "old_values": F.when(to_insert, F.lit(None)).otherwise(F.col("old_values")),
    }
    return df.select(
        *[columns[c].alias(c) if c in columns else F.col(f"`{c}`") for c in df.columns]
    )
