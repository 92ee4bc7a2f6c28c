"""The follower's side of replication: apply the leader's batches through the store's one path.

Theory of operation
-------------------
A follower dials the leader's replication address, proves it knows the cluster secret
(``wire.proof``) and says which batch it holds last and its lineage. The leader answers
``STREAM`` (batches follow) or ``SNAPSHOT`` (a copy of its store, then batches). Each
batch is decoded (``batch_codec``) and written through the store's one write path (one
LMDB transaction, synced), on a worker thread; then its seq is acked. The batches that
arrived in one read are written in one transaction and acked by the last one's seq: a
follower behind a busy leader catches up in a few large writes, not one fsync per batch. The leader confirms nothing before that ack, so a confirmed batch
is on this disk before the publisher hears of it. Once the leader has answered, a
``HEARTBEAT`` goes out every ``wire.HEARTBEAT_INTERVAL``, so that an idle leader can tell
this node alive from gone.

A snapshot replaces the store: it is received beside it, synced, and renamed over the
data file once complete (a cut link leaves the old store as it was), then the store is
reopened. The lineage file is rewritten before any batch of a new history is applied.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import shutil
import ssl
from pathlib import Path
from typing import Any, BinaryIO

from leveret.cluster import lineage as lineage_file
from leveret.cluster import wire
from leveret.persistence.batch import Batch
from leveret.persistence.batch_codec import decode_batch
from leveret.persistence.lmdb_store import LmdbStore

log = logging.getLogger(__name__)


class _Incoming:
    """A snapshot being received, beside the store."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = path
        self.header = header
        self.seq = int(header["seq"])
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(mode=0o700)
        self.file: BinaryIO = open(path / "data.mdb", "wb")  # noqa: SIM115 (closed at END)


class FollowerLink:
    def __init__(self, node: str, secret: bytes, store: LmdbStore, data_dir: Path,
                 tls: ssl.SSLContext | None = None) -> None:
        self.node = node
        self.tls = tls
        self.secret = secret
        self.store = store
        self.data_dir = data_dir
        self.lineage = lineage_file.load(data_dir)
        self.applied = store.state().last_seq
        self.failed_on = 0  # the epoch whose leader we last failed to reach (to log once)
        self.connected = False  # streaming from the leader now (for this node's metrics)
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "leveret-follow")
        self._beat: asyncio.Task[None] | None = None

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    async def follow(self, address: str, epoch: int) -> None:
        """Follow the leader of ``epoch`` at ``address`` until the link breaks (returns) or
        the leader refuses us or is not that leader (raises wire.WireError)."""
        host, _, port = address.rpartition(":")
        reader, writer = await asyncio.wait_for(asyncio.open_connection(
            host, int(port), ssl=self.tls, server_hostname=host if self.tls else None), 5)
        self._beat = None
        try:
            await self._follow(reader, writer, epoch)
        finally:
            self.connected = False
            if self._beat is not None:
                self._beat.cancel()
            writer.close()

    def _start_beating(self, writer: asyncio.StreamWriter) -> None:
        """Heartbeats from the leader's answer on: it counts a silent link as lost."""
        if self._beat is None:
            self._beat = asyncio.create_task(self._heartbeats(writer))

    @staticmethod
    async def _heartbeats(writer: asyncio.StreamWriter) -> None:
        beat = wire.frame(wire.HEARTBEAT)
        while not writer.is_closing():
            writer.write(beat)
            await asyncio.sleep(wire.HEARTBEAT_INTERVAL)

    async def _follow(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      epoch: int) -> None:
        frames = wire.Reader()
        loop = asyncio.get_running_loop()
        snapshot: _Incoming | None = None
        while True:
            data = await reader.read(1 << 20)
            if not data:
                log.info("replication link closed by the leader")
                return
            arrived: list[Batch] = []  # applied together, before any other frame
            for kind, payload in frames.feed(data):
                if kind == wire.BATCH:
                    batch_epoch, seq, body = wire.parse_batch(payload)
                    if batch_epoch != epoch:  # a deposed leader's: never applied
                        raise wire.WireError(f"batch {seq} of epoch {batch_epoch}, "
                                             f"not the leader's {epoch}")
                    if seq > self.applied and (not arrived or seq > arrived[-1].seq):
                        arrived.append(decode_batch(body))
                    continue
                if arrived:
                    await self._apply(arrived, writer)
                    arrived = []
                if kind == wire.CHALLENGE:
                    writer.write(wire.json_frame(wire.HELLO, {
                        "node": self.node, "proof": wire.proof(self.secret, payload, self.node),
                        "last_seq": self.applied, "lineage": self.lineage}))
                elif kind == wire.REJECT:
                    raise wire.WireError(f"the leader refused us: {payload.decode(errors='replace')}")
                elif kind == wire.STREAM:
                    self._start_beating(writer)
                    self._adopt(wire.parse_json(payload))
                    self.connected = True
                    log.info("following from batch %d", self.applied)
                elif kind == wire.SNAPSHOT:
                    self._start_beating(writer)
                    snapshot = _Incoming(self.data_dir / "store.incoming",
                                         wire.parse_json(payload))
                    log.info("receiving a snapshot at batch %d", snapshot.seq)
                elif kind == wire.CHUNK and snapshot is not None:
                    snapshot.file.write(payload)
                elif kind == wire.END and snapshot is not None:
                    incoming, snapshot = snapshot, None
                    await loop.run_in_executor(self._executor, self._install, incoming)
                    self.applied = incoming.seq
                    self._adopt(incoming.header)
                    self.connected = True
                    log.info("snapshot installed at batch %d", incoming.seq)
                    writer.write(wire.ack_frame(incoming.seq))
                else:
                    raise wire.WireError(f"unexpected frame {kind} from the leader")
            if arrived:
                await self._apply(arrived, writer)

    async def _apply(self, batches: list[Batch], writer: asyncio.StreamWriter) -> None:
        """Apply the batches that arrived together in one transaction, then ack the last.

        One fsync for all of them: a follower catching up on a leader writing flat out
        would otherwise spend one fsync per batch and never close the gap."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self.store.write_batches, batches)
        self.applied = batches[-1].seq
        writer.write(wire.ack_frame(self.applied))

    def _adopt(self, header: dict[str, Any]) -> None:
        raw = header.get("lineage", [])
        assert isinstance(raw, list)
        self.lineage = [(int(e), int(s)) for e, s in raw]
        lineage_file.save(self.data_dir, self.lineage)

    def _install(self, incoming: _Incoming) -> None:
        """Swap the received copy in for the store's data file (worker thread)."""
        incoming.file.flush()
        os.fsync(incoming.file.fileno())
        incoming.file.close()
        self.store.close()
        os.replace(incoming.path / "data.mdb", self.store.path / "data.mdb")
        shutil.rmtree(incoming.path, ignore_errors=True)
        fd = os.open(self.store.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.store = LmdbStore(self.store.path)
