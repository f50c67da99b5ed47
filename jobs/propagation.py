"""spark-submit entry point: run one propagation once (see changeflow.runner)."""

from __future__ import annotations

import sys

from changeflow.runner import main

if __name__ == "__main__":
    sys.exit(main("propagation"))
