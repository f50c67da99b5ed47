"""LCRs in XML: row LCR payloads (``SYS.LCR$_ROW_RECORD``) and whole LCR-contract rows.

Column values keep their logical types: ``<value name="SALARY" type="NUMBER">4200.50
</value>``; a typed NULL is ``<value name="X" type="DATE" null="true"/>``. HTTP
propagation sends each message of an LCR batch as an ``<lcr>`` element holding the
contract's fields (``changeflow.lcr.LCR_FIELDS``); the receiving server rebuilds the
Arrow rows and writes them as one batch, so the batch it commits is the batch that
left, value for value.

>>> import decimal
>>> row = {"old_values": None, "new_values": {"SAL": decimal.Decimal("1.50"), "NOTE": None}}
>>> el = values_element("new_values", row["new_values"])
>>> read_values(el, "x")
{'SAL': Decimal('1.50'), 'NOTE': None}
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any
from xml.etree.ElementTree import Element, SubElement

from changeflow import lcr
from changeflow.errors import PayloadTypeError
from changeflow.idap.errors import InvalidRequestError
from changeflow.idap.xmlns import children, local, q, text

_DEC = decimal.Decimal


def _to_text(value: Any, type_name: str) -> str:
    if type_name == "RAW":
        return bytes(value).hex()
    if type_name in ("DATE", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE"):
        return value.isoformat()
    if type_name == "BOOLEAN":
        return "true" if value else "false"
    if type_name == "NUMBER":
        return format(_DEC(value), "f")
    if type_name == "BINARY_DOUBLE":
        return repr(float(value))
    return str(value)


def _from_text(raw: str, type_name: str, where: str) -> Any:
    try:
        if type_name == "VARCHAR2":
            return raw
        value = raw.strip()
        if type_name == "INTEGER":
            return int(value)
        if type_name == "NUMBER":
            return _DEC(value)
        if type_name == "BINARY_DOUBLE":
            return float(value)
        if type_name == "BOOLEAN":
            return value.lower() in ("true", "1")
        if type_name == "DATE":
            return dt.date.fromisoformat(value)
        if type_name == "TIMESTAMP":
            return dt.datetime.fromisoformat(value).replace(tzinfo=None)
        if type_name == "TIMESTAMP WITH TIME ZONE":
            found = dt.datetime.fromisoformat(value)
            return found if found.tzinfo else found.replace(tzinfo=dt.UTC)
        if type_name == "RAW":
            return bytes.fromhex(value)
    except (ValueError, decimal.InvalidOperation):
        raise PayloadTypeError(f"{where}: {raw[:40]!r} is not a valid {type_name}") from None
    raise PayloadTypeError(f"{where}: unknown logical type {type_name!r}")


def values_element(tag: str, values: dict[str, Any] | None, parent: Element | None = None
                   ) -> Element:
    """``<tag><value name=.. type=..>text</value>...</tag>`` (types inferred from values)."""
    el = SubElement(parent, q(tag)) if parent is not None else Element(q(tag))
    for name, value in (values or {}).items():
        type_name = "VARCHAR2" if value is None else lcr.logical_type_of(value)
        _value(el, name, value, type_name)
    return el


def _value(parent: Element, name: str, value: Any, type_name: str) -> None:
    v = SubElement(parent, q("value"), {"name": name, "type": type_name})
    if value is None:
        v.set("null", "true")
    else:
        v.text = _to_text(value, type_name)


def read_values(el: Element, path: str) -> dict[str, Any]:
    """The values of a ``values_element`` (``{name: value}``)."""
    return {name: value for name, (value, _) in _typed_values(el, path).items()}


def _typed_values(el: Element, path: str) -> dict[str, tuple[Any, str]]:
    out: dict[str, tuple[Any, str]] = {}
    for i, v in enumerate(children(el, path), 1):
        where = f"{path}/value[{i}]"
        name, type_name = v.get("name"), v.get("type", "VARCHAR2")
        if local(v) != "value" or not name:
            raise InvalidRequestError(f"{where}: write <value name=\"...\" type=\"...\">")
        if type_name not in lcr.LOGICAL_TYPES:
            raise PayloadTypeError(f"{where}: unknown type {type_name!r}; use one of "
                                   f"{', '.join(lcr.LOGICAL_TYPES)}")
        if v.get("null") in ("true", "1"):
            out[name] = (None, type_name)
        else:
            out[name] = (_from_text(v.text or "", type_name, where), type_name)
    return out


# -- user-enqueued row LCRs (SYS.LCR$_ROW_RECORD payloads) ------------------------------------
_ROW_TEXT = ("source_database_name", "command_type", "object_owner", "object_name",
             "transaction_id")


def encode_row_lcr(parent: Element, payload: dict[str, Any]) -> None:
    """A row LCR payload as ``<ROW_LCR>``."""
    el = SubElement(parent, q("ROW_LCR"))
    for key in _ROW_TEXT:
        if payload.get(key) is not None:
            SubElement(el, q(key)).text = str(payload[key])
    for key in ("commit_scn", "position"):
        if payload.get(key) is not None:
            SubElement(el, q(key)).text = str(payload[key])
    if payload.get("tag") is not None:
        SubElement(el, q("tag")).text = bytes(payload["tag"]).hex()
    if payload.get("commit_time") is not None:
        SubElement(el, q("commit_time")).text = payload["commit_time"].isoformat()
    if payload.get("key_columns"):
        kc = SubElement(el, q("key_columns"))
        for c in payload["key_columns"]:
            SubElement(kc, q("item")).text = c
    for key in ("old_values", "new_values"):
        if payload.get(key) is not None:
            values_element(key, payload[key], el)


def decode_row_lcr(el: Element, path: str) -> dict[str, Any]:
    """A ``<ROW_LCR>`` element as a row LCR payload (the messaging layer checks it)."""
    if local(el) != "ROW_LCR":
        raise InvalidRequestError(f"{path}: a SYS.LCR$_ROW_RECORD queue takes <ROW_LCR>")
    out: dict[str, Any] = {}
    for child in children(el, path):
        key = local(child)
        where = f"{path}/{key}"
        if key in _ROW_TEXT:
            out[key] = text(child)
        elif key in ("commit_scn", "position"):
            out[key] = _from_text(text(child) or "", "INTEGER", where)
        elif key == "tag":
            out[key] = _from_text(text(child) or "", "RAW", where)
        elif key == "commit_time":
            out[key] = _from_text(text(child) or "", "TIMESTAMP WITH TIME ZONE", where)
        elif key == "key_columns":
            out[key] = [text(c) or "" for c in children(child, where)]
        elif key in ("old_values", "new_values"):
            out[key] = read_values(child, where)
        else:
            raise InvalidRequestError(f"unknown element {where} in a row LCR")
    return out


# -- whole LCR-contract rows (HTTP propagation of LCR batches) -------------------------------
_SCALARS = {name: ddl for name, ddl, _ in lcr.LCR_FIELDS}


def encode_contract_row(parent: Element, row: dict[str, Any]) -> None:
    """One LCR-contract row (``pyarrow`` ``to_pylist`` form) as ``<lcr>``."""
    el = SubElement(parent, q("lcr"))
    for name, ddl, _ in lcr.LCR_FIELDS:
        value = row.get(name)
        if value is None:
            continue
        if ddl == lcr.VALUES_DDL:
            box = SubElement(el, q(name))
            for key, struct in value:
                type_name = struct["type"]
                _value(box, key, lcr.decode_value(struct), type_name)
        elif ddl == "array<string>":
            box = SubElement(el, q(name))
            for item in value:
                SubElement(box, q("item")).text = item
        else:
            SubElement(el, q(name)).text = _scalar_text(value, ddl)


def _scalar_text(value: Any, ddl: str) -> str:
    if ddl == "binary":
        return bytes(value).hex()
    if ddl in ("timestamp", "timestamp_ntz"):
        return value.isoformat()
    return str(value)


def decode_contract_row(el: Element, path: str) -> dict[str, Any]:
    """An ``<lcr>`` element as an LCR-contract row for ``pyarrow.Table.from_pylist``.

    Raises:
        InvalidRequestError, PayloadTypeError: an unknown field or a bad value.
    """
    if local(el) != "lcr":
        raise InvalidRequestError(f"{path}/{local(el)}: a propagated batch holds <lcr> rows")
    row: dict[str, Any] = {}
    for child in children(el, path):
        name = local(child)
        where = f"{path}/{name}"
        ddl = _SCALARS.get(name)
        if ddl is None:
            raise InvalidRequestError(f"unknown LCR field {where}")
        if ddl == lcr.VALUES_DDL:
            row[name] = [(k, lcr.encode_value(v, t))
                         for k, (v, t) in _typed_values(child, where).items()]
        elif ddl == "array<string>":
            row[name] = [c.text or "" for c in children(child, where)]
        else:
            row[name] = _scalar(child.text or "", ddl, where)
    return row


def _scalar(raw: str, ddl: str, where: str) -> Any:
    kinds = {"string": "VARCHAR2", "int": "INTEGER", "bigint": "INTEGER", "binary": "RAW",
             "timestamp": "TIMESTAMP WITH TIME ZONE", "timestamp_ntz": "TIMESTAMP"}
    return _from_text(raw, kinds.get(ddl, "VARCHAR2"), where)
