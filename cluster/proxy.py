"""A follower's AMQP port: each client connection is relayed byte for byte to the leader.

So a client given any node's address (one URL, a DNS name over all nodes) reaches the
leader, as LavinMQ's followers do (its ``proxy.cr``). The proxy reads nothing of AMQP;
when the leader dies its relayed connections close, and the client reconnects, through
this node again, to whoever leads then. Backpressure: each direction awaits ``drain``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

log = logging.getLogger(__name__)


class Proxy:
    def __init__(self, target: Callable[[], str | None]) -> None:
        self.target = target  # host:port of the leader's AMQP listener, None if unknown
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    async def listen(self, hosts: Sequence[str], port: int) -> None:
        self._server = await asyncio.start_server(self._relay, list(hosts) or None, port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._open):
            writer.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        address = self.target()
        if address is None:
            writer.close()
            return
        host, _, port = address.rpartition(":")
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(host, int(port)), 5)
        except (OSError, TimeoutError) as exc:
            log.debug("no leader to relay a client to (%s): %s", address, exc)
            writer.close()
            return
        self._open.update((writer, up_writer))
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                self._open.discard(w)
                w.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    # RuntimeError: uvloop's answer to a write on a transport the other side closed.
    with contextlib.suppress(OSError, RuntimeError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if not writer.is_closing() and writer.can_write_eof():
            writer.write_eof()
    writer.close()
