"""Rule-based transformations (seed 000 action contexts; SPEC §5).

* the declarations (rename table/schema/column, add/delete column, a user function) and
  their order are :mod:`changeflow.rules.transforms`: the rules file's loader parses them;
* :mod:`.declarative`: the declarative kinds as Spark expressions;
* :mod:`.function`: user Python functions (per message, or DataFrame -> DataFrame);
* :mod:`.client`: the hook every stage runs after its rule sets;
* :mod:`.admin`: ``DBMS_STREAMS_ADM``-style definition calls.

See ``docs/transformations.md``.
"""
