"""spark-submit entry point: run one propagation window (see changeflow.schedules.job)."""

from __future__ import annotations

import sys

from changeflow.schedules.job import main

if __name__ == "__main__":
    sys.exit(main())
