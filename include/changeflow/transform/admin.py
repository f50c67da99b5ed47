"""Defining rule-based transformations, as ``DBMS_STREAMS_ADM`` does.

Each call adds (``operation="ADD"``) or removes (``"REMOVE"``) one transformation of a
rule in a :class:`~changeflow.rules.RuleRegistry`; save the registry with
:func:`changeflow.rules.save_rules` to keep it in the rules file.

>>> from changeflow.rules import Rule, RuleRegistry
>>> reg = RuleRegistry()
>>> _ = reg.add_rule(Rule("EMP1", ":dml.get_object_name() = 'EMPLOYEES'"))
>>> rename_column(reg, "EMP1", "hr.employees", "first_name", "given_name")
>>> delete_column(reg, "EMP1", "hr.employees", "salary")
>>> [row["description"] for row in transformations(reg)]
['delete column HR.EMPLOYEES.SALARY', 'rename column HR.EMPLOYEES.FIRST_NAME to GIVEN_NAME']
"""

from __future__ import annotations

from typing import Any

from changeflow.rules import RuleRegistry
from changeflow.rules import transforms as model
from changeflow.rules.errors import RuleDefinitionError


def _declarations(reg: RuleRegistry, rule_name: str) -> tuple[Any, list[dict[str, Any]]]:
    rule = reg.rules.get(rule_name)
    if rule is None:
        raise RuleDefinitionError(f"rule {rule_name} is not defined")
    return rule, model.decode(rule.action_context.get(model.INTERNAL_KEY))


def change(reg: RuleRegistry, rule_name: str, decl: dict[str, Any],
           operation: str = "ADD") -> None:
    """Add or remove one declarative transformation of a rule (checked first).

    Raises:
        RuleDefinitionError: the rule does not exist, or REMOVE finds nothing to remove.
        TransformDefinitionError: the declaration is malformed.
    """
    rule, decls = _declarations(reg, rule_name)
    op = operation.upper()
    if op not in ("ADD", "REMOVE"):
        raise RuleDefinitionError(f"operation must be ADD or REMOVE, not {operation!r}")
    step = model.parse_one(rule_name, len(decls) + 1, decl)
    if op == "ADD":
        decls.append(decl)
    else:
        same = [d for d in decls if model.parse_one(rule_name, 0, d).describe()
                == step.describe()]
        if not same:
            raise RuleDefinitionError(f"rule {rule_name} has no transformation "
                                      f"'{step.describe()}' to remove")
        decls.remove(same[0])
    if decls:
        rule.action_context[model.INTERNAL_KEY] = model.encode(decls)
    else:
        rule.action_context.pop(model.INTERNAL_KEY, None)


def rename_table(reg: RuleRegistry, rule_name: str, from_table_name: str, to_table_name: str,
                 step_number: int = 0, operation: str = "ADD") -> None:
    """``DBMS_STREAMS_ADM.RENAME_TABLE``."""
    change(reg, rule_name, {"type": "rename_table", "from": from_table_name,
                            "to": to_table_name, "step": step_number}, operation)


def rename_schema(reg: RuleRegistry, rule_name: str, from_schema_name: str,
                  to_schema_name: str, step_number: int = 0, operation: str = "ADD") -> None:
    """``DBMS_STREAMS_ADM.RENAME_SCHEMA``."""
    change(reg, rule_name, {"type": "rename_schema", "from": from_schema_name,
                            "to": to_schema_name, "step": step_number}, operation)


def rename_column(reg: RuleRegistry, rule_name: str, table_name: str, from_column_name: str,
                  to_column_name: str, value_type: str = "*", step_number: int = 0,
                  operation: str = "ADD") -> None:
    """``DBMS_STREAMS_ADM.RENAME_COLUMN``."""
    change(reg, rule_name, {"type": "rename_column", "table": table_name,
                            "from": from_column_name, "to": to_column_name,
                            "value_type": value_type, "step": step_number}, operation)


def add_column(reg: RuleRegistry, rule_name: str, table_name: str, column_name: str,
               column_value: Any = None, *, expression: str | None = None,
               logical_type: str | None = None, value_type: str = "NEW",
               step_number: int = 0, operation: str = "ADD") -> None:
    """``DBMS_STREAMS_ADM.ADD_COLUMN``: a literal ``column_value`` or a Spark SQL
    ``expression`` over the LCR (e.g. ``new_values['SALARY'].dec * 12``)."""
    decl: dict[str, Any] = {"type": "add_column", "table": table_name, "column": column_name,
                            "value_type": value_type, "step": step_number}
    if expression is not None:
        decl["expression"] = expression
    else:
        decl["value"] = column_value
    if logical_type is not None:
        decl["logical_type"] = logical_type
    change(reg, rule_name, decl, operation)


def delete_column(reg: RuleRegistry, rule_name: str, table_name: str, column_name: str,
                  value_type: str = "*", step_number: int = 0, operation: str = "ADD") -> None:
    """``DBMS_STREAMS_ADM.DELETE_COLUMN``."""
    change(reg, rule_name, {"type": "delete_column", "table": table_name,
                            "column": column_name, "value_type": value_type,
                            "step": step_number}, operation)


def set_rule_transform_function(reg: RuleRegistry, rule_name: str,
                                transform_function: str | None) -> None:
    """``DBMS_STREAMS_ADM.SET_RULE_TRANSFORM_FUNCTION`` (None removes it)."""
    rule, _ = _declarations(reg, rule_name)
    if transform_function is None:
        rule.action_context.pop(model.FUNCTION_KEY, None)
        return
    module, _, attr = transform_function.partition(":")
    if not module or not attr:
        raise RuleDefinitionError(f"transform function {transform_function!r} must be "
                                  "written package.module:function")
    rule.action_context[model.FUNCTION_KEY] = transform_function


def transformations(reg: RuleRegistry) -> list[dict[str, Any]]:
    """Every transformation, like ``DBA_STREAMS_TRANSFORMATIONS``, in execution order."""
    out = []
    for rule in reg.rules.values():
        steps, fn = model.of_rule(rule)
        for i, s in enumerate(steps, 1):
            out.append({"rule": rule.name, "order": i, "type": s.kind, "step": s.step,
                        "description": s.describe()})
        if fn:
            out.append({"rule": rule.name, "order": len(steps) + 1, "type": "function",
                        "step": None, "description": f"custom function {fn}"})
    return out
