"""Target tables: Apache Iceberg tables catalogued in the site's state store.

An apply writes its Parquet targets as Iceberg tables (SPEC §7, ``docs/apply.md``):

* :mod:`.catalog`: the site's Iceberg catalog (Iceberg's ``JdbcCatalog`` for Spark,
  PyIceberg's ``SqlCatalog`` for Python, one schema in the state store), table headers;
* :mod:`.tables`: creating tables and evolving their schemas (DDL);
* :mod:`.commit`: one pass's write to a table: staged on a branch, checked, published,
  tagged with the pass so that a retry recognises it;
* :mod:`.read`: the current state (or an earlier snapshot) of a table, from Spark or
  PyIceberg, and the snapshots each apply wrote;
* :mod:`.maintenance`: Iceberg's own compaction and snapshot expiry after applies;
* :mod:`.upgrade`: converting a target of the earlier private format into a table.
"""
