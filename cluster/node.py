"""A cluster node's life: follow whoever leads, and lead when etcd says so.

Theory of operation
-------------------
``run`` replaces ``node.process.run`` when ``--etcd`` is given (``cli.py`` chooses at
start-up; a single node never imports this package). The node takes its etcd lease, locks
its data dir and opens its store, then loops as a follower: it reads the leader key; while
there is a leader it proxies AMQP clients to it (``proxy.py``) and applies its batches
(``follower.py``), serving its own metrics meanwhile (``follower_metrics.py``); when there
is none it campaigns (``coordinator.py``: only an in-sync node can win). Winning, it stops
proxying and serving those metrics, records the new epoch in its lineage, removes
the previous leader from the in-sync set, listens for followers (``leader.py``) and runs
the broker exactly as a single node does (``node.process.main``) on its warm store wrapped
in ``ReplicatedStore``. A leader whose lease lapses exits at once (status 3, as LavinMQ):
it has stopped confirming already, and restarted it rejoins as a follower.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from leveret.cluster import crash_hook, wire
from leveret.cluster import lineage as lineage_file
from leveret.cluster.coordinator import CoordinatorError, EtcdCoordinator, Leadership
from leveret.cluster.follower import FollowerLink
from leveret.cluster.follower_metrics import FollowerMetrics
from leveret.cluster.leader import Leader
from leveret.cluster.proxy import Proxy
from leveret.cluster.replicated_store import ReplicatedStore
from leveret.cluster.service import ClusterService
from leveret.node import process, tls
from leveret.node.process import Service, StartupError
from leveret.persistence.lmdb_store import LmdbStore

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from leveret.config import Config

log = logging.getLogger(__name__)

# How often a follower looks at the leader key (a failover is noticed this much after
# the lease expired, at worst).
POLL = 0.25
# How long candidates wait for each other's offers before the best campaigns, and after how
# many such rounds any in-sync node does (the best may be unable to win).
CANDIDACY_WINDOW = 0.3
PATIENCE = 3
# The status a leader exits with when it lost its lease (LavinMQ exits 3 too).
EXIT_LEASE_LOST = 3


def node_name(config: Config) -> str:
    return config.node_name or socket.gethostname()


def advertised_host(config: Config) -> str:
    if config.replication_host:
        return config.replication_host
    hosts = [h for h in config.host if h not in ("0.0.0.0", "::")]
    return hosts[0] if hosts else "127.0.0.1"


def replication_tls(config: Config) -> tuple[ssl.SSLContext | None, ssl.SSLContext | None]:
    """TLS for the replication link when ``tls_certfile`` is set: the leader presents the
    node's certificate (the AMQPS one); a follower verifies it against ``tls_cafile`` and
    the address it dials, when a CA is given. Followers prove themselves by the HMAC on the
    cluster secret, TLS or not."""
    if config.tls_certfile is None:
        return None, None
    if config.tls_cafile is not None:
        client = ssl.create_default_context(cafile=str(config.tls_cafile))
    else:
        client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client.check_hostname = False
        client.verify_mode = ssl.CERT_NONE
    client.minimum_version = ssl.TLSVersion.TLSv1_2
    return tls.server_context(config), client


def run(config: Config, front_doors: Sequence[Service]) -> None:
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = (
        uvloop.new_event_loop if uvloop is not None else None)
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main(config, front_doors))


async def main(config: Config, front_doors: Sequence[Service]) -> None:
    coordinator = EtcdCoordinator(config.etcd, config.cluster_name, config.lease_ttl)
    try:
        await coordinator.start()
        secret = await coordinator.secret()
    except (CoordinatorError, KeyError, ValueError) as exc:
        await coordinator.close()
        raise StartupError(f"cannot join cluster {config.cluster_name!r}: {exc}") from exc
    try:
        return await _serve(config, front_doors, coordinator, secret)
    finally:
        await coordinator.close()


async def _serve(config: Config, front_doors: Sequence[Service], coordinator: EtcdCoordinator,
                 secret: bytes) -> None:
    name = node_name(config)
    store, lock = process.open_store(config)
    data_dir = Path(config.data_dir)
    try:
        lineage_file.claim(data_dir, config.cluster_name)
    except lineage_file.ForeignCluster as exc:
        store.close()
        lock.close()
        raise StartupError(str(exc)) from exc
    host = advertised_host(config)
    amqp_address = f"{host}:{config.port}"
    replication_address = (
        f"{host}:{config.replication_advertised_port or config.replication_port}")
    addresses = {"amqp": amqp_address, "replication": replication_address,
                 "management": f"{host}:{config.management_port}"
                 if config.management_port else ""}
    await coordinator.announce(name, addresses)
    try:
        server_tls, client_tls = replication_tls(config)
    except tls.TLSConfigError as exc:
        store.close()
        lock.close()
        raise StartupError(str(exc)) from exc
    link = FollowerLink(name, secret, store, data_dir, client_tls)
    current: Leadership | None = None
    proxy = Proxy(lambda: current.amqp if current is not None else None)
    try:
        await proxy.listen(config.host, config.port)
    except OSError as exc:
        store.close()
        lock.close()
        raise StartupError(f"cannot listen on AMQP port {config.port}: {exc.strerror}") from exc
    # The management API is relayed too (HTTP is bytes like AMQP), so scripts and the
    # console work through any node; without the port (taken, or 0) only AMQP is relayed.
    api_proxy = Proxy(lambda: (current.management or None) if current is not None else None)
    if config.management_port:
        try:
            await api_proxy.listen(config.management_host, config.management_port)
        except OSError as exc:
            log.warning("not relaying the management API on port %d: %s",
                        config.management_port, exc.strerror)
    metrics = FollowerMetrics(name, config.cluster_name, coordinator, link, lambda: current)
    if config.prometheus_port and not config.prometheus_authentication:
        await metrics.listen(config.management_host, config.prometheus_port)
    log.info("cluster node %s (cluster %r) started as a follower", name, config.cluster_name)
    previous: str | None = None
    epoch = 0
    vacant = 0  # rounds the leader key has been vacant
    while True:
        try:
            current = await coordinator.leader()
            if current is None:
                if await _my_turn(coordinator, name, link.applied, vacant):
                    won = await coordinator.campaign(name, addresses)
                    if won is not None:
                        epoch = won
                        break
                vacant += 1
            elif current.node != name:
                vacant = 0
                previous = current.node
                await _follow_while_leading(coordinator, link, current)
        except CoordinatorError as exc:
            log.warning("etcd: %s", exc)
        await asyncio.sleep(POLL)
    log.info("node %s leads the cluster, epoch %d", name, epoch)
    await proxy.close()
    await api_proxy.close()
    await metrics.close()
    link.close()
    # Reopened as a restarted node's is: transient entries replicated from the previous
    # leader (paged out, not meant to survive it) are dropped, as at any start.
    link.store.close()
    store = LmdbStore(link.store.path)
    last_seq = store.state().last_seq
    lineage = [*lineage_file.load(data_dir), (epoch, last_seq + 1)]
    lineage_file.save(data_dir, lineage)
    # A failure from here on ends the process with one line: the lease then lapses and
    # another in-sync node takes over; restarted, this one follows.
    try:
        if previous is not None and previous != name:
            await coordinator.set_in_sync(previous, False, epoch)
        in_sync = await coordinator.in_sync()
    except CoordinatorError as exc:
        raise StartupError(f"lost etcd while taking over as leader: {exc}") from exc
    leader = Leader(name, epoch, coordinator, secret, store, data_dir, lineage,
                    config.min_in_sync, in_sync, last_seq)
    try:
        await leader.listen(config.host, config.replication_port, server_tls)
    except OSError as exc:
        raise StartupError(f"cannot listen on replication port {config.replication_port}: "
                           f"{exc.strerror or exc}") from exc
    watchdog = asyncio.create_task(_watch_lease(coordinator, leader))
    try:
        view = ClusterService(name, config.cluster_name, coordinator, leader)
        replicated = ReplicatedStore(store, leader, asyncio.get_running_loop())
        if (crash_dir := crash_hook.trigger_dir()) is not None:  # tests only
            replicated = crash_hook.CrashBeforeShipping(store, leader, replicated.loop)
            replicated.trigger = crash_dir / name
        await process.main(config, [view, *front_doors], (replicated, lock))
    finally:
        watchdog.cancel()
        await leader.close()


async def _follow_while_leading(coordinator: EtcdCoordinator, link: FollowerLink,
                                current: Leadership) -> None:
    """Follow ``current`` until its link breaks or another node leads."""
    following = asyncio.create_task(link.follow(current.replication, current.epoch))
    try:
        while not following.done():
            await asyncio.wait({following}, timeout=POLL)
            if following.done():
                break
            now = await coordinator.leader()
            if now is None or now.epoch != current.epoch:
                return
        following.result()
    except (OSError, TimeoutError, wire.WireError) as exc:
        # Every POLL while a dead leader's key lives on: said once per leader.
        (log.info if link.failed_on != current.epoch else log.debug)(
            "cannot follow %s at %s: %s", current.node, current.replication, exc)
        link.failed_on = current.epoch
    finally:
        if not following.done():
            following.cancel()
            try:
                await following
            except (asyncio.CancelledError, Exception):
                pass


async def _my_turn(coordinator: EtcdCoordinator, name: str, last_seq: int, rounds: int) -> bool:
    """Whether to campaign now: the in-sync candidate holding the most batches goes first,
    so the others keep what they hold (a less up-to-date winner would make whoever holds
    more, unconfirmed, batches need a snapshot). Any in-sync node is a safe leader: after
    ``PATIENCE`` rounds whoever is left campaigns. A few etcd requests per failover."""
    in_sync = await coordinator.in_sync()
    if name not in in_sync:  # a new cluster (bootstrap), or a node that cannot win anyway
        return True
    await coordinator.offer(name, last_seq)
    await asyncio.sleep(CANDIDACY_WINDOW)
    offers = {n: s for n, s in (await coordinator.offers()).items() if n in in_sync}
    best = max(offers.items(), key=lambda offer: (offer[1], offer[0]), default=(name, 0))
    return best[0] == name or rounds >= PATIENCE


async def _watch_lease(coordinator: EtcdCoordinator, leader: Leader) -> None:
    """Exit as soon as the lease is stale or a write was fenced: another node may lead."""
    while True:
        await asyncio.sleep(0.1)
        if leader.fenced or not coordinator.lease_fresh():
            log.error("lost the leadership (lease not renewed within %d s); exiting",
                      coordinator.ttl)
            logging.shutdown()
            time.sleep(0)  # let the log line out
            os._exit(EXIT_LEASE_LOST)
