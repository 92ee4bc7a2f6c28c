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
SLICE = 1000


def escape(value: str) -> str:
    """A label value in the text format."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def label_text(labels: tuple[tuple[str, str], ...]) -> str:
    """``k="v",...``: per-object rows keep their labels so, as text (a str is not tracked
    by the garbage collector; 100,000 tuples of tuples kept through a scrape made it run
    full collections of the whole heap, each holding the loop for most of a second)."""
    return ",".join(f'{k}="{escape(v)}"' for k, v in labels)
