"""Editing a YAML file in place: the new content, the old file's comments and layout.

``changeflow rules add-*`` and ``remove-rule`` rewrite the rules file a person keeps
under version control. :func:`edit` turns the file's text into the text of new
content while keeping what the person wrote around it: comments (also those between
entries and after the last one), key order, quoting, flow or block style and the
indentation. Unchanged entries are left untouched; new keys go at the end of their
mapping, new list items at the end of their list; removed entries take the comment
lines that followed them along to the entry before them.

>>> old = '''# demo rules
... rules:
...   R1: {condition: "x"}   # first
...
... # the sets
... rule_sets:
...   S: {rules: [R1]}
... '''
>>> print(edit(old, {"rules": {"R1": {"condition": "x"}, "R2": {"condition": "y"}},
...                  "rule_sets": {"S": {"rules": ["R1", "R2"]}}}), end="")
# demo rules
rules:
  R1: {condition: "x"}   # first
  R2:
    condition: y
<BLANKLINE>
# the sets
rule_sets:
  S: {rules: [R1, R2]}
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from typing import Any

#: values that mean the same as a missing key: kept when the new content omits them
_DEFAULTS: tuple[Any, ...] = (None, "", 0, False)


_KEY_LINE = re.compile(r"^( *)[^\s#-][^#]*:\s*(#.*)?$")
_NULL = re.compile(r":[ \t]+(null|Null|NULL|~)[ \t]*(#.*)?$", re.M)


def guess_layout(text: str) -> tuple[int, int, int]:
    r"""(mapping indent, sequence indent, dash offset) of a YAML text's block style.

    >>> guess_layout("a:\n    b: 1\n    c:\n    - x\n")
    (4, 2, 0)
    >>> guess_layout("a:\n  b:\n    - x\n")
    (2, 4, 2)
    """
    mapping = offset = None
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    for line, following in zip(lines, lines[1:], strict=False):
        key = _KEY_LINE.match(line)
        if key is None:
            continue
        step = len(following) - len(following.lstrip(" ")) - len(key.group(1))
        if following.lstrip().startswith("- "):
            offset = step if offset is None and step >= 0 else offset
        elif step > 0 and mapping is None:
            mapping = step
    mapping = mapping or 2
    offset = offset or 0
    return mapping, offset + 2, offset


def _yaml(text: str) -> Any:
    from ruamel.yaml import YAML

    mapping, sequence, offset = guess_layout(text)
    y = YAML()
    y.preserve_quotes = True
    y.width = 1_000_000  # conditions stay on one line
    y.indent(mapping=mapping, sequence=sequence, offset=offset)
    null = _NULL.search(text)
    spelled = null.group(1) if null else ""
    y.representer.add_representer(
        type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", spelled))
    return y


def edit(old_text: str, new: Mapping[str, Any]) -> str:
    """The YAML text of ``new``, as an edit of ``old_text`` (see the module docstring).

    An empty ``old_text`` (or one whose top level is not a mapping) gives a fresh file.
    """
    from ruamel.yaml.comments import CommentedMap

    y = _yaml(old_text)
    doc = y.load(old_text) if old_text.strip() else None
    if not isinstance(doc, CommentedMap):
        doc = CommentedMap()
    _sync_map(doc, new)
    out = io.StringIO()
    y.dump(doc, out)
    return out.getvalue()


def _rt(value: Any) -> Any:
    """A value as ruamel's round-trip types, so that comments can be attached to it."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(value, Mapping):
        return CommentedMap((k, _rt(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return CommentedSeq(_rt(v) for v in value)
    return value


def _sync_map(node: Any, new: Mapping[str, Any]) -> None:
    for key in [k for k in node if k not in new and node[k] not in _DEFAULTS
                and node[k] != {} and node[k] != []]:
        _delete(node, key)
    for key, value in new.items():
        if key not in node:
            _append(node, key, _rt(value))
            continue
        current = node[key]
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            _sync_map(current, value)
        elif isinstance(current, list) and isinstance(value, list):
            _sync_list(current, value)
        elif current != value:
            node[key] = _rt(value)


def _sync_list(node: Any, new: list[Any]) -> None:
    if list(node) == new:
        return
    for i in reversed(range(len(node))):
        if node[i] not in new:
            _delete(node, i)
    for item in new:
        if item not in node:
            _append(node, len(node), _rt(item))
    if list(node) != new:  # reordered: the new order wins
        node[:] = [_rt(v) for v in new]


def _is_block(value: Any) -> bool:
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    return (isinstance(value, CommentedMap | CommentedSeq) and len(value) > 0
            and not value.fa.flow_style())


def _last_key(node: Any) -> Any:
    return next(reversed(node)) if isinstance(node, Mapping) else len(node) - 1


def _tail(node: Any, key: Any) -> tuple[Any, Any, int]:
    """Where ruamel keeps the comment lines after entry ``key`` of ``node``."""
    value = node[key]
    if _is_block(value):
        return _tail(value, _last_key(value))
    return node, key, 0 if isinstance(node, list) else 2


def _take_tail(node: Any, key: Any) -> str:
    """Detach the comment *lines* after an entry (its end-of-line comment stays)."""
    holder, k, pos = _tail(node, key)
    slot = holder.ca.items.get(k)
    token = slot[pos] if slot and len(slot) > pos else None
    if token is None:
        return ""
    value = token.value
    head, sep, rest = value.partition("\n")
    token.value = head + sep
    return rest


def _give_tail(node: Any, key: Any, lines: str) -> None:
    """Attach comment lines after an entry (after its own end-of-line comment)."""
    from ruamel.yaml.error import CommentMark
    from ruamel.yaml.tokens import CommentToken

    if not lines:
        return
    holder, k, pos = _tail(node, key)
    slot = holder.ca.items.setdefault(k, [None, None, None, None])
    token = slot[pos]
    if token is None:
        slot[pos] = CommentToken("\n" + lines, CommentMark(0), None)
    else:
        token.value = token.value + lines


def _append(node: Any, key: Any, value: Any) -> None:
    """Add an entry at the end, moving the comment lines after the old last entry."""
    lines = _take_tail(node, _last_key(node)) if len(node) else ""
    if isinstance(node, list):
        node.append(value)
    else:
        node[key] = value
    if lines:
        _give_tail(node, key, lines)


def _delete(node: Any, key: Any) -> None:
    """Remove an entry; the comment lines after it follow the entry before it."""
    keys = list(node) if isinstance(node, Mapping) else list(range(len(node)))
    i = keys.index(key)
    lines = _take_tail(node, key)
    del node[key]  # (ruamel shifts the comments of the list items after it)
    if lines and i > 0:
        _give_tail(node, keys[i - 1], lines)
