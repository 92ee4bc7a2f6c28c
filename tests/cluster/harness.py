"""One etcd and three Leveret nodes on 127.0.0.1, and a Jepsen-style confirmed workload.

Shared by ``tests/cluster`` and ``bench/cluster_failover.py``. The workload publishes
unique ids with publisher confirms through any node (pika, one publish in flight, as an
application that re-publishes what was not confirmed), logging each id as attempted and,
once ``basic.ack`` arrives, confirmed; ``drain`` consumes the queue with manual acks;
``check`` compares: lost (confirmed, never received), unexpected (received, never
published), duplicates (received twice: at-least-once after a failover).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from base64 import b64decode, b64encode
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pika
import pika.exceptions

# Generous: the machine may be busy; a node that exits fails the wait at once.
START_TIMEOUT = 60.0
# The shortest lease etcd grants: failovers take about this long.
LEASE_TTL = 2
# Clients' heartbeat (s): how they notice a leader that is paused rather than gone.
HEARTBEAT = 1


# Ports are chosen below Linux's ephemeral range (32768-60999): a port picked there and
# released could be taken as the local port of any outgoing connection before a node
# (re)binds it, as happened in a long failover run.
PORT_RANGE = (20000, 32000)
_rng = random.Random()
T = TypeVar("T")


def free_port() -> int:
    while True:
        port = _rng.randrange(*PORT_RANGE)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


def wait_for(predicate: Callable[[], T], what: str, timeout: float = 60.0) -> T:
    """Poll ``predicate`` until it returns something true, and return that; the deadline
    is generous (a busy machine), never a budget the test measures."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def etcd_binary() -> str | None:
    return shutil.which("etcd")


