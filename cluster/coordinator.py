"""The coordinator: who leads, since when (the epoch), and which nodes are in sync.

Theory of operation
-------------------
etcd is the cluster's only consensus. Each node holds one lease (``lease_ttl``), kept alive
every third of its TTL; the leader key ``/<cluster>/leader`` is bound to the leader's lease,
so it vanishes when the leader stops renewing it (dies, pauses, loses etcd). A node wins
by one transaction: the key must not exist (``create_revision == 0``) and the node must be
in the in-sync set (``/<cluster>/isr/<node> == "in"``), or, for a brand new cluster, the
set must never have been started (``/<cluster>/initialized`` absent). The epoch is the
leader key's ``create_revision``: it grows with every win, so it orders leaderships and
fences a deposed leader's writes. The in-sync set is written only by the leader, in
transactions that compare the leader key's create revision with its own epoch.

Messages never go through etcd: a node makes a few requests per failover or change of the
in-sync set, and one keepalive per ``lease_ttl / 3``.

``EtcdCoordinator`` speaks etcd's v3 HTTP/JSON gateway (``/v3/kv/txn``, ``/v3/lease/*``)
with aiohttp, already a dependency, as LavinMQ does (its ``etcd.cr``). The gRPC clients
(aetcd, etcd3aio) each have one maintainer and pull in grpcio and protobuf, whose major
versions broke the older ``etcd3``; the gateway is a stable, documented API needing none.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

log = logging.getLogger(__name__)

# A request to etcd that takes longer is abandoned (and retried on another endpoint).
REQUEST_TIMEOUT = 2.0


class CoordinatorError(Exception):
    """etcd cannot be reached or refused a request; the message says which."""


@dataclass(frozen=True)
class Leadership:
    """The leader key: who leads, where to reach it, and its epoch."""

    node: str
    amqp: str  # host:port of its AMQP listener (the followers' proxy target)
    replication: str  # host:port its followers connect to
    epoch: int
    management: str = ""  # host:port of its management API ("" if not listening)


class Coordinator(Protocol):
    """What a cluster node needs from its coordinator (etcd here)."""

    def lease_fresh(self) -> bool:
        """The lease was renewed less than its TTL ago (measured from the renewal's request):
        a leader may confirm only while this holds."""

    async def start(self) -> None:
        """Grant this node's lease and keep it alive; raises CoordinatorError."""

    async def close(self) -> None: ...

    async def leader(self) -> Leadership | None: ...

    async def campaign(self, node: str, addresses: dict[str, str]) -> int | None:
        """Try to become leader, announcing ``addresses`` (``amqp``, ``replication``,
        ``management``): the new epoch, or None if another leads or we may not."""

    async def in_sync(self) -> set[str]: ...

    async def offer(self, node: str, last_seq: int) -> None:
        """Say, while the leader key is vacant, which batch ``node`` holds last."""

    async def offers(self) -> dict[str, int]:
        """The candidates' last batches (bound to their leases: the dead offer nothing)."""

    async def set_in_sync(self, node: str, present: bool, epoch: int) -> bool:
        """Add or remove ``node``; false if ``epoch`` no longer leads (the write is refused)."""

    async def secret(self) -> bytes:
        """The cluster's replication secret, created by the first node that asks."""

    async def announce(self, node: str, info: dict[str, str]) -> None:
        """Record ``node`` as a member (for good) and as running (while its lease lives)."""

    async def members(self) -> dict[str, dict[str, str]]:
        """Every node that ever joined, with ``running`` and its announced addresses."""


def _b64(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def _prefix_end(prefix: str) -> str:
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return _b64(bytes(raw))


class EtcdCoordinator:
    def __init__(self, endpoints: tuple[str, ...], cluster: str, ttl: int) -> None:
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self.prefix = f"/{cluster}/"
        self.ttl = ttl
        self.lease = 0
        self._renewed = 0.0  # monotonic time the last successful renewal was *sent*
        self._session: aiohttp.ClientSession | None = None
        self._keepalive: asyncio.Task[None] | None = None
        self.on_lease_lost: list[Any] = []

    def _key(self, name: str) -> str:
        return _b64(self.prefix + name)

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self._session is not None
        problem = ""
        for endpoint in list(self.endpoints):
            try:
                async with self._session.post(endpoint + path, json=body) as response:
                    text = await response.text()
                    if response.status != 200:
                        problem = f"{endpoint}{path}: HTTP {response.status} {text[:200]}"
                        continue
                    result: dict[str, Any] = json.loads(text)
                    return result
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                problem = f"{endpoint}: {exc or type(exc).__name__}"
                # Try the next endpoint first next time.
                self.endpoints.append(self.endpoints.pop(0))
        raise CoordinatorError(f"cannot reach etcd ({problem})")

    def lease_fresh(self) -> bool:
        return self.lease != 0 and time.monotonic() - self._renewed < self.ttl

    async def connect(self) -> None:
        """Open the HTTP session only (a reader such as ``leveret ctl cluster_status``)."""
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT))

    async def start(self) -> None:
        await self.connect()
        sent = time.monotonic()
        granted = await self._post("/v3/lease/grant", {"TTL": self.ttl})
        self.lease = int(granted["ID"])
        self._renewed = sent
        self._keepalive = asyncio.create_task(self._keep_alive())

    async def _keep_alive(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            sent = time.monotonic()
            try:
                answer = await self._post("/v3/lease/keepalive", {"ID": str(self.lease)})
            except CoordinatorError as exc:
                log.warning("lease keepalive failed: %s", exc)
                continue
            if int(answer.get("result", {}).get("TTL", 0)) <= 0:
                log.error("lease %x expired", self.lease)
                self.lease = 0
                for callback in self.on_lease_lost:
                    callback()
                return
            self._renewed = sent

    async def close(self) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
        if self._session is not None:
            if self.lease:
                try:
                    await self._post("/v3/lease/revoke", {"ID": str(self.lease)})
                except CoordinatorError:
                    pass
            await self._session.close()

    async def _get(self, name: str) -> dict[str, Any] | None:
        answer = await self._post("/v3/kv/range", {"key": self._key(name)})
        kvs: list[dict[str, Any]] = answer.get("kvs", [])
        return kvs[0] if kvs else None

    async def leader(self) -> Leadership | None:
        kv = await self._get("leader")
        if kv is None:
            return None
        value = json.loads(_unb64(kv["value"]))
        return Leadership(value["node"], value["amqp"], value["replication"],
                          int(kv["create_revision"]), value.get("management", ""))

    async def campaign(self, node: str, addresses: dict[str, str]) -> int | None:
        value = _b64(json.dumps({"node": node, **addresses}))
        put = {"request_put": {"key": self._key("leader"), "value": value,
                               "lease": str(self.lease)}}
        absent = {"key": self._key("leader"), "result": "EQUAL", "target": "CREATE",
                  "create_revision": "0"}
        in_sync = {"key": self._key(f"isr/{node}"), "result": "EQUAL", "target": "VALUE",
                   "value": _b64("in")}
        won = await self._post("/v3/kv/txn", {"compare": [absent, in_sync], "success": [put]})
        if not won.get("succeeded"):
            fresh = {"key": self._key("initialized"), "result": "EQUAL", "target": "CREATE",
                     "create_revision": "0"}
            mark = {"request_put": {"key": self._key("initialized"), "value": _b64(node)}}
            join = {"request_put": {"key": self._key(f"isr/{node}"), "value": _b64("in")}}
            won = await self._post("/v3/kv/txn", {"compare": [absent, fresh],
                                                  "success": [put, mark, join]})
        if not won.get("succeeded"):
            return None
        return int(won["header"]["revision"])

    async def _under(self, folder: str) -> dict[str, bytes]:
        start = self.prefix + folder + "/"
        answer = await self._post("/v3/kv/range", {"key": _b64(start),
                                                   "range_end": _prefix_end(start)})
        return {_unb64(kv["key"]).decode()[len(start):]: _unb64(kv.get("value", ""))
                for kv in answer.get("kvs", [])}

    async def in_sync(self) -> set[str]:
        return set(await self._under("isr"))

    async def offer(self, node: str, last_seq: int) -> None:
        await self._post("/v3/kv/put", {"key": self._key(f"candidates/{node}"),
                                        "value": _b64(str(last_seq)), "lease": str(self.lease)})

    async def offers(self) -> dict[str, int]:
        return {node: int(raw) for node, raw in (await self._under("candidates")).items()}

    async def announce(self, node: str, info: dict[str, str]) -> None:
        value = _b64(json.dumps(info))
        await self._post("/v3/kv/txn", {"compare": [], "success": [
            {"request_put": {"key": self._key(f"nodes/{node}"), "value": value}},
            {"request_put": {"key": self._key(f"running/{node}"), "value": value,
                             "lease": str(self.lease)}}]})

    async def members(self) -> dict[str, dict[str, str]]:
        known = await self._under("nodes")
        running = await self._under("running")
        out: dict[str, dict[str, str]] = {}
        for node, raw in sorted(known.items()):
            info = json.loads(raw) if raw else {}
            out[node] = {**info, "running": "true" if node in running else "false"}
        return out

    async def set_in_sync(self, node: str, present: bool, epoch: int) -> bool:
        fence = {"key": self._key("leader"), "result": "EQUAL", "target": "CREATE",
                 "create_revision": str(epoch)}
        op = ({"request_put": {"key": self._key(f"isr/{node}"), "value": _b64("in")}}
              if present else {"request_delete_range": {"key": self._key(f"isr/{node}")}})
        answer = await self._post("/v3/kv/txn", {"compare": [fence], "success": [op]})
        return bool(answer.get("succeeded"))

    async def secret(self) -> bytes:
        fresh = _b64(secrets.token_hex(32))
        absent = {"key": self._key("secret"), "result": "EQUAL", "target": "CREATE",
                  "create_revision": "0"}
        await self._post("/v3/kv/txn", {"compare": [absent], "success": [
            {"request_put": {"key": self._key("secret"), "value": fresh}}]})
        kv = await self._get("secret")
        if kv is None:
            raise CoordinatorError("the replication secret vanished from etcd")
        return _unb64(kv["value"])
