"""The leader's side of replication: ship every committed batch, confirm only what is in sync.

Theory of operation
-------------------
``ReplicatedStore`` (``replicated_store.py``) wraps the node's store when the node leads;
the group commit knows nothing of it. Its ``write_batch`` (on the group commit's writer thread) writes the batch
locally as before, then hands the encoded frame to ``Leader.replicate`` on the loop and
blocks until it returns: the batch's confirms and "-ok"s go out only after that, as they
already wait for ``write_batch``. While it blocks, the next batch fills up (group commit).

``replicate`` sends the frame to every connected follower, keeps it in a ring for
followers that reconnect, and waits until every member of the in-sync set has acked it
and the set holds at least ``min_in_sync`` nodes (the leader counts). A member that has
not acked within ``ACK_TIMEOUT`` is removed from the set *in etcd first* (a transaction
fenced on this leader's epoch), so it can no longer win an election, and only then is the
batch confirmed without it. If the removal is refused (another leader), or the lease was
not renewed within its TTL, the write raises ``StoreError``: the batch's confirms become
nacks, and the node exits (``node.py``) rather than go on as a zombie.

A follower joins with its last batch and lineage: streamed from the ring when it shares
the leader's history and the ring still holds what it lacks, otherwise sent a snapshot
(``LmdbStore.snapshot``, LMDB's consistent copy) and streamed from there. It enters the
in-sync set, locally before etcd (so no batch is confirmed without it meanwhile), once it
has acked every batch released so far: the batch in flight, if any, then waits for its ack
too. Asking for every batch *shipped* instead never succeeds under a publisher running
flat out, as the next batch is shipped the moment the in-sync members ack the last one: a
healed follower that had applied its backlog in a few milliseconds stayed one batch behind
for seconds. This is LavinMQ's rule (``wait_for_followers`` and ``flush_isr``), with whole
batches instead of file bytes.

A follower whose link is lost, or silent (no ack, no heartbeat) for ``wire.LINK_TIMEOUT``,
or that has not dialled a new leader within that time, leaves the in-sync set at once, in
etcd first, whether or not a batch waits for it: an idle leader's set names only nodes
that can take over.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import secrets
import shutil
import ssl
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, Protocol

from leveret.broker.cluster_view import ReplicationFigures
from leveret.cluster import lineage as lineage_file
from leveret.cluster import wire
from leveret.cluster.coordinator import Coordinator
from leveret.persistence.store import StoreError

log = logging.getLogger(__name__)

# Seconds an in-sync follower may take to ack a batch before it is dropped from the set
# (LavinMQ: 3 s; the design's 1.5 s keeps a confirm's worst pause short).
ACK_TIMEOUT = 1.5
# A follower admitted while a batch is in flight gets its own ack timeout for that batch,
# but the batch waits no longer than this in all (guarantee: a lost follower pauses
# confirms at most 2 s; the margin is for the etcd transaction that drops it).
MAX_ACK_WAIT = 1.8
# Batches kept for followers that reconnect (older ones get a snapshot instead): the most
# recent ones, up to this many bytes of frames.
RING_BYTES = 256 << 20


class Snapshotting(Protocol):
    """A store that can copy its committed data while writes go on (``LmdbStore``)."""

    def snapshot(self, target: Path) -> int: ...


class _Follower:
    def __init__(self, node: str, writer: asyncio.StreamWriter) -> None:
        self.node = node
        self.writer = writer
        self.acked = 0
        self.streaming = False  # batches go straight out; else they wait in ``held``
        self.held: list[tuple[int, bytes]] = []


class Leader:
    def __init__(self, node: str, epoch: int, coordinator: Coordinator, secret: bytes,
                 store: Snapshotting, data_dir: Path, lineage: lineage_file.Lineage,
                 min_in_sync: int, in_sync: set[str], last_seq: int) -> None:
        self.node = node
        self.epoch = epoch
        self.coordinator = coordinator
        self.secret = secret
        self.store = store
        self.data_dir = data_dir
        self.lineage = lineage
        self.min_in_sync = min_in_sync
        self.in_sync = set(in_sync) | {node}  # as etcd has it
        self.required = set(self.in_sync)  # whose ack a batch waits for: ⊇ in_sync
        self.last_seq = last_seq
        self.released = last_seq  # the last batch that may be confirmed
        self.ring: collections.deque[tuple[int, bytes]] = collections.deque()
        self.ring_bytes = 0
        self.followers: dict[str, _Follower] = {}
        self.changed = asyncio.Event()
        self.fenced = False
        self.shipped = 0  # batches sent, for metrics
        self.ack_seconds = 0.0  # summed wait for the followers' acks, for metrics
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # One change of the in-sync set at a time: a drop and an admission of the same node
        # racing in etcd could leave etcd listing a node this leader no longer waits for.
        self._membership = asyncio.Lock()
        self._grace: dict[str, float] = {}  # admitted mid-batch: its own ack deadline

    def figures(self, cluster: str) -> ReplicationFigures:
        return ReplicationFigures(
            cluster, self.epoch, len(self.in_sync), len(self.followers), self.shipped,
            self.last_seq, self.ack_seconds, {n: max(0, self.last_seq - f.acked)
                               for n, f in sorted(self.followers.items())})

    async def listen(self, hosts: Sequence[str], port: int,
                     tls: ssl.SSLContext | None = None) -> None:
        self._server = await asyncio.start_server(self._serve, list(hosts) or None, port,
                                                  ssl=tls)
        self._spawn(self._drop_absent())

    async def _drop_absent(self) -> None:
        """Members of the set this leader inherited that never dial it leave the set, as
        a lost link would: a follower polls the leader key every fraction of a second."""
        await asyncio.sleep(wire.LINK_TIMEOUT)
        for node in sorted(self.required - set(self.followers) - {self.node}):
            await self._drop_lost(node, f"no link to this leader within "
                                        f"{wire.LINK_TIMEOUT:.0f} s of its start")

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for follower in list(self.followers.values()):
            follower.writer.close()

    def _wake(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    # -- the confirm path ----------------------------------------------------------------

    async def replicate(self, seq: int, frame: bytes) -> None:
        """Ship batch ``seq`` and wait until it may be confirmed; raises StoreError."""
        self._check_leading()  # a leader resumed after its lease lapsed ships nothing
        self.last_seq = seq
        self.ring.append((seq, frame))
        self.ring_bytes += len(frame)
        while self.ring_bytes > RING_BYTES and len(self.ring) > 1:
            self.ring_bytes -= len(self.ring.popleft()[1])
        self.shipped += 1
        started = asyncio.get_running_loop().time()
        for follower in self.followers.values():
            if follower.streaming:
                follower.writer.write(frame)
            else:
                follower.held.append((seq, frame))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ACK_TIMEOUT
        while True:
            self._check_leading()
            missing = [n for n in self.required if n != self.node
                       and (n not in self.followers or self.followers[n].acked < seq)]
            now = loop.time()
            late = [n for n in missing if now >= max(
                deadline, min(self._grace.get(n, 0.0), started + MAX_ACK_WAIT))]
            if not missing:
                if len(self.in_sync) >= self.min_in_sync:
                    self.ack_seconds += now - started
                    self.released = seq
                    return
            elif late:
                for node in late:
                    await self._drop(node)
                continue
            changed = self.changed
            try:
                await asyncio.wait_for(changed.wait(), max(0.05, min(
                    0.5, deadline - loop.time())))
            except TimeoutError:
                pass

    def _check_leading(self) -> None:
        if self.fenced or not self.coordinator.lease_fresh():
            self.fenced = True
            raise StoreError("this node's leadership lapsed: nothing more is confirmed")

    async def _drop(self, node: str, why: str | None = None,
                    unless_linked: bool = False) -> None:
        """Remove ``node`` from the in-sync set: in etcd first, then here. ``unless_linked``:
        not if it has a link again by then (it was dropped for losing its link)."""
        async with self._membership:
            if unless_linked and node in self.followers:
                return
            if node not in self.in_sync:
                self.required.discard(node)
                return
            try:
                ok = await self.coordinator.set_in_sync(node, False, self.epoch)
            except Exception as exc:  # etcd unreachable: stall, the lease decides
                log.warning("cannot remove %s from the in-sync set yet: %s", node, exc)
                await asyncio.sleep(0.2)
                return
            if not ok:
                self.fenced = True
                raise StoreError("another node leads: this one may confirm nothing more")
            self.in_sync.discard(node)
            self.required.discard(node)
            log.warning("follower %s left the in-sync set (%s)", node,
                        why or f"no ack within {ACK_TIMEOUT:.1f} s")

    async def _drop_lost(self, node: str, why: str) -> None:
        """``node``'s link is gone: out of the set now, not when a batch times out on it."""
        try:
            while node in self.required and node not in self.followers and not self.fenced:
                await self._drop(node, why, unless_linked=True)
        except StoreError as exc:
            log.warning("%s", exc)  # fenced: the next batch fails and the node steps down
        self._wake()

    def _maybe_admit(self, follower: _Follower) -> None:
        """A follower that holds every batch released so far joins the in-sync set."""
        if follower.node in self.required or follower.acked < self.released:
            return
        # Required at once, before etcd hears of it: nothing is confirmed without it from
        # here on (the batch in flight included), so etcd never lists a member that lacks
        # a confirmed batch. It gets a full ack timeout for the batch in flight.
        self.required.add(follower.node)
        self._grace[follower.node] = asyncio.get_running_loop().time() + ACK_TIMEOUT
        self._spawn(self._admit(follower))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _admit(self, follower: _Follower) -> None:
        node = follower.node
        async with self._membership:
            if node not in self.required or self.followers.get(node) is not follower:
                # Dropped, or its link lost, since it qualified: a later ack qualifies it
                # again.
                if node not in self.in_sync:
                    self.required.discard(node)
                self._wake()
                return
            try:
                ok = await self.coordinator.set_in_sync(node, True, self.epoch)
            except Exception as exc:
                log.warning("cannot add %s to the in-sync set yet: %s", node, exc)
                ok = False
            if ok:
                self.in_sync.add(node)
                log.info("follower %s joined the in-sync set at batch %d", node,
                         follower.acked)
            elif node not in self.in_sync:
                self.required.discard(node)
        self._wake()

    # -- followers' connections ------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonce = secrets.token_bytes(32)
        writer.write(wire.frame(wire.CHALLENGE, nonce))
        frames = wire.Reader()
        follower: _Follower | None = None
        why = "replication link closed"
        try:
            pending: list[tuple[int, bytes]] = []
            while not pending:
                data = await asyncio.wait_for(reader.read(65536), 10)
                if not data:
                    return
                pending = frames.feed(data)
            kind, payload = pending.pop(0)
            hello = wire.parse_json(payload) if kind == wire.HELLO else {}
            node = str(hello.get("node", ""))
            if not node or not wire.proof_ok(self.secret, nonce, node, hello.get("proof")):
                log.warning("replication link from %s refused: bad credentials",
                            writer.get_extra_info("peername"))
                writer.write(wire.frame(wire.REJECT, b"bad credentials"))
                return
            old = self.followers.get(node)
            if old is not None:
                old.writer.close()
            follower = self.followers[node] = _Follower(node, writer)
            await self._catch_up(follower, int(hello.get("last_seq", 0)),
                                 [(int(e), int(s)) for e, s in hello.get("lineage", [])])
            self._maybe_admit(follower)  # it may hold everything already (an idle leader)
            while True:
                for kind, payload in pending:
                    if kind == wire.HEARTBEAT:
                        continue
                    if kind != wire.ACK:
                        raise wire.WireError(f"unexpected frame {kind} from a follower")
                    follower.acked = max(follower.acked, wire.parse_ack(payload))
                    self._maybe_admit(follower)
                    self._wake()
                try:
                    data = await asyncio.wait_for(reader.read(65536), wire.LINK_TIMEOUT)
                except TimeoutError:
                    raise wire.WireError(
                        f"nothing heard for {wire.LINK_TIMEOUT:.0f} s") from None
                if not data:
                    raise wire.WireError("closed by the follower")
                pending = frames.feed(data)
        except (OSError, TimeoutError, wire.WireError, StoreError, ValueError, TypeError) as exc:
            why = f"replication link lost: {exc}"
            log.warning("replication link to %s lost: %s",
                        follower.node if follower else "a follower", exc)
        finally:
            if follower is not None and self.followers.get(follower.node) is follower:
                del self.followers[follower.node]
                self._grace.pop(follower.node, None)
                self._spawn(self._drop_lost(follower.node, why))
                self._wake()
            writer.close()

    async def _catch_up(self, follower: _Follower, last_seq: int,
                        theirs: lineage_file.Lineage) -> None:
        """Bring a joining follower to the leader's last batch, then stream."""
        writer = follower.writer
        shares = (last_seq <= self.last_seq and lineage_file.epoch_at(theirs, last_seq)
                  == lineage_file.epoch_at(self.lineage, last_seq))
        first_kept = self.ring[0][0] if self.ring else self.last_seq + 1
        if shares and (last_seq == self.last_seq or first_kept <= last_seq + 1):
            writer.write(wire.json_frame(wire.STREAM, {"lineage": self.lineage}))
            for seq, frame in self.ring:
                if seq > last_seq:
                    writer.write(frame)
            follower.acked = last_seq
            follower.streaming = True
            log.info("follower %s joined at batch %d: streaming", follower.node, last_seq)
            await writer.drain()
            return
        log.info("follower %s (batch %d) gets a snapshot", follower.node, last_seq)
        target = self.data_dir / f"snapshot-{follower.node}"
        loop = asyncio.get_running_loop()
        try:
            seq = await loop.run_in_executor(None, self.store.snapshot, target)
            writer.write(wire.json_frame(wire.SNAPSHOT, {"lineage": self.lineage, "seq": seq}))
            with open(target / "data.mdb", "rb") as fh:
                while chunk := fh.read(wire.SNAPSHOT_CHUNK):
                    writer.write(wire.frame(wire.CHUNK, chunk))
                    await writer.drain()
            writer.write(wire.frame(wire.END))
        finally:
            shutil.rmtree(target, ignore_errors=True)
        for held_seq, frame in follower.held:
            if held_seq > seq:
                writer.write(frame)
        follower.held = []
        # ``acked`` stays where it was until the follower acks the snapshot, which it does
        # once it has installed and synced it: until then its store is still the old one,
        # and admitting it to the in-sync set would let it win an election without
        # batches confirmed meanwhile.
        follower.streaming = True
        await writer.drain()
