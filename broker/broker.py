"""The broker: virtual hosts, users and live connections, built from a Config.

Storage is injected: a ``Store`` (in memory by default, LMDB when the server
runs with a data dir) wrapped in the group commit every durable write goes
through. ``recover()`` rebuilds durable exchanges, queues and bindings from
the store at startup; queue contents stay on disk until consumed.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from leveret.broker import delayed
from leveret.broker.accounts import Accounts
from leveret.broker.cluster_view import ClusterView
from leveret.broker.sessions import Blockable, ClientSession
from leveret.broker.vhost import VirtualHost
from leveret.exchanges import EXCHANGE_TYPES, Exchange
from leveret.model.stats import Churn, MessageStats
from leveret.persistence.commit_stats import Histogram
from leveret.persistence.group_commit import GroupCommit
from leveret.persistence.memory import MemoryStore
from leveret.persistence.store import Store
from leveret.queues.flavours import new_queue
from leveret.queues.paging import UNBOUNDED, Paging
from leveret.queues.policy import Policy
from leveret.queues.stream import restore_tracked_offsets

if TYPE_CHECKING:
    from leveret.config import Config

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, config: Config, store: Store | None = None,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.config = config
        self.store: Store = store if store is not None else MemoryStore()
        self.log = GroupCommit(self.store, loop)
        # The paging bound and memory pressure durable queues page by (paging.py).
        self.paging = Paging(config.queue_messages_in_memory)
        # How late delayed messages were released, every vhost's (broker/delayed.py).
        self.delayed_lateness = Histogram(delayed.LATENESS_BOUNDS)
        self.cluster_name = f"leveret@{socket.gethostname()}"
        self.cluster: ClusterView | None = None  # set when the node leads a cluster
        self.vhosts: dict[str, VirtualHost] = {}
        self.new_vhost(config.default_vhost)
        self.accounts = Accounts(self)  # users, permissions, limits (broker/accounts.py)
        self.users = self.accounts.users
        self.connections: set[ClientSession] = set()
        self.protocols: set[Blockable] = set()  # transports' adapters, for alarms
        self.alarms: set[str] = set()
        # What the front doors listen on: (protocol, ip, port), RabbitMQ's protocol names
        # ("amqp", "http", "http/prometheus"); for /api/overview and the health checks.
        self.listeners: list[tuple[str, str, int]] = []
        self.data_dir_lock: Any = None  # held open while the broker owns its data dir
        self.churn = Churn()  # connections and channels; queues count per vhost
        self.started_at = time.time()

    def message_stats(self, vhost: str | Collection[str] | None = None) -> MessageStats:
        """Channel message counters summed: closed channels' plus live ones' (in one vhost,
        in a collection of vhost names, or in all)."""
        names = {vhost} if isinstance(vhost, str) else vhost
        total = MessageStats()
        for vh in self.vhosts.values():
            if names is None or vh.name in names:
                total.add(vh.closed_channel_stats)
        for conn in self.connections:
            if names is None or (conn.vhost is not None and conn.vhost.name in names):
                for channel in conn.channels.values():
                    total.add(channel.stats)
        return total

    def churn_totals(self) -> Churn:
        total = Churn()
        total.add(self.churn)
        for vh in self.vhosts.values():
            total.add(vh.churn)
        return total

    def new_vhost(self, name: str) -> VirtualHost:
        vhost = self.vhosts[name] = VirtualHost(name, self.log, self.paging)
        vhost.delays.release_rate = self.config.delayed_release_rate
        vhost.delays.lateness = self.delayed_lateness
        return vhost

    def recover(self) -> None:
        """Rebuild durable definitions from the store (their messages stay on disk)."""
        defs = self.store.load_definitions()
        self.accounts.recover(defs.access)  # first: it decides which vhosts exist
        for p in defs.policies:  # first: queues and exchanges get theirs as they are added
            vhost = self.vhosts.get(p.vhost)
            if vhost is not None:
                vhost.policies.put(Policy(p.vhost, p.name, p.pattern, p.apply_to,
                                          dict(p.definition), p.priority))
        for ex in defs.exchanges:
            vhost = self.vhosts.get(ex.vhost)
            if vhost is None or ex.name in vhost.exchanges or ex.type not in EXCHANGE_TYPES:
                if vhost is not None and ex.type not in EXCHANGE_TYPES:
                    log.warning("skipping stored exchange %r of unknown type %r", ex.name, ex.type)
                continue
            exchange = vhost.exchanges[ex.name] = Exchange(ex.name, ex.type, ex.durable,
                                                           ex.auto_delete, ex.internal,
                                                           ex.arguments, vhost=ex.vhost)
            vhost.recover_dedupe(exchange, self.store)
        messages = 0
        for q in defs.queues:
            vhost = self.vhosts.get(q.vhost)
            if vhost is None:
                continue
            if delayed.is_store(q):  # a delayed exchange's schedule, not a queue
                vhost.delays.recovered(q)
                continue
            queue = new_queue(vhost, q.name, durable=True, auto_delete=q.auto_delete,
                              arguments=dict(q.arguments))
            vhost.add_queue(queue, q.qid)
            stats = self.store.queue_stats(q.qid)
            queue.recover(stats.count, stats.first_seq, stats.next_seq, stats.bytes)
            if queue.dedupe is not None and stats.count:  # its keys are its messages'
                queue.dedupe.recover(self.store.read_queue, q.qid)
            messages += stats.count
        restore_tracked_offsets(self.vhosts, defs.access)
        for b in defs.bindings:
            vhost = self.vhosts.get(b.vhost)
            if vhost is None:
                continue
            source = vhost.exchanges.get(b.source)
            dest: Any = (vhost.queues.get(b.destination) if b.destination_type == "queue"
                         else vhost.exchanges.get(b.destination))
            if source is None or dest is None:
                continue
            source.matcher.bind(dest, b.routing_key, dict(b.arguments))
        for vhost in self.vhosts.values():
            if vhost.policies:
                vhost.apply_policies()  # recovered exchanges were added directly
        log.info("recovered %d exchange(s), %d queue(s) holding %d message(s), %d binding(s)",
                 len(defs.exchanges), len(defs.queues), messages, len(defs.bindings))

    def set_memory_pressure(self, pressed: bool) -> None:
        """Memory use crossed the paging threshold (RabbitMQ's
        ``vm_memory_high_watermark_paging_ratio``): every queue pages by the new state."""
        if pressed == self.paging.pressed:
            return
        self.paging.pressed = pressed
        if pressed:
            log.warning("memory use above the paging threshold; queues page messages to disk")
        else:
            log.info("memory use below the paging threshold; queues keep up to %s messages "
                     "in memory", "all their" if self.paging.bound == UNBOUNDED
                     else f"{self.paging.bound:,} of their")
        for vhost in self.vhosts.values():
            for queue in list(vhost.queues.values()):
                queue.repage()

    def set_alarm(self, resource: str, active: bool) -> None:
        """Raise or clear a resource alarm; connections are (un)blocked accordingly."""
        if active == (resource in self.alarms):
            return
        if active:
            self.alarms.add(resource)
            log.warning("%s resource limit alarm set; publishers will be blocked", resource)
            for proto in list(self.protocols):
                proto.maybe_block()
        else:
            self.alarms.discard(resource)
            log.info("%s resource limit alarm cleared", resource)
            if not self.alarms:
                for proto in list(self.protocols):
                    proto.unblock()

    def close_all(self, text: str = "broker forced connection closure with reason 'shutdown'") -> None:
        for conn in list(self.connections):
            conn.close(text=text)
