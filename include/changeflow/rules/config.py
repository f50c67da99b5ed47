"""Declarative rules: a YAML file of rules, rule sets and clients.

The file is validated when it is loaded; every error names the file and the key
path. The admin API writes the same declarations back (:func:`save_rules`), as an
edit of the file that keeps its comments and layout.

.. code-block:: yaml

    rules:
      LOCATIONS1:
        condition: "(((:dml.get_object_owner() = 'HR' and ...)) ... )"
        rule_type: TABLE
      REGIONS2:
        condition: ":dml.get_object_owner()='HR' AND ..."
        action_context: {STREAMS$_ROW_SUBSET: INSERT}
    rule_sets:
      RULESET$_1: {rules: [LOCATIONS1, REGIONS2]}
    clients:
      apply:
        type: apply            # capture | sync_capture | propagation | apply | dequeue
        queue: strmadmin.streams_queue
        positive_rule_set: RULESET$_1

>>> reg = registry_from_dict({"rules": {"R1": {"condition": ":dml.is_null_tag() = 'Y'"}},
...     "rule_sets": {"S": {"rules": ["R1"]}},
...     "clients": {"a": {"type": "apply", "positive_rule_set": "S"}}})
>>> reg.client("a").evaluate({"kind": "ROW", "tag": None})[0]
True
>>> registry_from_dict({"clients": {"a": {"type": "apply", "positive_rule_set": "X"}}},
...     file="rules.yaml")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
changeflow.errors.ConfigError: rules.yaml:clients.a.positive_rule_set: rule set X is referenced...
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from changeflow.rules.errors import ConfigError, RuleDefinitionError, RuleError
from changeflow.rules.registry import RuleRegistry
from changeflow.rules.ruleset import Rule


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class RuleDecl(_Model):
    """One rule."""

    condition: str
    action_context: dict[str, str] = {}
    message_type: str | None = None
    rule_type: str | None = None
    # Declarative rule-based transformations (changeflow.transform), kept in the action
    # context under STREAMS$_INTERNAL_TRANS as Oracle keeps them.
    transformations: list[dict[str, Any]] = []


class RuleSetDecl(_Model):
    """One rule set: the names of its rules, in order."""

    rules: list[str] = []


class ClientDecl(_Model):
    """One client and the names of its rule sets."""

    type: str
    queue: str | None = None
    destination_queue: str | None = None
    positive_rule_set: str | None = None
    negative_rule_set: str | None = None


class RulesFile(_Model):
    """The whole rules file."""

    rules: dict[str, RuleDecl] = {}
    rule_sets: dict[str, RuleSetDecl] = {}
    clients: dict[str, ClientDecl] = {}
    sequence: int = 0


def load_rules(path: str | os.PathLike[str]) -> RuleRegistry:
    """Load and validate a rules file; a missing file is an empty registry.

    Raises:
        ConfigError: naming the file and the key of the first problem.
    """
    import yaml

    file = str(path)
    if not Path(file).exists():
        return RuleRegistry()
    try:
        data = yaml.safe_load(Path(file).read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", file=file) from None
    return registry_from_dict(data or {}, file=file)


def registry_from_dict(data: Any, *, file: str | None = None) -> RuleRegistry:
    """Build a registry from parsed declarations (see the module docstring)."""
    if not isinstance(data, dict):
        raise ConfigError("the rules file must be a mapping", file=file)
    try:
        decl = RulesFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise ConfigError(first["msg"], file=file, key=key) from None
    reg = RuleRegistry(sequence=decl.sequence)
    for name, r in decl.rules.items():
        context = dict(r.action_context)
        if r.transformations:
            from changeflow.rules import transforms as transform_model

            try:
                transform_model.parse(name, r.transformations)
            except transform_model.TransformDefinitionError as exc:
                raise ConfigError(str(exc), file=file, key=f"rules.{name}.transformations") \
                    from None
            context[transform_model.INTERNAL_KEY] = transform_model.encode(r.transformations)
        try:
            reg.add_rule(Rule(name, r.condition, context, r.message_type,
                              r.rule_type))  # fmt: skip
        except (RuleError, RuleDefinitionError) as exc:
            raise ConfigError(str(exc), file=file, key=f"rules.{name}.condition") from None
    for name, rs in decl.rule_sets.items():
        reg.create_rule_set(name)
        for i, rule_name in enumerate(rs.rules):
            if rule_name not in reg.rules:
                raise ConfigError(
                    f"rule {rule_name} is referenced but not defined",
                    file=file,
                    key=f"rule_sets.{name}.rules[{i}]",
                )
            reg.add_to_rule_set(name, rule_name)
    for name, c in decl.clients.items():
        _add_client(reg, name, c, file)
    return reg


def _add_client(reg: RuleRegistry, name: str, c: ClientDecl, file: str | None) -> None:
    try:
        reg.ensure_client(name, c.type, queue=c.queue, destination_queue=c.destination_queue)
    except RuleDefinitionError as exc:
        raise ConfigError(str(exc), file=file, key=f"clients.{name}.type") from None
    for attr, positive in (("positive_rule_set", True), ("negative_rule_set", False)):
        set_name = getattr(c, attr)
        if set_name is None:
            continue
        try:
            reg.attach(name, set_name, positive=positive)
        except RuleDefinitionError as exc:
            raise ConfigError(str(exc), file=file, key=f"clients.{name}.{attr}") from None


def registry_to_dict(reg: RuleRegistry) -> dict[str, Any]:
    """The declarations of a registry, as :func:`registry_from_dict` reads them."""
    from changeflow.rules import transforms as transform_model

    def context(r: Rule) -> dict[str, str]:
        return {k: v for k, v in r.action_context.items() if k != transform_model.INTERNAL_KEY}

    decl = RulesFile(
        rules={
            r.name: RuleDecl(condition=r.condition, action_context=context(r),
                             message_type=r.message_type, rule_type=r.rule_type,
                             transformations=transform_model.decode(
                                 r.action_context.get(transform_model.INTERNAL_KEY)))
            for r in reg.rules.values()
        },
        rule_sets={
            n: RuleSetDecl(rules=[r.name for r in rs.rules]) for n, rs in reg.rule_sets.items()
        },
        clients={
            c.name: ClientDecl(type=c.type, queue=c.queue, destination_queue=c.destination_queue,
                               positive_rule_set=c.positive_rule_set,
                               negative_rule_set=c.negative_rule_set)  # fmt: skip
            for c in reg.clients.values()
        },
        sequence=reg.sequence,
    )
    return decl.model_dump(exclude_defaults=True)


def rules_text(reg: RuleRegistry, path: str | os.PathLike[str]) -> tuple[str, str]:
    """The rules file's current text and its text holding ``reg``'s declarations.

    The new text is an edit of the current one (:func:`changeflow.rules.yamledit.edit`):
    comments, key order, quoting and indentation stay as the person wrote them.
    """
    from changeflow.rules.yamledit import edit

    target = Path(path)
    old = target.read_text(encoding="utf-8") if target.exists() else ""
    return old, edit(old, registry_to_dict(reg))


def save_rules(reg: RuleRegistry, path: str | os.PathLike[str]) -> bool:
    """Write a registry's declarations to a YAML file, keeping its comments and layout.

    The file is replaced atomically (write, then rename), and only when its content
    changes. Returns whether it was written.
    """
    old, text = rules_text(reg, path)
    if old == text:
        return False
    write_atomically(path, text)
    return True


def write_atomically(path: str | os.PathLike[str], text: str) -> None:
    """Replace a file's content: readers see the old file or the new one, never a part."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o7777)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
