"""Fixed-bucket histograms of the group commit: batch sizes and write+fsync times.

One ``observe`` per batch (never per message): a bisect over a dozen bounds
and three integer/float additions. Prometheus reads them as histograms
(``leveret_group_commit_*``): cumulative bucket counts, ``_sum`` and
``_count``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

# Operations per batch: one when idle, thousands under load (MAX_PENDING caps it).
BATCH_BOUNDS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 50000)
# Seconds to write and fsync one batch: ~0.1 ms on tmpfs, ~1-10 ms on an SSD.
WRITE_BOUNDS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                2.5)


class Histogram:
    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf's own
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value

    def cumulative(self) -> Iterator[tuple[str, int]]:
        """(le, observations <= le) per bucket, ending with ("+Inf", count)."""
        total = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            total += n
            yield repr(bound) if isinstance(bound, float) else str(bound), total
        yield "+Inf", self.count
