"""``message_payload`` in XML, for each payload type (seed 003, "Internet Message Payloads").

============================= ==========================================================
queue payload type            ``message_payload`` holds
============================= ==========================================================
RAW                           ``<raw>023f4523</raw>``: the bytes in hex
an object type ``OE.ORDER_T`` ``<ORDER_T><ID>7</ID><REGION>WEST</REGION></ORDER_T>``: one
                              element per attribute (names case-insensitive, an empty
                              element is NULL), typed by the type's declaration
JMS text / map / bytes /      ``<jms_text_message>`` (``text_data``), ``<jms_map_message>``
object                        (``map_data`` of ``item``), ``<jms_bytes_message>``
                              (``bytes_data``, hex), ``<jms_object_message>``
                              (``ser_object_data``, hex), each with optional
                              ``oracle_jms_properties`` and ``user_properties``
SYS.ANYDATA                   any of these; an object element names its type in a
                              ``type_name`` attribute, or its children are text fields
============================= ==========================================================

JMS property and map values are typed by their element: ``string_value``,
``int_value``, ``long_value``, ``short_value``, ``byte_value``, ``boolean_value``,
``float_value``, ``double_value``, ``bytes_value`` (hex). ``oracle_jms_properties``
(``type``, ``userid``, ``appid``, ``groupid``, ``groupseq``, ``reply_to``) are kept as
the JMS properties ``JMSType``, ``JMSXUserID``, ``JMSXAppID``, ``JMSXGroupID``,
``JMSXGroupSeq`` and ``JMSReplyTo``, and written back in the same place.
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any
from xml.etree.ElementTree import Element, SubElement

from changeflow.errors import PayloadTypeError
from changeflow.idap.errors import InvalidRequestError
from changeflow.idap.xmlns import by_name, children, local, q, text
from changeflow.messaging import payloads as P
from changeflow.messaging import types as T
from changeflow.messaging.model import Message

JMS_ELEMENTS = {"jms_text_message": T.JMS_TEXT, "jms_map_message": T.JMS_MAP,
                "jms_bytes_message": T.JMS_BYTES, "jms_object_message": T.JMS_OBJECT}
_JMS_NAME = {v: k for k, v in JMS_ELEMENTS.items()}
_ORACLE_PROPS = {"type": "JMSType", "userid": "JMSXUserID", "appid": "JMSXAppID",
                 "groupid": "JMSXGroupID", "groupseq": "JMSXGroupSeq", "reply_to": "JMSReplyTo"}
_VALUE_KINDS = ("string_value", "int_value", "long_value", "short_value", "byte_value",
                "boolean_value", "float_value", "double_value", "bytes_value", "char_value")


def short_type_name(name: str) -> str:
    """``OE.ORDER_T`` -> ``ORDER_T`` (the payload element's name)."""
    return name.rsplit(".", 1)[-1]


# -- reading --------------------------------------------------------------------------------
def decode(el: Element, qtype: T.TypeDef, path: str, lookup: Any) -> tuple[Any, str | None]:
    """The payload of ``el`` for a queue of type ``qtype``, and its type name (ANYDATA).

    Args:
        lookup: ``lookup(type_name) -> TypeDef`` for ANYDATA payloads naming a type.

    Raises:
        InvalidRequestError, PayloadTypeError: naming the element and the problem.
    """
    name = local(el)
    if qtype.kind == T.RAW:
        return _raw(el, path), None
    if qtype.kind in (T.JMS_TEXT, T.JMS_MAP, T.JMS_BYTES, T.JMS_OBJECT):
        want = _JMS_NAME[qtype.kind]
        if name != want:
            raise InvalidRequestError(f"{path}/{name}: queue payload type {qtype.name} takes "
                                      f"<{want}>")
        return _jms(el, qtype.kind, f"{path}/{name}"), None
    if qtype.kind == T.OBJECT:
        if name.upper() != short_type_name(qtype.name).upper():
            raise InvalidRequestError(
                f"{path}/{name}: the queue holds {qtype.name} objects; write "
                f"<{short_type_name(qtype.name)}> with one element per attribute")
        return _fields(el, f"{path}/{name}"), None
    if qtype.kind == T.ANYDATA:
        return _anydata(el, path, lookup)
    if qtype.kind == T.LCR:
        from changeflow.idap.lcrxml import decode_row_lcr

        return decode_row_lcr(el, f"{path}/{name}"), None
    raise InvalidRequestError(f"{path}: payload type {qtype.name} cannot be sent over IDAP")


def _raw(el: Element, path: str) -> bytes:
    if local(el) != "raw":
        raise InvalidRequestError(f"{path}/{local(el)}: a RAW queue takes <raw>hex</raw>")
    return _hex(text(el) or "", f"{path}/raw")


def _hex(value: str, where: str) -> bytes:
    try:
        return bytes.fromhex("".join(value.split()))
    except ValueError:
        raise PayloadTypeError(f"{where}: {value[:40]!r} is not hex (two digits a byte)") \
            from None


def _fields(el: Element, path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for child in children(el, path):
        key = local(child)
        if key in out:
            raise InvalidRequestError(f"element {path}/{key} appears twice")
        out[key] = text(child)
    return out


def _anydata(el: Element, path: str, lookup: Any) -> tuple[Any, str | None]:
    name = local(el)
    if name == "raw":
        return _raw(el, path), "RAW"
    if name in JMS_ELEMENTS:
        kind = JMS_ELEMENTS[name]
        type_name = next(n for n, k in T.BUILTIN_KINDS.items() if k == kind)
        return _jms(el, kind, f"{path}/{name}"), type_name
    declared = el.get("type_name")
    if declared:
        tdef = lookup(declared)
        if tdef.kind != T.OBJECT:
            raise InvalidRequestError(f"{path}/{name}: type_name {declared} is not an "
                                      "object type")
        return _fields(el, f"{path}/{name}"), tdef.name
    return _fields(el, f"{path}/{name}"), None


def _value(el: Element, where: str) -> Any:
    kind = local(el)
    raw = text(el, strip=kind not in ("string_value", "char_value"))
    if raw is None:
        return "" if kind in ("string_value", "char_value") else None
    try:
        if kind in ("int_value", "long_value", "short_value", "byte_value"):
            return int(raw)
        if kind in ("float_value", "double_value"):
            return float(raw)
        if kind == "boolean_value":
            low = raw.strip().lower()
            if low not in ("true", "false", "1", "0"):
                raise ValueError(raw)
            return low in ("true", "1")
    except ValueError:
        raise PayloadTypeError(f"{where}/{kind}: {raw!r} is not a valid {kind}") from None
    if kind == "bytes_value":
        return _hex(raw, f"{where}/bytes_value")
    return raw


def _named_values(el: Element, path: str, item: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, child in enumerate(children(el, path), 1):
        where = f"{path}/{item}[{i}]"
        if local(child) != item:
            raise InvalidRequestError(f"unknown element {path}/{local(child)}; it holds "
                                      f"{item} elements")
        found = by_name(child, where, ("name", *_VALUE_KINDS))
        name = text(found.get("name"))
        values = [found[k] for k in _VALUE_KINDS if k in found]
        if not name or len(values) != 1:
            raise InvalidRequestError(f"{where} needs a name and one *_value element")
        out[name] = _value(values[0], where)
    return out


def _jms(el: Element, kind: str, path: str) -> Any:
    data = {"jms_text_message": "text_data", "jms_map_message": "map_data",
            "jms_bytes_message": "bytes_data", "jms_object_message": "ser_object_data"}
    body = data[local(el)]
    found = by_name(el, path, ("oracle_jms_properties", "user_properties", body, "class_name"))
    props: dict[str, Any] = {}
    if "oracle_jms_properties" in found:
        ojp = by_name(found["oracle_jms_properties"], f"{path}/oracle_jms_properties",
                      tuple(_ORACLE_PROPS))
        for key, value_el in ojp.items():
            if key == "reply_to":
                from changeflow.idap.agents import agent

                props["JMSReplyTo"] = agent(value_el, f"{path}/oracle_jms_properties/reply_to",
                                             address_is_queue=False)
            elif (value := text(value_el)) is not None:
                props[_ORACLE_PROPS[key]] = int(value) if key == "groupseq" and \
                    value.lstrip("-").isdigit() else value
    if "user_properties" in found:
        props.update(_named_values(found["user_properties"], f"{path}/user_properties",
                                   "property"))
    body_el = found.get(body)
    if kind == T.JMS_TEXT:
        return P.JmsText(text(body_el, strip=False) or "", props)
    if kind == T.JMS_MAP:
        values = _named_values(body_el, f"{path}/map_data", "item") if body_el is not None \
            else {}
        return P.JmsMap(values, props)
    blob = _hex(text(body_el) or "", f"{path}/{body}")
    if kind == T.JMS_BYTES:
        return P.JmsBytes(blob, props)
    return P.JmsObject(blob, text(found.get("class_name")), props)


# -- writing --------------------------------------------------------------------------------
def value_text(value: Any) -> str | None:
    """A field value as element text (ISO dates and times, hex bytes, exact decimals)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    return str(value)


def _value_el(parent: Element, value: Any) -> None:
    if isinstance(value, bool):
        kind = "boolean_value"
    elif isinstance(value, int):
        kind = "int_value" if -2**31 <= value < 2**31 else "long_value"
    elif isinstance(value, (float, decimal.Decimal)):
        kind = "double_value"
    elif isinstance(value, (bytes, bytearray)):
        kind = "bytes_value"
    else:
        kind = "string_value"
    SubElement(parent, q(kind)).text = value_text(value)


def _named_el(parent: Element, tag: str, item: str, values: dict[str, Any]) -> None:
    box = SubElement(parent, q(tag))
    for name, value in values.items():
        it = SubElement(box, q(item))
        SubElement(it, q("name")).text = name
        _value_el(it, value)


def _jms_el(parent: Element, payload: Any, kind: str) -> None:
    el = SubElement(parent, q(_JMS_NAME[kind]))
    props = dict(payload.properties or {})
    oracle = {k: props.pop(v) for k, v in _ORACLE_PROPS.items() if v in props}
    if oracle:
        ojp = SubElement(el, q("oracle_jms_properties"))
        for key, value in oracle.items():
            if key == "reply_to":
                name, _, address = str(value).partition("@")
                rt = SubElement(ojp, q("reply_to"))
                SubElement(rt, q("agent_name")).text = name
                if address:
                    SubElement(rt, q("address")).text = address
            else:
                SubElement(ojp, q(key)).text = value_text(value)
    if props:
        _named_el(el, "user_properties", "property", props)
    if kind == T.JMS_TEXT:
        SubElement(el, q("text_data")).text = payload.text
    elif kind == T.JMS_MAP:
        _named_el(el, "map_data", "item", payload.values)
    elif kind == T.JMS_BYTES:
        SubElement(el, q("bytes_data")).text = payload.data.hex()
    else:
        if payload.class_name:
            SubElement(el, q("class_name")).text = payload.class_name
        SubElement(el, q("ser_object_data")).text = payload.data.hex()


def payload_element(parent: Element, m: Message) -> None:
    """Write a dequeued message's payload into ``message_payload``."""
    payload, type_name = m.payload, m.type_name
    kind = T.BUILTIN_KINDS.get(type_name)
    if kind == T.RAW or isinstance(payload, (bytes, bytearray)):
        SubElement(parent, q("raw")).text = bytes(payload).hex()
    elif kind in (T.JMS_TEXT, T.JMS_MAP, T.JMS_BYTES, T.JMS_OBJECT):
        _jms_el(parent, payload, kind)
    elif kind == T.LCR:
        from changeflow.idap.lcrxml import encode_row_lcr

        encode_row_lcr(parent, payload)
    elif isinstance(payload, dict):
        anydata = kind == T.ANYDATA
        el = SubElement(parent, q("ANYDATA" if anydata else short_type_name(type_name)))
        if not anydata:
            el.set("type_name", type_name)
        for key, value in payload.items():
            SubElement(el, q(key)).text = value_text(value)
    else:
        SubElement(parent, q("value")).text = value_text(payload)