@dataclass
class Etcd:
    directory: Path
    client_port: int = field(default_factory=free_port)
    peer_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    # A member of a multi-member etcd: its name and every member's ``name=peer URL``.
    name: str = "t"
    initial_cluster: str = ""

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def start(self) -> Etcd:
        return self.launch().wait()

    def launch(self) -> Etcd:
        binary = etcd_binary()
        assert binary is not None
        peer = self.peer_url
        self._log = open(self.directory / f"etcd-{self.name}.log", "ab")
        self.proc = subprocess.Popen(
            [binary, "--name", self.name, "--data-dir", str(self.directory / f"etcd-{self.name}"),
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", self.initial_cluster or f"{self.name}={peer}",
             "--unsafe-no-fsync"],
            stdout=self._log, stderr=subprocess.STDOUT)
        return self

    def wait(self) -> Etcd:
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "etcd exited"
            try:
                self.post("/v3/kv/range", {"key": b64encode(b"/").decode()})
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("etcd did not start")

    def post(self, path: str, body: dict[str, object]) -> dict[str, object]:
        request = urllib.request.Request(self.url + path, json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as response:
            result: dict[str, object] = json.loads(response.read())
            return result

    def leader(self, cluster: str) -> str | None:
        answer = self.post("/v3/kv/range", {"key": b64encode(f"/{cluster}/leader".encode())
                                            .decode()})
        kvs = answer.get("kvs")
        if not isinstance(kvs, list) or not kvs:
            return None
        return str(json.loads(b64decode(kvs[0]["value"]))["node"])

    def in_sync(self, cluster: str) -> set[str]:
        start = f"/{cluster}/isr/".encode()
        end = start[:-1] + bytes([start[-1] + 1])
        answer = self.post("/v3/kv/range", {"key": b64encode(start).decode(),
                                            "range_end": b64encode(end).decode()})
        kvs = answer.get("kvs") or []
        assert isinstance(kvs, list)
        return {b64decode(kv["key"])[len(start):].decode() for kv in kvs}

    def kill(self) -> None:
        """``kill -9``: the process is gone, its data dir stays."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._log.close()
            self.proc = None

    stop = kill


class EtcdGroup:
    """A three-member etcd (raft inside it): nodes are given every member's URL, and the
    test's own reads go to any live member."""

    def __init__(self, directory: Path, size: int = 3) -> None:
        self.members = [Etcd(directory, name=f"e{i}") for i in range(size)]
        everyone = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        for member in self.members:
            member.initial_cluster = everyone

    @property
    def url(self) -> str:
        return ",".join(m.url for m in self.members)

    def start(self) -> EtcdGroup:
        for member in self.members:  # a member serves once a quorum of them runs
            member.launch()
        for member in self.members:
            member.wait()
        return self

    def raft_leader(self, timeout: float = START_TIMEOUT) -> Etcd:
        """The live member leading etcd's raft (waits while the members elect one)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ids: dict[str, Etcd] = {}
            leaders: set[str] = set()
            for member in self._live():
                try:
                    status = member.post("/v3/maintenance/status", {})
                except OSError:
                    continue
                header = status.get("header")
                assert isinstance(header, dict)
                ids[str(header.get("member_id"))] = member
                leaders.add(str(status.get("leader", "")))
            if len(leaders) == 1 and (leader := leaders.pop()) in ids:
                return ids[leader]
            time.sleep(0.05)
        raise AssertionError("the etcd members elected no leader")

    def _live(self) -> list[Etcd]:
        return [m for m in self.members if m.proc is not None and m.proc.poll() is None]

    def _any(self, read: Callable[[Etcd], T]) -> T:
        problem: Exception | None = None
        for member in self._live():
            try:
                return read(member)
            except OSError as exc:
                problem = exc
        raise AssertionError(f"no etcd member answers: {problem}")

    def leader(self, cluster: str) -> str | None:
        return self._any(lambda m: m.leader(cluster))

    def in_sync(self, cluster: str) -> set[str]:
        return self._any(lambda m: m.in_sync(cluster))

    def stop(self) -> None:
        for member in self.members:
            member.stop()


@dataclass
class Node:
    name: str
    directory: Path
    etcd: str
    cluster: str
    lease_ttl: int = LEASE_TTL
    port: int = field(default_factory=free_port)
    replication_port: int = field(default_factory=free_port)
    management_port: int = field(default_factory=free_port)
    prometheus_port: int = field(default_factory=free_port)
    extra: list[str] = field(default_factory=list)  # more `leveret serve` flags
    env: dict[str, str] = field(default_factory=dict)  # more environment (test hooks)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Node:
        self._log = open(self.directory / f"{self.name}.log", "ab")
        # Without an etcd URL: a single node, as Leveret runs unclustered (benchmarks).
        clustering = ["--node-name", self.name, "--etcd", self.etcd, "--cluster-name",
                      self.cluster, "--replication-port", str(self.replication_port),
                      "--lease-ttl", str(self.lease_ttl)] if self.etcd else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "leveret", "serve", *clustering, "--host", "127.0.0.1",
             "--port", str(self.port), "--management-host", "127.0.0.1",
             "--management-port", str(self.management_port),
             "--prometheus-port", str(self.prometheus_port), "--management-tls-port", "0",
             "--data-dir", str(self.directory / self.name), *self.extra],
            stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, **self.env})
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:  # a follower's proxy or the leader's listener
            assert self.proc.poll() is None, f"{self.name} exited:\n{self.log_text()}"
            try:
                socket.create_connection(("127.0.0.1", self.port), 1).close()
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not start:\n{self.log_text()}")

    def log_text(self) -> str:
        return (self.directory / f"{self.name}.log").read_text(errors="replace")

    def kill(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self._log.close()
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(15)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
            self.kill()


@dataclass
class Cluster:
    directory: Path
    etcd: Etcd | EtcdGroup
    name: str = "t"
    lease_ttl: int = LEASE_TTL
    nodes: dict[str, Node] = field(default_factory=dict)

    def start(self, count: int = 3, extra: list[str] | None = None) -> Cluster:
        for i in range(1, count + 1):
            node = Node(f"n{i}", self.directory, self.etcd.url, self.name, self.lease_ttl,
                        extra=list(extra or []))
            self.nodes[node.name] = node.start()
        return self

    def ports(self) -> list[int]:
        return [n.port for n in self.nodes.values()]

    def wait_leader(self, timeout: float = START_TIMEOUT, other_than: str | None = None) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leader = self.etcd.leader(self.name)
            if leader is not None and leader != other_than:
                return leader
            time.sleep(0.05)
        raise AssertionError("no leader elected")

    def wait_in_sync(self, count: int, timeout: float = START_TIMEOUT) -> set[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            members = self.etcd.in_sync(self.name)
            if len(members) >= count:
                return members
            time.sleep(0.05)
        raise AssertionError(f"in-sync set stayed {self.etcd.in_sync(self.name)}")

    def stop(self) -> None:
        for node in self.nodes.values():
            node.kill()


class Publisher:
    """Publishes ids with confirms through any of ``ports``, re-publishing the unconfirmed."""

    def __init__(self, ports: list[int], queue: str, prefix: str) -> None:
        self.ports = ports
        self.queue = queue
        self.prefix = prefix
        self.attempted: set[str] = set()
        # (id, monotonic time of its ack); and when the publish that got it was sent
        self.confirmed: list[tuple[str, float]] = []
        self.sent: dict[str, float] = {}
        self.next = 0
        self.stop = threading.Event()
        self._turn = 0
        self._connection: pika.BlockingConnection | None = None
        self._channel: pika.adapters.blocking_connection.BlockingChannel | None = None

    def _connect(self) -> pika.adapters.blocking_connection.BlockingChannel:
        while True:
            port = self.ports[self._turn % len(self.ports)]
            self._turn += 1
            try:
                params = pika.ConnectionParameters(
                    "127.0.0.1", port, socket_timeout=3, blocked_connection_timeout=10,
                    connection_attempts=1, heartbeat=HEARTBEAT)
                self._connection = pika.BlockingConnection(params)
                channel = self._connection.channel()
                channel.confirm_delivery()
                channel.queue_declare(self.queue, durable=True)
                self._channel = channel
                return channel
            except Exception:
                self._close()
                if self.stop.is_set():
                    raise
                time.sleep(0.2)

    def close(self) -> None:
        self._close()

    def _close(self) -> None:
        if self._connection is not None:
            try:
                self._connection.close()
            except Exception:
                pass
        self._connection = self._channel = None

    def publish_one(self) -> None:
        """Publish the next id until it is confirmed (re-publishing after a failure)."""
        msg_id = f"{self.prefix}-{self.next}"
        self.next += 1
        while True:
            channel = self._channel or self._connect()
            self.attempted.add(msg_id)
            self.sent[msg_id] = time.monotonic()
            try:
                channel.basic_publish("", self.queue, msg_id.encode(),
                                      pika.BasicProperties(delivery_mode=2), mandatory=True)
                self.confirmed.append((msg_id, time.monotonic()))
                return
            except Exception:
                self._close()
                time.sleep(0.2)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.publish_one()
        finally:
            self._close()


class Consumer:
    """Consumes ``queue`` with manual acks through any of ``ports``, reconnecting on failure;
    logs every id it acked (acked after logging: a lost ack means a redelivery, a
    duplicate, never a loss)."""

    def __init__(self, ports: list[int], queue: str) -> None:
        self.ports = ports
        self.queue = queue
        self.received: list[str] = []
        self.stop = threading.Event()
        self._turn = 0

    def run(self) -> None:
        while not self.stop.is_set():
            port = self.ports[self._turn % len(self.ports)]
            self._turn += 1
            try:
                connection = pika.BlockingConnection(pika.ConnectionParameters(
                    "127.0.0.1", port, socket_timeout=3, connection_attempts=1,
                    heartbeat=HEARTBEAT))
            except Exception:
                time.sleep(0.2)
                continue
            try:
                channel = connection.channel()
                channel.queue_declare(self.queue, durable=True)
                channel.basic_qos(prefetch_count=50)
                for method, _, body in channel.consume(self.queue, inactivity_timeout=0.2):
                    if self.stop.is_set():
                        break
                    if method is None:
                        continue
                    self.received.append(body.decode())
                    channel.basic_ack(method.delivery_tag)
            except Exception:
                time.sleep(0.2)
            finally:
                try:
                    connection.close()
                except Exception:
                    pass


def drain(ports: list[int], queue: str, timeout: float = 60.0) -> list[str]:
    """Every message left in ``queue``, consumed with manual acks through any node."""
    deadline = time.monotonic() + timeout
    received: list[str] = []
    while time.monotonic() < deadline:
        for port in ports:
            try:
                connection = pika.BlockingConnection(pika.ConnectionParameters(
                    "127.0.0.1", port, socket_timeout=3, connection_attempts=1))
            except Exception:
                continue
            try:
                channel = connection.channel()
                channel.queue_declare(queue, durable=True)
                while True:
                    method, _, body = channel.basic_get(queue)
                    if method is None:
                        return received
                    received.append(body.decode())
                    channel.basic_ack(method.delivery_tag)
            except Exception:
                pass
            finally:
                try:
                    connection.close()
                except Exception:
                    pass
        time.sleep(0.2)
    raise AssertionError("could not drain the queue")


@dataclass
class Verdict:
    lost: set[str]
    unexpected: set[str]
    duplicates: int


def check(attempted: set[str], confirmed: set[str], received: list[str]) -> Verdict:
    seen = set(received)
    return Verdict(confirmed - seen, seen - attempted, len(received) - len(seen))
