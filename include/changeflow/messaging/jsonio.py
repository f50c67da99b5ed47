"""Payloads to and from JSON, for the CLI and other text clients.

JSON has no bytes, decimals or dates, so the text forms are used: RAW as hex, NUMBER as
a number or a string, DATE and TIMESTAMP as ISO text (the type's field checks accept
them). JMS messages are objects: ``{"text": ..., "properties": {...}}`` (a bare
string is a TextMessage), ``{"map": {...}}``, ``{"data": "<hex>"}`` (Bytes/Object,
with ``"class"`` for an ObjectMessage).

>>> from changeflow.messaging.types import builtin
>>> from_json(builtin("SYS.AQ$_JMS_TEXT_MESSAGE"), "hi")
JmsText(text='hi', properties={})
>>> to_json(from_json(builtin("RAW"), "0aff"))
'0aff'
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

from changeflow.errors import PayloadTypeError
from changeflow.messaging import payloads as P
from changeflow.messaging import types as T


def _hex(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise PayloadTypeError(f"{what} must be hexadecimal text in JSON")
    return P.coerce(value, P.FieldType("RAW"), what)


def from_json(mtype: T.TypeDef, value: Any) -> Any:
    """A payload of ``mtype`` from its JSON form.

    Raises:
        PayloadTypeError: the JSON does not have the shape of the type.
    """
    kind = mtype.kind
    if kind == T.RAW:
        return _hex(value, "a RAW payload")
    if kind == T.JMS_TEXT:
        if isinstance(value, str):
            return P.JmsText(value)
        doc = _object(value, mtype, ("text", "properties"))
        if not isinstance(doc.get("text"), str):
            raise PayloadTypeError(f"a {mtype.name} payload needs \"text\" (a string)")
        return P.JmsText(doc["text"], doc.get("properties") or {})
    if kind == T.JMS_MAP:
        doc = _object(value, mtype, None)
        if set(doc) <= {"map", "properties"} and "map" in doc:
            return P.JmsMap(doc["map"], doc.get("properties") or {})
        return P.JmsMap(doc)
    if kind in (T.JMS_BYTES, T.JMS_OBJECT):
        if isinstance(value, str):
            value = {"data": value}
        doc = _object(value, mtype, ("data", "properties", "class"))
        data = _hex(doc.get("data", ""), f"a {mtype.name} payload's data")
        if kind == T.JMS_BYTES:
            return P.JmsBytes(data, doc.get("properties") or {})
        return P.JmsObject(data, doc.get("class"), doc.get("properties") or {})
    return value


def _object(value: Any, mtype: T.TypeDef, keys: tuple[str, ...] | None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise PayloadTypeError(f"a {mtype.name} payload must be a JSON object")
    if keys is not None and set(value) - set(keys):
        extra = sorted(set(value) - set(keys))
        raise PayloadTypeError(f"a {mtype.name} payload has no key {extra[0]!r} "
                               f"(keys: {', '.join(keys)})")
    return value


def to_json(payload: Any) -> Any:
    """A dequeued payload as JSON-able values."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return bytes(payload).hex()
    if isinstance(payload, decimal.Decimal):
        return str(payload)
    if isinstance(payload, (dt.date, dt.datetime)):
        return payload.isoformat()
    if isinstance(payload, dict):
        return {k: to_json(v) for k, v in payload.items()}
    if isinstance(payload, (list, tuple)):
        return [to_json(v) for v in payload]
    if isinstance(payload, P.JmsText):
        return {"text": payload.text, "properties": to_json(payload.properties)}
    if isinstance(payload, P.JmsMap):
        return {"map": to_json(payload.values), "properties": to_json(payload.properties)}
    if isinstance(payload, P.JmsBytes):
        return {"data": payload.data.hex(), "properties": to_json(payload.properties)}
    if isinstance(payload, P.JmsObject):
        return {"data": payload.data.hex(), "class": payload.class_name,
                "properties": to_json(payload.properties)}
    return payload
