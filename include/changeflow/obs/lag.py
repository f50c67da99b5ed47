"""End-to-end lag: source commit time to applied time, as mergeable histograms.

An apply run's transactions each have a lag (the time they were applied minus their
source commit time, which every LCR carries). A run stores, per source database, a
histogram of those lags in logarithmic bins 2 % wide (:func:`bin_of`), so the p50
and p95 over the last hour are read by summing the histograms of the runs in that
hour (:func:`quantile`), however many transactions there were, within 2 %.

>>> bins = histogram([0.5, 1.0, 1.0, 2.0, 10.0])
>>> round(quantile(bins, 0.5), 1), round(quantile(bins, 0.95), 1)
(1.0, 10.1)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

GROWTH = 1.02
_LOG = math.log(GROWTH)
FLOOR = 0.001  # lags under a millisecond share the first bin


def bin_of(seconds: float) -> int:
    """The bin of a lag: bin ``i`` holds lags in ``(GROWTH**(i-1), GROWTH**i] * FLOOR``."""
    return max(0, math.ceil(math.log(max(seconds, FLOOR) / FLOOR) / _LOG - 1e-9))


def middle(index: int) -> float:
    """The (geometric) middle of a bin, in seconds: within 1 % of every lag in it."""
    return float(FLOOR * GROWTH ** (index - 0.5)) if index else FLOOR


def histogram(lags: Iterable[float]) -> dict[int, int]:
    """The bins of some lags (seconds)."""
    return dict(Counter(bin_of(x) for x in lags))


def merge(histograms: Iterable[dict[int, int]]) -> dict[int, int]:
    """The sum of several histograms."""
    out: Counter[int] = Counter()
    for h in histograms:
        out.update({int(k): int(v) for k, v in h.items()})
    return dict(out)


def quantile(bins: dict[int, int], q: float) -> float | None:
    """The ``q`` quantile (0..1) of a histogram, as its bin's middle (None if empty)."""
    total = sum(bins.values())
    if not total:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for index in sorted(bins):
        seen += bins[index]
        if seen >= rank:
            return middle(index)
    return middle(max(bins))
