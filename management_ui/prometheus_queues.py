"""The ``rabbitmq_queue_*`` series: one table in RabbitMQ 3.10.8's order, served per queue
(``/metrics/per-object``; the detailed ``queue_coarse_metrics``, ``queue_consumer_count``
and ``queue_metrics`` families) and summed over the node (``/metrics``).

Each series is a field of the management API's queue record (``inventory.queue_record``),
found here without the record's other work: the counts are attributes of the queue, the
byte totals are counted when scraped (``broker/queue_bytes.py``), an empty queue's in no
call. ``messages_paged_out`` is Leveret's, as in the API: every ready message held only by
the store, so that ``ram`` plus ``paged_out`` is the whole queue (``queue_bytes.py`` says
how RabbitMQ's differs).

Aggregated, RabbitMQ 3.10.8 serves ``queue_consumer_capacity`` (and
``queue_head_message_timestamp``, ``queue_messages_persistent_bytes``) as a family without
a sample; ``queue_consumer_utilisation`` is the sum over queues. Leveret serves the
capacity likewise, and a sum for the persistent bytes.

Not served, with nothing behind them in Leveret (checked against RabbitMQ 3.10.8's
/metrics/per-object with queues declared): ``queue_process_reductions_total`` and
``queue_process_memory_bytes`` (Erlang process figures), ``queue_head_message_timestamp``
(a queue does not read its head's ``timestamp`` property), ``queue_disk_reads_total``,
``queue_disk_writes_total`` and ``queue_index_{read,write}_ops_total`` (not counted: work per
message). ``queue_messages_published_total`` is per channel, queue and exchange:
``prometheus_channels.py`` serves it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.broker import inventory
from leveret.broker.queue_bytes import HeldBytes, byte_fields
from leveret.management_ui.prometheus_slices import SLICE, Render, escape

if TYPE_CHECKING:  # prometheus imports this module
    from leveret.management_ui.prometheus import Writer
    from leveret.management_ui.service import State

# (family without prefix, RabbitMQ's help text, the queue record's field)
Series = tuple[str, str, str]
# A queue's labels (as text: ``prometheus_slices.label_text``) and its values in the order
# of the series asked for.
Row = tuple[str, tuple[float, ...]]

COARSE: tuple[Series, ...] = (
    ("queue_messages_ready", "Messages ready to be delivered to consumers", "messages_ready"),
    ("queue_messages_unacked", "Messages delivered to consumers but not yet acknowledged",
     "messages_unacknowledged"),
    ("queue_messages", "Sum of ready and unacknowledged messages - total queue depth",
     "messages"),
)
CONSUMERS: Series = ("queue_consumers", "Consumers on a queue", "consumers")
METRICS: tuple[Series, ...] = (
    CONSUMERS,
    ("queue_consumer_capacity", "Consumer capacity", "consumer_capacity"),
    ("queue_consumer_utilisation", "Same as consumer capacity", "consumer_utilisation"),
    ("queue_messages_ram", "Ready and unacknowledged messages stored in memory",
     "messages_ram"),
    ("queue_messages_ram_bytes", "Size of ready and unacknowledged messages stored in memory",
     "message_bytes_ram"),
    ("queue_messages_ready_ram", "Ready messages stored in memory", "messages_ready_ram"),
    ("queue_messages_unacked_ram", "Unacknowledged messages stored in memory",
     "messages_unacknowledged_ram"),
    ("queue_messages_persistent", "Persistent messages", "messages_persistent"),
    ("queue_messages_persistent_bytes", "Size in bytes of persistent messages",
     "message_bytes_persistent"),
    ("queue_messages_bytes", "Size in bytes of ready and unacknowledged messages",
     "message_bytes"),
    ("queue_messages_ready_bytes", "Size in bytes of ready messages", "message_bytes_ready"),
    ("queue_messages_unacked_bytes", "Size in bytes of all unacknowledged messages",
     "message_bytes_unacknowledged"),
    ("queue_messages_paged_out", "Messages paged out to disk", "messages_paged_out"),
    ("queue_messages_paged_out_bytes", "Size in bytes of messages paged out to disk",
     "message_bytes_paged_out"),
)
SERIES = COARSE + METRICS
UNSUMMED = frozenset({"consumer_capacity"})  # aggregated: the family, no sample (RabbitMQ's)


def values(queue: Any, held: HeldBytes | None) -> dict[str, float]:
    """Every SERIES field of one queue; ``held`` None: the counts only, no byte totals."""
    ready, unacked, paged_out = queue.message_count, queue.unacked, queue.paged_out
    utilisation = queue.consumer_utilisation
    out: dict[str, float] = {
        "messages_ready": ready, "messages_unacknowledged": unacked,
        "messages": ready + unacked, "consumers": queue.consumer_count,
        "consumer_capacity": utilisation, "consumer_utilisation": utilisation,
        "messages_ram": ready + unacked - paged_out, "messages_ready_ram": ready - paged_out,
        "messages_unacknowledged_ram": unacked, "messages_paged_out": paged_out,
    }
    if held is not None:
        out.update(byte_fields(queue, held))  # message_bytes*, messages_persistent
    return out


def rows(found: list[Row], state: State, series: tuple[Series, ...],
         vhosts: set[str] | None = None, sized: bool = True) -> Render:
    """Append (labels, values in ``series``' order) per queue to ``found``, in ``vhosts`` if
    given, yielding every ``SLICE`` queues; without the byte totals and
    ``messages_persistent`` unless ``sized``. A tuple, not the dict ``values`` returns:
    a scrape holds one per queue until it is written, with its labels as text."""
    held = inventory.held_bytes(state.broker) if sized else None
    queues = [q for vh in list(state.broker.vhosts.values())
              if vhosts is None or vh.name in vhosts for q in list(vh.queues.values())]
    fields = [field for _, _, field in series]
    for start in range(0, len(queues), SLICE):
        for queue in queues[start:start + SLICE]:
            v = values(queue, held)
            found.append((f'vhost="{escape(queue.vhost.name)}",queue="{escape(queue.name)}"',
                          tuple([v[field] for field in fields])))
        yield


def write_per_object(w: Writer, series: tuple[Series, ...], found: list[Row]) -> Render:
    """One family per series, one sample per queue (``found`` from ``rows`` with ``series``)."""
    for i, (name, help_, _) in enumerate(series):
        yield from w.family_steps(name, "gauge", help_, ((labels, v[i]) for labels, v in found))


def write_aggregated(w: Writer, state: State) -> Render:
    """One sample per series, the sum over every queue (none for UNSUMMED): one walk, the
    byte totals counted only for queues with messages, yielding every ``SLICE`` queues."""
    held = inventory.held_bytes(state.broker)
    left = SLICE
    ready = unacked = consumers = paged_out = 0
    utilisation = 0.0
    sizes: dict[str, int] = {}
    for vhost in list(state.broker.vhosts.values()):
        for queue in list(vhost.queues.values()):
            r, u = queue.message_count, queue.unacked
            ready += r
            unacked += u
            consumers += queue.consumer_count
            utilisation += queue.consumer_utilisation
            if r or u:
                paged_out += queue.paged_out
                for field, size in byte_fields(queue, held).items():
                    sizes[field] = sizes.get(field, 0) + size
            left -= 1
            if not left:
                left = SLICE
                yield
    totals: dict[str, float] = {
        "messages_ready": ready, "messages_unacknowledged": unacked,
        "messages": ready + unacked, "consumers": consumers,
        "consumer_utilisation": utilisation,
        "messages_ram": ready + unacked - paged_out, "messages_ready_ram": ready - paged_out,
        "messages_unacknowledged_ram": unacked, "messages_paged_out": paged_out,
    }
    for name, help_, field in SERIES:
        w.family(name, "gauge", help_,
                 [] if field in UNSUMMED else [((), totals.get(field, sizes.get(field, 0)))])
