"""A node's lineage: which epoch wrote each batch it holds, as ``[(epoch, first_seq), ...]``.

Batch sequence numbers continue across leaders; the epoch tells whose batch ``seq`` is.
Two nodes share history up to ``seq`` when ``epoch_at`` agrees for it: a follower whose
last batch has the same epoch in the leader's lineage can be streamed to from the next
one; otherwise (a deposed leader's batch that was never shipped) it needs a snapshot. The
file lives in the data dir beside the store and is replaced atomically; it is written
before the first batch of a new epoch is applied, so it never lags the store.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

FILE = "cluster-lineage.json"
# The cluster a data dir belongs to: its batches mean nothing to another cluster.
CLUSTER_FILE = "cluster-name"


class ForeignCluster(Exception):
    """The data dir holds another cluster's data (one line for the user)."""


def claim(data_dir: Path, cluster: str) -> None:
    """Mark ``data_dir`` as ``cluster``'s, or raise ForeignCluster if it is another's."""
    path = data_dir / CLUSTER_FILE
    try:
        owner = path.read_text().strip()
    except FileNotFoundError:
        path.write_text(cluster + "\n")
        return
    if owner != cluster:
        raise ForeignCluster(f"data directory {data_dir} belongs to cluster {owner!r}, "
                             f"not {cluster!r} (use --cluster-name {owner} or another "
                             f"data directory)")

Lineage = list[tuple[int, int]]


def epoch_at(lineage: Lineage, seq: int) -> int:
    """The epoch that wrote batch ``seq`` (0: before any recorded epoch)."""
    found = 0
    for epoch, first in lineage:
        if first <= seq:
            found = epoch
    return found


def load(data_dir: Path) -> Lineage:
    try:
        raw = json.loads((data_dir / FILE).read_text())
    except FileNotFoundError:
        return []
    return [(int(e), int(s)) for e, s in raw]


def save(data_dir: Path, lineage: Lineage) -> None:
    path = data_dir / FILE
    temp = path.with_suffix(".tmp")
    with open(temp, "w") as fh:
        json.dump(lineage, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(temp, path)
