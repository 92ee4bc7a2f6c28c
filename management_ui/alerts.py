"""Per-queue alert hints for the queue list: what deserves a look, and why.

Each item of ``/api/queues`` (and ``/api/queues/{vhost}/{name}``) gains
``"alerts"``: a list of ``{"alert", "reason"}``, empty when all is well:

* ``dead_letter_queue_growing``: the queue receives dead letters (another
  queue of the vhost dead-letters into it: its ``x-dead-letter-exchange`` is
  bound to this queue, or is the default exchange with this queue's name as
  ``x-dead-letter-routing-key``) and its ready count grew between the last
  two samples (``sampler.py``, every 5 s).
* ``no_acks``: the queue has consumers and unacked messages but no ack has
  been counted for ``no_ack_seconds`` (query parameter, default
  ``NO_ACK_SECONDS``): consumers stuck or holding messages forever.
* ``low_consumer_utilisation``: ready messages wait although consumers are
  attached, some of them out of credit (prefetch full): the consumers are the
  bottleneck. ``consumer_utilisation`` is RabbitMQ's field: the recent share
  of time the queue could deliver at once (``queues/consumer_ring.py``).

``AckWatch`` remembers, per queue, the ack count and since when it has not
moved; it is updated by every sampling round and by every listing, and forgets
deleted queues at each round, so its memory follows the number of queues.
"""

from __future__ import annotations

from typing import Any

# Seconds with consumers, unacked messages and no ack before ``no_acks`` is raised.
NO_ACK_SECONDS = 60.0
# Below this consumer utilisation (with messages ready), ``low_consumer_utilisation``.
LOW_UTILISATION = 0.5

Key = tuple[str, str]


class AckWatch:
    def __init__(self) -> None:
        self.last: dict[Key, tuple[int, float]] = {}  # (vhost, queue) -> (acked, since)

    def stalled_for(self, queue: Any, now: float) -> float:
        """Seconds the queue has held unacked messages without an ack (0 if not stalled)."""
        key = (queue.vhost.name, queue.name)
        acked = queue.acked
        seen = self.last.get(key)
        if seen is None or seen[0] != acked or not queue.unacked or not queue.consumer_count:
            self.last[key] = (acked, now)
            return 0.0
        return now - seen[1]

    def keep_only(self, keys: set[Key]) -> None:
        for key in [k for k in self.last if k not in keys]:
            del self.last[key]


def dead_letter_targets(vhost: Any) -> set[str]:
    """Names of the vhost's queues that some queue dead-letters into (direct bindings)."""
    targets: set[str] = set()
    exchanges: set[str] = set()
    for queue in vhost.queues.values():
        dlx = queue.settings.dead_letter_exchange
        if dlx is None:
            continue
        if dlx == "":
            if queue.settings.dead_letter_routing_key:
                targets.add(queue.settings.dead_letter_routing_key)
        else:
            exchanges.add(dlx)
    for name in exchanges:
        exchange = vhost.exchanges.get(name)
        if exchange is None:
            continue
        for dest, _rk, _args in exchange.matcher.bindings():
            dest_name = getattr(dest, "name", None)
            if isinstance(dest_name, str) and vhost.queues.get(dest_name) is dest:
                targets.add(dest_name)
    return targets


def hints(queue: Any, ready_rate: float, is_dead_letter_target: bool, stalled: float,
          no_ack_seconds: float, utilisation: float) -> list[dict[str, str]]:
    out = []
    if is_dead_letter_target and ready_rate > 0:
        out.append({"alert": "dead_letter_queue_growing",
                    "reason": f"dead-lettered messages arriving ({ready_rate:g}/s)"})
    if stalled >= no_ack_seconds:
        out.append({"alert": "no_acks",
                    "reason": f"{queue.consumer_count} consumer(s), {queue.unacked} unacked, "
                              f"no ack for {stalled:.0f} s"})
    if queue.message_count and queue.consumers and utilisation < LOW_UTILISATION:
        out.append({"alert": "low_consumer_utilisation",
                    "reason": f"{queue.message_count} ready, consumer utilisation "
                              f"{utilisation:g}: consumers' prefetch is full"})
    return out


class Annotator:
    """Adds ``consumer_utilisation`` and ``alerts`` to formatted queues of one request."""

    def __init__(self, watch: AckWatch, no_ack_seconds: float, now: float) -> None:
        self.watch = watch
        self.no_ack_seconds = no_ack_seconds
        self.now = now
        self.targets: dict[str, set[str]] = {}  # per vhost, computed once per request

    def __call__(self, queue: Any, out: dict[str, Any]) -> dict[str, Any]:
        vhost = queue.vhost
        targets = self.targets.get(vhost.name)
        if targets is None:
            targets = self.targets[vhost.name] = dead_letter_targets(vhost)
        utilisation = queue.consumer_utilisation
        out["consumer_utilisation"] = utilisation
        ready_rate = out.get("messages_ready_details", {}).get("rate", 0.0)
        out["alerts"] = hints(queue, ready_rate, queue.name in targets,
                              self.watch.stalled_for(queue, self.now), self.no_ack_seconds,
                              utilisation)
        return out
