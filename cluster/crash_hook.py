"""A test hook: the leader dies after committing a batch locally and before shipping it.

Guarantee tested with it: such a leader holds a batch no other node has (its client got
no confirm); restarted, it must rejoin by a snapshot that discards it. A ``kill -9`` from
outside cannot land in that window reliably, so the test asks the leader to die there.

Set ``LEVERET_CLUSTER_CRASH_BEFORE_SHIPPING`` to a directory; a leader whose node name
is a file in it kills itself (``SIGKILL``, as a crash) after its next local commit. Read
once, when a node becomes leader (``node.py``): unset, the plain ``ReplicatedStore`` is
used and nothing here runs.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from leveret.cluster.replicated_store import ReplicatedStore
from leveret.persistence.batch import Batch

ENV = "LEVERET_CLUSTER_CRASH_BEFORE_SHIPPING"


def trigger_dir() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value) if value else None


class CrashBeforeShipping(ReplicatedStore):
    """``ReplicatedStore`` that dies between the local commit and shipping when asked."""

    trigger: Path

    def write_batch(self, batch: Batch) -> None:
        if batch.live and self.trigger.exists():
            self.inner.write_batch(batch)  # committed and synced here, on no follower
            os.kill(os.getpid(), signal.SIGKILL)
        else:
            super().write_batch(batch)
