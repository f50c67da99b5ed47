"""How an apply's Iceberg target tables are created and maintained (configuration).

.. code-block:: yaml

    applies:
      - name: apply_dbs2
        iceberg:
          format_version: 2            # 3: deletion vectors instead of position deletes
          maintenance:
            delete_ratio: 0.1          # rewrite the data files past 10% deleted rows ...
            files_per_bucket: 8        # ... and the small files past 8 files per bucket
            expire_after_hours: 168    # time travel reaches back a week
            retain_last: 20            # and at least 20 snapshots
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class MaintenancePolicy(BaseModel):
    """When an apply maintains the tables it wrote (see :mod:`.maintenance`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    delete_ratio: float = Field(default=0.1, gt=0, le=1)
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
