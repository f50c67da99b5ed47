"""Message types: RAW, object types with typed fields, ANYDATA, the JMS types and row LCRs.

A queue table has a payload type; every message of its queues must match it. Built-in
types need no declaration:

============================== ====================================================
``RAW``                        bytes
``SYS.ANYDATA``                any payload: bytes, a dict (fields typed by value), a
                               declared object type (``type_name=``), a JMS message
``SYS.AQ$_JMS_TEXT_MESSAGE``   :class:`~changeflow.messaging.payloads.JmsText`
``SYS.AQ$_JMS_BYTES_MESSAGE``  :class:`~changeflow.messaging.payloads.JmsBytes`
``SYS.AQ$_JMS_MAP_MESSAGE``    :class:`~changeflow.messaging.payloads.JmsMap`
``SYS.AQ$_JMS_OBJECT_MESSAGE`` :class:`~changeflow.messaging.payloads.JmsObject`
``SYS.LCR$_ROW_RECORD``        a user-enqueued row LCR (a dict of LCR fields)
============================== ====================================================

Object types (``CREATE TYPE ... AS OBJECT``) are declared with named, typed fields
(:func:`changeflow.messaging.admin.create_type` or the pipeline configuration) and
keep their field types end to end: a NUMBER comes back a ``Decimal``, a DATE a
``date``, RAW ``bytes``.

>>> t = TypeDef.object("hr.order_t", {"order_id": "INTEGER", "region": "VARCHAR2(10)"})
>>> text, raw, size = t.encode({"ORDER_ID": "7", "region": "WEST"})
>>> t.decode(text, raw)
{'order_id': 7, 'region': 'WEST'}
>>> t.encode({"order_id": 1, "colour": "red"})
Traceback (most recent call last):
...
changeflow.errors.PayloadTypeError: type HR.ORDER_T has no field 'colour' (fields: order_id, region)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from changeflow.errors import PayloadTypeError
from changeflow.messaging import payloads as P
from changeflow.messaging.errors import UnknownTypeError

RAW, ANYDATA, OBJECT, LCR = "RAW", "ANYDATA", "OBJECT", "LCR"
JMS_TEXT, JMS_BYTES, JMS_MAP, JMS_OBJECT = "JMS_TEXT", "JMS_BYTES", "JMS_MAP", "JMS_OBJECT"

BUILTIN_KINDS = {
    "RAW": RAW,
    "SYS.ANYDATA": ANYDATA,
    "SYS.AQ$_JMS_TEXT_MESSAGE": JMS_TEXT,
    "SYS.AQ$_JMS_BYTES_MESSAGE": JMS_BYTES,
    "SYS.AQ$_JMS_MAP_MESSAGE": JMS_MAP,
    "SYS.AQ$_JMS_OBJECT_MESSAGE": JMS_OBJECT,
    "SYS.LCR$_ROW_RECORD": LCR,
}
_SHORT = {"ANYDATA": "SYS.ANYDATA", "LCR$_ROW_RECORD": "SYS.LCR$_ROW_RECORD",
          **{k.removeprefix("SYS."): k for k in BUILTIN_KINDS if k.startswith("SYS.AQ$")}}
_JMS_CLASSES: dict[str, type] = {JMS_TEXT: P.JmsText, JMS_BYTES: P.JmsBytes,
                                 JMS_MAP: P.JmsMap, JMS_OBJECT: P.JmsObject}
_LCR_TEXT = ("source_database_name", "command_type", "object_owner", "object_name",
             "transaction_id")
_LCR_FIELDS = (*_LCR_TEXT, "tag", "commit_scn", "commit_time", "position", "key_columns",
               "old_values", "new_values")


def canonical_type_name(name: str) -> str:
    """A type name as stored: upper case, ``SYS.`` added to the built-in short names.

    >>> canonical_type_name("aq$_jms_text_message"), canonical_type_name("hr.order_t")
    ('SYS.AQ$_JMS_TEXT_MESSAGE', 'HR.ORDER_T')
    """
    text = str(name).strip().upper()
    return _SHORT.get(text, text)


@dataclass(frozen=True)
class TypeDef:
    """A message type: its name, kind and (object types) its fields in order."""

    name: str
    kind: str
    fields: tuple[tuple[str, P.FieldType], ...] = ()

    @classmethod
    def object(cls, name: str, fields: dict[str, str] | list[tuple[str, str]]) -> TypeDef:
        """An object type from ``{field: type}`` (declared order kept).

        Raises:
            PayloadTypeError: no fields, a duplicate field (case-insensitive) or a bad type.
        """
        items = list(fields.items()) if isinstance(fields, dict) else list(fields)
        if not items:
            raise PayloadTypeError(f"object type {name}: declare at least one field")
        seen: set[str] = set()
        out = []
        for fname, spec in items:
            fname = str(fname).strip()
            if not fname or fname.upper() in seen:
                raise PayloadTypeError(f"object type {name}: duplicate or empty field {fname!r}")
            seen.add(fname.upper())
            try:
                out.append((fname, P.FieldType.parse(spec)))
            except PayloadTypeError as exc:
                raise PayloadTypeError(f"object type {name}, field {fname}: {exc}") from None
        return cls(canonical_type_name(name), OBJECT, tuple(out))

    @property
    def field_names(self) -> tuple[str, ...]:
        """The declared field names."""
        return tuple(n for n, _ in self.fields)

    # -- encoding ------------------------------------------------------------------------
    def encode(self, payload: Any) -> tuple[str | None, bytes | None, int]:
        """Check a payload against this type and encode it for storage.

        Returns:
            ``(json text, raw bytes, size in bytes)``.

        Raises:
            PayloadTypeError: the payload does not match the type (naming the field).
        """
        text, raw = _ENCODERS[self.kind](self, payload)
        size = (len(text.encode()) if text is not None else 0) + (len(raw) if raw else 0)
        return text, raw, size

    def decode(self, text: str | None, raw: bytes | None) -> Any:
        """The payload :meth:`encode` stored, with its field types restored."""
        return _DECODERS[self.kind](self, json.loads(text) if text else None, raw)

    def rule_fields(self, payload: Any) -> dict[str, Any]:
        """Payload fields for conditions (``:msg.field``): upper-case names, typed values."""
        from changeflow.lcr import encode_value

        if self.kind == OBJECT:
            return {n.upper(): encode_value(payload.get(n), ft.name)
                    for n, ft in self.fields}
        if self.kind == ANYDATA and isinstance(payload, dict):
            return {k.upper(): encode_value(v) for k, v in payload.items()}
        if self.kind in (JMS_TEXT, JMS_BYTES, JMS_MAP, JMS_OBJECT):
            out = {k.upper(): encode_value(v) for k, v in payload.properties.items()}
            if self.kind == JMS_MAP:
                out.update({k.upper(): encode_value(v) for k, v in payload.values.items()})
            return out
        return {}


def _want(t: TypeDef, payload: Any, kinds: type | tuple[type, ...], what: str) -> None:
    if not isinstance(payload, kinds):
        raise PayloadTypeError(
            f"a {t.name} payload must be {what}, not {type(payload).__name__}")


def _enc_raw(t: TypeDef, payload: Any) -> tuple[str | None, bytes | None]:
    if isinstance(payload, str):
        return None, P.coerce(payload, P.FieldType("RAW"), "payload")
    _want(t, payload, (bytes, bytearray, memoryview), "bytes (or hex text)")
    return None, bytes(payload)


def _enc_object(t: TypeDef, payload: Any) -> tuple[str | None, bytes | None]:
    _want(t, payload, dict, "a dict of field values")
    by_upper = {n.upper(): (n, ft) for n, ft in t.fields}
    out: dict[str, Any] = {}
    for key, value in payload.items():
        found = by_upper.get(str(key).upper())
        if found is None:
            raise PayloadTypeError(
                f"type {t.name} has no field {key!r} (fields: {', '.join(t.field_names)})")
        name, ft = found
        out[name] = P.to_json(P.coerce(value, ft, name), ft.name)
    return json.dumps(out, separators=(",", ":")), None


def _enc_anydata(t: TypeDef, payload: Any) -> tuple[str | None, bytes | None]:
    if isinstance(payload, dict):
        return json.dumps({"fields": P.typed_fields(payload, "")},
                          separators=(",", ":")), None
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return None, bytes(payload)
    return json.dumps({"value": P.typed_json(payload, "payload")}), None


def _properties(t: TypeDef, payload: Any) -> dict[str, Any]:
    props = getattr(payload, "properties", None) or {}
    _want(t, props, dict, "a JMS message whose properties are a dict")
    return P.typed_fields(props, "properties")


def _enc_jms(t: TypeDef, payload: Any) -> tuple[str | None, bytes | None]:
    cls = _JMS_CLASSES[t.kind]
    if t.kind == JMS_TEXT and isinstance(payload, str):
        payload = P.JmsText(payload)
    elif t.kind in (JMS_BYTES, JMS_OBJECT) and isinstance(payload, (bytes, bytearray)):
        payload = cls(bytes(payload))
    elif t.kind == JMS_MAP and isinstance(payload, dict):
        payload = P.JmsMap(payload)
    _want(t, payload, cls, f"a {cls.__name__}")
    doc: dict[str, Any] = {"properties": _properties(t, payload)}
    raw = None
    if t.kind == JMS_TEXT:
        if not isinstance(payload.text, str):
            raise PayloadTypeError(f"a {t.name} payload's text must be text")
        doc["text"] = payload.text
    elif t.kind == JMS_MAP:
        _want(t, payload.values, dict, "a JmsMap whose values are a dict")
        doc["map"] = P.typed_fields(payload.values, "map")
    else:
        if not isinstance(payload.data, (bytes, bytearray)):
            raise PayloadTypeError(f"a {t.name} payload's data must be bytes")
        raw = bytes(payload.data)
        if t.kind == JMS_OBJECT:
            doc["class"] = payload.class_name
    return json.dumps(doc, separators=(",", ":")), raw


def _enc_lcr(t: TypeDef, payload: Any) -> tuple[str | None, bytes | None]:
    _want(t, payload, dict, "a dict of row LCR fields")
    unknown = set(payload) - set(_LCR_FIELDS)
    if unknown:
        raise PayloadTypeError(f"a row LCR has no field {sorted(unknown)[0]!r} "
                               f"(fields: {', '.join(_LCR_FIELDS)})")
    if payload.get("command_type") not in ("INSERT", "UPDATE", "DELETE"):
        raise PayloadTypeError("a row LCR's command_type must be INSERT, UPDATE or DELETE")
    for key in ("object_owner", "object_name"):
        if not isinstance(payload.get(key), str) or not payload[key]:
            raise PayloadTypeError(f"a row LCR needs {key} (text)")
    doc: dict[str, Any] = {k: payload.get(k) for k in _LCR_TEXT}
    for key in ("commit_scn", "position"):
        if payload.get(key) is not None:
            doc[key] = P.coerce(payload[key], P.FieldType("INTEGER"), key)
    if payload.get("tag") is not None:
        doc["tag"] = P.coerce(payload["tag"], P.FieldType("RAW"), "tag").hex()
    if payload.get("commit_time") is not None:
        doc["commit_time"] = P.typed_json(payload["commit_time"], "commit_time")
    doc["key_columns"] = list(payload.get("key_columns") or [])
    for key in ("old_values", "new_values"):
        values = payload.get(key)
        doc[key] = None if values is None else P.typed_fields(values, key)
    return json.dumps(doc, separators=(",", ":")), None


_ENCODERS = {RAW: _enc_raw, OBJECT: _enc_object, ANYDATA: _enc_anydata, LCR: _enc_lcr,
             JMS_TEXT: _enc_jms, JMS_BYTES: _enc_jms, JMS_MAP: _enc_jms, JMS_OBJECT: _enc_jms}


def _dec_fields(doc: dict[str, Any] | None) -> dict[str, Any]:
    return {k: P.from_typed_json(v) for k, v in (doc or {}).items()}


def _dec_object(t: TypeDef, doc: Any, raw: bytes | None) -> Any:
    get = doc.get
    out = {}
    for n, conv in _object_decoders(t):
        v = get(n)
        out[n] = v if v is None or conv is None else conv(v)
    return out


def _object_decoders(t: TypeDef) -> tuple[tuple[str, Callable[[Any], Any] | None], ...]:
    """Per field of an object type: its name and how its stored JSON value is decoded
    (None: used as is), as :func:`changeflow.messaging.payloads.from_json` does; kept
    with the (immutable) type."""
    found = t.__dict__.get("_decoders")
    if found is None:
        found = tuple((n, P.json_decoder(ft.name)) for n, ft in t.fields)
        object.__setattr__(t, "_decoders", found)
    return found  # type: ignore[no-any-return]


def _dec_anydata(t: TypeDef, doc: Any, raw: bytes | None) -> Any:
    if doc is None:
        return raw
    if "fields" in doc:
        return _dec_fields(doc["fields"])
    return P.from_typed_json(doc["value"])


def _dec_jms(t: TypeDef, doc: Any, raw: bytes | None) -> Any:
    props = _dec_fields(doc.get("properties"))
    if t.kind == JMS_TEXT:
        return P.JmsText(doc["text"], props)
    if t.kind == JMS_MAP:
        return P.JmsMap(_dec_fields(doc["map"]), props)
    if t.kind == JMS_BYTES:
        return P.JmsBytes(raw or b"", props)
    return P.JmsObject(raw or b"", doc.get("class"), props)


def _dec_lcr(t: TypeDef, doc: Any, raw: bytes | None) -> Any:
    out = dict(doc)
    if out.get("tag") is not None:
        out["tag"] = bytes.fromhex(out["tag"])
    if out.get("commit_time") is not None:
        out["commit_time"] = P.from_typed_json(out["commit_time"])
    for key in ("old_values", "new_values"):
        if out.get(key) is not None:
            out[key] = _dec_fields(out[key])
    return out


_DECODERS = {RAW: lambda t, d, r: r or b"", OBJECT: _dec_object, ANYDATA: _dec_anydata,
             LCR: _dec_lcr, JMS_TEXT: _dec_jms, JMS_BYTES: _dec_jms, JMS_MAP: _dec_jms,
             JMS_OBJECT: _dec_jms}


def builtin(name: str) -> TypeDef | None:
    """The built-in type of that name, if it is one."""
    canonical = canonical_type_name(name)
    kind = BUILTIN_KINDS.get(canonical)
    return TypeDef(canonical, kind) if kind else None


def from_row(name: str, kind: str, fields_json: str) -> TypeDef:
    """A stored object type."""
    fields = tuple((n, P.FieldType.parse(s)) for n, s in json.loads(fields_json))
    return TypeDef(name, kind, fields)


def fields_json(t: TypeDef) -> str:
    """The stored form of an object type's fields."""
    return json.dumps([[n, str(ft)] for n, ft in t.fields])


def jms_kind_of(payload: Any) -> str | None:
    """The built-in type name of a JMS payload object (for ANYDATA queues)."""
    for kind, cls in _JMS_CLASSES.items():
        if isinstance(payload, cls):
            return next(n for n, k in BUILTIN_KINDS.items() if k == kind)
    return None


def lcr_message(payload: dict[str, Any], type_name: str) -> dict[str, Any]:
    """A user-enqueued row LCR as the rules engine reads messages (kind ``ROW``)."""
    return {"kind": "ROW", "msg_type_name": type_name, **payload}


def unknown_type(name: str, known: list[str]) -> UnknownTypeError:
    """The error for an undefined type name."""
    return UnknownTypeError(
        f"message type {canonical_type_name(name)!r} is not defined; built-in types: "
        f"{', '.join(BUILTIN_KINDS)}; declared: {', '.join(known) or 'none'}")
