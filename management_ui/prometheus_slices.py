"""How a scrape shares the broker's loop: rendering in slices.

A scrape's text grows with the queues, connections and channels (100,000 queues: about
100 MB). Written in one go it would hold the loop, and every AMQP connection with it,
for seconds. So each part of a scrape is a generator (``Render``) that writes some
samples to its ``Writer`` and yields; ``metrics_app.py`` sends what was written and lets
the loop run at each yield. ``SLICE`` is how much work comes between two yields.
"""

from __future__ import annotations

from collections.abc import Iterator

# A scrape's rendering: writes to its Writer, yields wherever the loop may run.
Render = Iterator[None]
# Samples written (or queues walked) between two yields: a few milliseconds of work.
SLICE = 2000
