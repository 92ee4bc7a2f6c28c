"""What the front doors use of the layers below ``broker``, named in one place.

The management plane reaches the broker model only through ``leveret.broker`` (and the
domain types of ``leveret.model``), as ``tests/test_imports.py`` checks: a front door that
imported ``queues`` or ``persistence`` directly would depend on how the model is built,
not on what it offers. These are the few names it needs that live below: the exchange
types a declare may name, the policy checker, the queue and the read-only queue walks of
the console (peek, search; a stream's by offset or time), message tracing, and the group commit's histograms.
"""

from __future__ import annotations

from leveret.exchanges import EXCHANGE_TYPES as EXCHANGE_TYPES
from leveret.persistence.commit_stats import Histogram as Histogram
from leveret.queues import browse as browse
from leveret.queues import stream_browse as stream_browse
from leveret.queues.policy import PolicyError as PolicyError
from leveret.queues.policy import validate as validate_policy
from leveret.queues.queue import Queue as Queue
from leveret.queues.stream import Stream as Stream
from leveret.queues.tracing import DEFAULT_CAPACITY as TRACE_CAPACITY
from leveret.queues.tracing import Tracer as Tracer
from leveret.queues.tracing import expand as expand_trace

__all__ = ["EXCHANGE_TYPES", "TRACE_CAPACITY", "Histogram", "PolicyError", "Queue", "Stream",
           "Tracer", "browse", "expand_trace", "stream_browse", "validate_policy"]
