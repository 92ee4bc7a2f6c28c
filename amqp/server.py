"""The AMQP front door: its listeners (plain and TLS) and, at shutdown, its clients.

Kept thin on purpose: each accepted socket gets an ``AMQPProtocol`` (``protocol.py``), the
sans-IO core's adapter. ``AmqpListeners`` is a ``node.process.Service``: the node starts it
first (the other front doors report its ports) and stops it last, closing every client with
320 CONNECTION_FORCED before the node writes the store's last batch.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from typing import TYPE_CHECKING, cast

from leveret.amqp.protocol import AMQPProtocol
from leveret.node import tls
from leveret.node.process import StartupError

if TYPE_CHECKING:
    from leveret.broker.broker import Broker
    from leveret.config import Config

log = logging.getLogger(__name__)

# How long shutdown waits for clients to answer connection.close before dropping them.
SHUTDOWN_GRACE_SECONDS = 3.0


class AmqpListeners:
    """The AMQP 0-9-1 listeners of one node, as a front door the node starts and stops."""

    def __init__(self) -> None:
        self._broker: Broker | None = None
        self._servers: list[asyncio.AbstractServer] = []

    async def start(self, broker: Broker, config: Config) -> None:
        self._broker = broker
        self._servers = await serve(broker, config)

    async def stop(self) -> None:
        if self._broker is not None:
            await shutdown(self._broker, self._servers)


async def serve(broker: Broker, config: Config) -> list[asyncio.AbstractServer]:
    """Start listening; returns the servers (one per host, plain then TLS)."""
    loop = asyncio.get_running_loop()
    hosts: list[str | None] = list(config.host) or [None]
    servers: list[asyncio.AbstractServer] = []
    for host in hosts:
        try:
            server = await loop.create_server(
                lambda: AMQPProtocol(broker, config, loop), host=host, port=config.port,
                reuse_address=True, backlog=1024)
        except OSError as exc:
            for s in servers:
                s.close()
            where = f"{host or '*'}:{config.port}"
            if exc.errno == errno.EADDRINUSE:
                raise StartupError(f"cannot listen on {where}: port {config.port} is already in use") from exc
            raise StartupError(f"cannot listen on {where}: {exc.strerror or exc}") from exc
        servers.append(server)
        for sock in server.sockets:
            address = sock.getsockname()
            broker.listeners.append(("amqp", address[0], address[1]))
            log.info("listening for AMQP 0-9-1 on %s:%d", address[0], address[1])
    if config.tls_certfile is not None:
        servers += await _serve_tls(broker, config, hosts, servers)
    return servers


async def _serve_tls(broker: Broker, config: Config, hosts: list[str | None],
                     plain: list[asyncio.AbstractServer]) -> list[asyncio.AbstractServer]:
    """The AMQPS listener: the same protocol behind stdlib ssl (node/tls.py)."""
    loop = asyncio.get_running_loop()
    try:
        context = tls.server_context(config)
    except tls.TLSConfigError as exc:
        for s in plain:
            s.close()
        raise StartupError(str(exc)) from exc
    servers: list[asyncio.AbstractServer] = []
    for host in hosts:
        try:
            server = await loop.create_server(
                lambda: AMQPProtocol(broker, config, loop), host=host, port=config.tls_port,
                reuse_address=True, backlog=1024, ssl=context,
                ssl_handshake_timeout=config.handshake_timeout)
        except OSError as exc:
            for s in plain + servers:
                s.close()
            raise StartupError(f"cannot listen for AMQPS on {host or '*'}:{config.tls_port}: "
                               f"{exc.strerror or exc}") from exc
        servers.append(server)
        for sock in server.sockets:
            address = sock.getsockname()
            broker.listeners.append(("amqp/ssl", address[0], address[1]))
            log.info("listening for AMQP 0-9-1 over TLS on %s:%d", address[0], address[1])
    return servers


async def shutdown(broker: Broker, servers: list[asyncio.AbstractServer]) -> None:
    """Stop accepting, send 320 CONNECTION_FORCED to every client, wait briefly, close.
    The node writes the store's last batch after this."""
    for server in servers:
        server.close()
    # The broker knows them as Blockable; every one of them is one of ours.
    protocols = [cast(AMQPProtocol, p) for p in broker.protocols]
    broker.close_all()
    for proto in protocols:
        proto._flush()
    if protocols:
        await asyncio.wait([p.closed for p in protocols], timeout=SHUTDOWN_GRACE_SECONDS)
        silent = [p.transport for p in protocols
                  if not p.closed.done() and p.transport is not None]
        if silent:
            log.warning("%d client(s) did not answer connection.close within %.0f s; dropped",
                        len(silent), SHUTDOWN_GRACE_SECONDS)
        for transport in silent:
            transport.abort()
