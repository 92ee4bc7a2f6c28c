"""The management and Prometheus listeners: aiohttp in-process on the broker's loop.

``ManagementService`` is a ``node.process.Service``: the entry point (cli.py)
hands it to ``node.process.run``, which starts it after the AMQP listeners and stops
it before them. aiohttp's ``AppRunner`` leaves signal handling to the broker
(``handle_signals=False`` is its default). Ports and failures behave like the
AMQP listener's: port 0 picks a free port and the chosen one is logged
("listening for HTTP management API on 127.0.0.1:15672"); a port in use is
one ``StartupError`` line. With ``tls_certfile`` set, the management API is
served over HTTPS too, on ``management_tls_port`` (15671, RabbitMQ's
``management.ssl.port``), with the AMQPS listener's certificate settings
(``node/tls.py``: the same CA, client-certificate verification and TLS
versions); it is listed as protocol ``https``. Every listener closes slow and idle
connections (``guard.keepalive_timeout``). ``State`` is what handlers share: the broker, the
config, the sampler and the HTTP login counters.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import ssl
import time
from typing import Any

from aiohttp import web

from leveret import __version__
from leveret.broker import definitions
from leveret.broker.inventory import PRODUCT_NAME, RABBITMQ_VERSION
from leveret.management_ui import alerts, api, guard, log_stream, metrics_app, sampler, views
from leveret.management_ui.exchange_tally import ExchangeTally
from leveret.management_ui.log_stream import LogFanout
from leveret.model.stats import FIELDS as MESSAGE_STATS_FIELDS
from leveret.node import tls
from leveret.node.process import StartupError

log = logging.getLogger(__name__)

# How long stopping waits for HTTP requests in flight (aiohttp's default is 60 s); the AMQP
# side gives its clients SHUTDOWN_GRACE_SECONDS (3 s) in the same spirit.
HTTP_SHUTDOWN_SECONDS = 2.0


class State:
    def __init__(self, broker: Any, config: Any) -> None:
        self.broker = broker
        self.config = config
        self.node = broker.cluster_name
        self.sampler = sampler.Sampler(interval=config.collect_statistics_interval)
        self.exchange_tally = ExchangeTally()
        self.started = time.time()
        self.version = __version__
        self.rabbitmq_version = RABBITMQ_VERSION
        self.product_name = PRODUCT_NAME
        self.http_auth = [0, 0]  # succeeded, failed
        self.log_fanout: LogFanout | None = None  # the log's recent records (log_stream.py)
        self.ack_watch = alerts.AckWatch()  # per-queue ack progress (alert hints)
        # (ready, unacked, consumers) summed over every queue at the last sample.
        self.queue_totals: tuple[int, int, int] | None = None

    def auth_attempts(self, ok: bool) -> None:
        self.http_auth[0 if ok else 1] += 1

    def sample(self) -> None:
        """One sampling round (every collect_statistics_interval s): read counters, keep them."""
        broker, s = self.broker, self.sampler
        now = time.time()
        for name, value in broker.message_stats().as_dict().items():
            s.record(f"message_stats.{name}", value, now)
        for name, value in broker.churn_totals().as_dict().items():
            s.record(f"churn_rates.{name}", value, now)
        ready = unacked = consumers = 0
        octets: dict[str, list[int]] = {}
        for conn in list(broker.connections):
            if conn.vhost is not None:
                pair = octets.setdefault(conn.vhost.name, [0, 0])
                pair[0] += conn.recv_oct
                pair[1] += conn.send_oct
        for vhost in broker.vhosts.values():
            vh_ready = vh_unacked = 0
            for queue in vhost.queues.values():
                r, u = queue.message_count, queue.unacked
                vh_ready += r
                vh_unacked += u
                consumers += queue.consumer_count
                s.record_object(("q", vhost.name, queue.name),
                                (r + u, r, u, queue.published, queue.delivered,
                                 queue.redelivered, queue.acked), now)
                self.ack_watch.stalled_for(queue, now)
            ready += vh_ready
            unacked += vh_unacked
            recv, send = octets.get(vhost.name, (0, 0))
            stats = broker.message_stats(vhost.name).as_dict()
            s.record_object(sampler.vhost_key(vhost.name),
                            (vh_ready + vh_unacked, vh_ready, vh_unacked, recv, send,
                             *(stats[f] for f in MESSAGE_STATS_FIELDS)), now)
        self.ack_watch.keep_only({(vh.name, q) for vh in broker.vhosts.values()
                                  for q in vh.queues})
        self.queue_totals = (ready, unacked, consumers)
        s.record("queue_totals.messages", ready + unacked, now)
        s.record("queue_totals.messages_ready", ready, now)
        s.record("queue_totals.messages_unacknowledged", unacked, now)
        channels = []
        for conn in list(broker.connections):
            s.record_object(("c", id(conn)), (conn.recv_oct, conn.send_oct), now)
            for channel in list(conn.channels.values()):
                channels.append(channel)
                stats = channel.stats.as_dict()
                s.record_object(("ch", id(channel)),
                                tuple(stats[f] for f in views.CHANNEL_RATE_FIELDS), now)
        exchanges = {(vh.name, x) for vh in broker.vhosts.values() for x in vh.exchanges}
        for (vhost_name, name), counts in self.exchange_tally.tally(channels, exchanges).items():
            s.record_object(views.exchange_key(vhost_name, name), counts, now)
        s.end_round()


class ManagementService:
    """Starts the two HTTP listeners and the sampler; stops them."""

    def __init__(self) -> None:
        self.runners: list[web.AppRunner] = []
        self.sampling: asyncio.Task[None] | None = None
        self.state: State | None = None

    async def start(self, broker: Any, config: Any) -> None:
        state = self.state = State(broker, config)
        log_stream.attach(state)  # from the start, so the log page can show the last lines
        if config.load_definitions:
            try:
                count = definitions.load_file(broker, config.load_definitions)
            except (OSError, ValueError, definitions.Invalid) as exc:
                reason = getattr(exc, "strerror", None) or exc
                raise StartupError(f"cannot load definitions from {config.load_definitions}: "
                                   f"{reason}") from exc
            log.info("loaded definitions from %s (%d operation(s))", config.load_definitions,
                     count)
        hosts: list[str | None] = list(config.management_host) or [None]
        management = api.build_app(state)
        listeners: list[tuple[web.Application, int, str, str, str, ssl.SSLContext | None]] = [
            (management, config.management_port, "HTTP management API", "http",
             "management_port", None)]
        if config.tls_certfile is not None:
            try:
                https = tls.server_context(config)
            except tls.TLSConfigError as exc:
                raise StartupError(str(exc)) from exc
            listeners.append((management, config.management_tls_port, "HTTPS management API",
                              "https", "management_tls_port", https))
        listeners.append((metrics_app.build_app(state), config.prometheus_port,
                          "Prometheus metrics", "http/prometheus", "prometheus_port", None))
        runners: dict[web.Application, web.AppRunner] = {}
        for app, port, what, protocol, setting, context in listeners:
            runner = runners.get(app)
            if runner is None:
                runner = runners[app] = web.AppRunner(
                    app, access_log=None, handle_signals=False,
                    shutdown_timeout=HTTP_SHUTDOWN_SECONDS,
                    keepalive_timeout=guard.keepalive_timeout(config))
                await runner.setup()
                self.runners.append(runner)
            before = set(runner.addresses)
            for host in hosts:
                site = web.TCPSite(runner, host, port, reuse_address=True, ssl_context=context)
                try:
                    await site.start()
                except OSError as exc:
                    where = f"{host or '*'}:{port}"
                    if exc.errno == errno.EADDRINUSE and setting not in config.explicit:
                        # A default port someone else holds (often a RabbitMQ): AMQP still
                        # runs; the operator picks a port to get this listener.
                        log.warning("not serving %s: port %d is already in use (choose one "
                                    "with --%s)", what, port, setting.replace("_", "-"))
                        break
                    await self.stop()
                    if exc.errno == errno.EADDRINUSE:
                        raise StartupError(f"cannot listen for {what} on {where}: port {port} "
                                           "is already in use") from exc
                    raise StartupError(f"cannot listen for {what} on {where}: "
                                       f"{exc.strerror or exc}") from exc
            for address in runner.addresses:
                if address in before:
                    continue
                broker.listeners.append((protocol, address[0], address[1]))
                log.info("listening for %s on %s:%d", what, address[0], address[1])
        self.sampling = asyncio.create_task(self._sample_forever(state))

    async def _sample_forever(self, state: State) -> None:
        while True:
            try:
                state.sample()
            except Exception:
                log.exception("management sampler failed")
            await asyncio.sleep(state.sampler.interval)

    async def stop(self) -> None:
        if self.sampling is not None:
            self.sampling.cancel()
            self.sampling = None
        for runner in reversed(self.runners):
            await runner.cleanup()
        self.runners = []
        if self.state is not None:
            log_stream.detach(self.state)
            broker = self.state.broker
            broker.listeners[:] = [entry for entry in broker.listeners
                                   if entry[0] not in ("http", "https", "http/prometheus")]
