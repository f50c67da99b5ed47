"""An IDAP agent element (``sender_id``, ``recipient``, ``reply_to``) as an agent name.

>>> from xml.etree.ElementTree import fromstring
>>> from changeflow.idap.xmlns import IDAP_NS
>>> agent(fromstring(f'<a xmlns="{IDAP_NS}"><agent_name>APP</agent_name>'
...                  '<address>oe.q@dbs2</address></a>'), "sender_id", address_is_queue=True)
'APP@oe.q@dbs2'
"""

from __future__ import annotations

import re
from xml.etree.ElementTree import Element

from changeflow.idap.errors import InvalidRequestError
from changeflow.idap.xmlns import by_name, number, text

_QUEUE_ADDRESS = re.compile(r"^[A-Za-z_][A-Za-z0-9_$#]*\.[A-Za-z_][A-Za-z0-9_$#]*(@\S+)?$")
_AGENT = ("agent_name", "address", "protocol", "agent_alias")


def agent(el: Element, path: str, *, address_is_queue: bool) -> str:
    """``name@address``, the name or the address of an agent element.

    Raises:
        InvalidRequestError: an alias, an address that is no queue, or neither part.
    """
    found = by_name(el, path, _AGENT)
    if found.get("agent_alias") is not None:
        raise InvalidRequestError(f"{path}/agent_alias needs an LDAP server to resolve it; give "
                                  "agent_name (and address) instead")
    name = text(found.get("agent_name")) or ""
    address = text(found.get("address")) or ""
    number(found, "protocol", path, integer=True)
    if address and not address_is_queue and not _QUEUE_ADDRESS.match(address):
        address = ""  # a sender's free-form address ("home"): not a queue, not kept
    if address and not _QUEUE_ADDRESS.match(address):
        raise InvalidRequestError(f"{path}/address {address!r} must be schema.queue[@site]")
    if not name and not address:
        raise InvalidRequestError(f"{path} needs an agent_name or an address")
    return f"{name}@{address}" if name and address else (address or name)
