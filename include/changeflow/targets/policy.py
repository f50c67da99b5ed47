"""How an apply's Iceberg target tables are created and maintained (configuration).

.. code-block:: yaml

    applies:
      - name: apply_dbs2
        iceberg:
          format_version: 2            # 3: deletion vectors instead of position deletes
          maintenance:
            delete_ratio: 0.3          # rewrite the data files past 30% deleted rows ...
            spread: true               # ... a few buckets at a time, in turn ...
            files_per_bucket: 8        # ... and the small files past 8 files per bucket
            expire_after_hours: 168    # time travel reaches back a week
            retain_last: 20            # and at least 20 snapshots
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class MaintenancePolicy(BaseModel):
    """When an apply maintains the tables it wrote (see :mod:`.maintenance`).

    ``delete_ratio`` defaults to Iceberg's own ``delete-ratio-threshold`` (0.3): a Spark
    scan of a table with 30% of its rows deleted took 1.22x the scan after the rewrite
    (10%: 0.97x), while rewriting at 10% cost a tenth of a full rewrite per apply where
    each apply changes 1% of the rows (docs/apply.md, *Maintenance*).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    #: rewrite deleted rows a group of buckets at a time, each in its turn (:mod:`.spread`)
    spread: bool = True
    delete_ratio: float = Field(default=0.3, gt=0, le=1)
    files_per_bucket: int = Field(default=8, ge=1)
    expire_after_hours: float = Field(default=168.0, gt=0)
    retain_last: int = Field(default=20, ge=1)


class IcebergConfig(BaseModel):
    """An apply's Iceberg targets: the format version of new tables, and maintenance.

    Format version 2 (position delete files) is what every Iceberg reader reads; 3
    keeps one deletion vector per data file instead.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    format_version: Literal[2, 3] = 2
    maintenance: MaintenancePolicy = MaintenancePolicy()
