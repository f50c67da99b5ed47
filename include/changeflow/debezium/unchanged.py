"""Values a row image holds that are not the row's: unchanged TOAST and key-only fillers.

Two things the PostgreSQL connector writes into row images do not describe the row:

* **Unchanged TOASTed values.** An update that does not touch a large (TOASTed) value
  leaves it out of the WAL record; the connector writes its
  ``unavailable.value.placeholder`` instead (``__debezium_unavailable_value``: as text,
  as the placeholder's bytes in base64 or hex for ``bytea``, as a one-element array for
  arrays). Such a column did not change: it is left out of the LCR's values, as
  changeflow's own PostgreSQL capture leaves out an unchanged TOASTed value, never
  stored as the placeholder text and never as NULL (an apply would overwrite the real
  value with either). :func:`placeholder_forms` lists the forms, :func:`column_forms`
  the ones a column of each codec can hold.
* **Fillers of a key-only old image.** With ``REPLICA IDENTITY DEFAULT`` a delete (or
  a key-changing update) carries the old key only; the connector fills the other
  columns of ``before`` with NULL, or, for ``NOT NULL`` columns, with a filler: ``''``,
  ``0``, ``false``, 1970-01-01, empty bytes. Those are not the old row: an apply that
  compared them with the target would report a conflict that is not one.
  :func:`key_only_sql` recognises such an image (every non-key column NULL or a
  filler); its old values are then the key alone, as for the PostgreSQL capture. A
  ``REPLICA IDENTITY FULL`` row whose every non-key value is NULL or a filler looks the
  same and keeps only its key too: it loses no value an apply needs to find the row.

>>> placeholder_forms("__x")[:3]
['__x', 'X194', '5f5f78']
>>> column_forms("bytes", "__x")
['X194']
"""

from __future__ import annotations

import base64
import json

from changeflow import lcr
from changeflow.debezium import envelope as E


def placeholder_forms(placeholder: str = E.UNAVAILABLE) -> list[str]:
    """Every raw JSON text (as a row image read as ``map<string,string>`` holds it) the
    connector writes for an unchanged TOASTed value: the text, its bytes in base64,
    hex and URL-safe base64, and one-element arrays of the text or base64."""
    raw = placeholder.encode()
    b64 = base64.b64encode(raw).decode()
    forms = [placeholder, b64, raw.hex(), base64.urlsafe_b64encode(raw).decode(),
             json.dumps([placeholder], separators=(",", ":")),
             json.dumps([b64], separators=(",", ":"))]
    return list(dict.fromkeys(forms))


def column_forms(codec: str, placeholder: str = E.UNAVAILABLE) -> list[str]:
    """The placeholder's forms a column of this codec can hold (values that are not
    TOASTable, numbers, dates, booleans, hold none).

    >>> column_forms("string", "p"), column_forms("hex", "p"), column_forms("int", "p")
    (['p'], ['70'], [])
    """
    raw = placeholder.encode()
    b64 = base64.b64encode(raw).decode()
    by_codec = {"string": [placeholder], "bytes": [b64], "decimal": [b64], "hex": [raw.hex()],
                "base64url": [base64.urlsafe_b64encode(raw).decode()]}
    return by_codec.get(codec, [])


def _lit(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def holds_placeholder(image: str, placeholder: str = E.UNAVAILABLE) -> str:
    """SQL: some value of the row image ``image`` (a ``map<string,string>``) is the
    placeholder (``arrays_overlap`` is NULL when only NULLs could match: false)."""
    forms = ", ".join(_lit(f) for f in placeholder_forms(placeholder))
    return f"coalesce(arrays_overlap(map_values({image}), array({forms})), false)"


#: SQL testing a typed value ``{v}`` (of the logical type) for NULL or its filler
_FILLER = {
    "VARCHAR2": "coalesce({v}.`str` = '', true)",
    "INTEGER": "coalesce({v}.`int` = 0, true)",
    "NUMBER": "coalesce({v}.`dec` = 0, true)",
    "BINARY_DOUBLE": "coalesce({v}.`dbl` = 0, true)",
    "BOOLEAN": "coalesce(NOT {v}.`bool`, true)",
    "DATE": "coalesce({v}.`date` = DATE'1970-01-01', true)",
    "TIMESTAMP": "coalesce({v}.`ts_ntz` = TIMESTAMP_NTZ'1970-01-01 00:00:00', true)",
    "TIMESTAMP WITH TIME ZONE": "coalesce(unix_micros({v}.`ts`) = 0, true)",
    "RAW": "coalesce(length({v}.`raw`) = 0, true)",
}


def key_only_sql(built: str, columns: dict[str, str], key: list[str]) -> str:
    """SQL: the LCR value map in column ``built`` holds nothing but its key: every
    other column is absent, NULL or its type's filler.

    Args:
        built: the column holding the image's value map (canonical names).
        columns: canonical column name -> logical type, of the table.
        key: the table's key columns (canonical names).
    """
    tests = [_FILLER[logical].format(v=f"`{built}`[{_lit(name)}]")
             for name, logical in columns.items() if name not in key]
    if not tests or not key:
        return "false"
    return "(" + " AND ".join(tests) + ")"


def canonical_types(columns: dict[str, str]) -> dict[str, str]:
    """Source column name -> logical type, as canonical name -> logical type."""
    return {lcr.canonical_identifier(n): t for n, t in columns.items()}
