"""Three private RabbitMQ nodes clustered on this machine, for comparison benchmarks.

    with RabbitCluster(3) as rabbit:      # lq1@localhost, lq2@localhost, lq3@localhost
        port = rabbit.ports[0]            # AMQP port of the first node
        rabbit.members("q")               # a quorum queue's members, from rabbitmqctl

Each node gets its own ``RABBITMQ_NODENAME``, AMQP and distribution ports, and its data
and logs under one temporary directory; no plugins (no management listener, no Prometheus
port); they share the running epmd and the ``rabbitmq`` user's Erlang cookie (started as
that user when run as root, as ``bench/rabbitmq.sh`` does). Nodes 2 and 3 join the first
(``stop_app``, ``join_cluster``, ``start_app``). Leaving the ``with`` block (also on an
exception or Ctrl-C) stops every node and deletes the directory. The machine's own
RabbitMQ (``rabbit@<host>``, ports 5672/15672/15692) is never addressed: every command
names one of these nodes with ``-n``.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

# Ports as the cluster tests pick them (below Linux's ephemeral range).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "cluster"))
from harness import free_port

RABBIT_BIN = Path("/usr/lib/rabbitmq/bin")
START_TIMEOUT = 180.0  # seconds for a node to answer AMQP (a loaded 2-core VM is slow)
NODE_PREFIX = "lq"


def available() -> bool:
    return (RABBIT_BIN / "rabbitmq-server").exists()


def _amqp_ready(port: int) -> bool:
    """A real AMQP answer (Connection.Start), not just an open port."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.settimeout(2)
            sock.sendall(b"AMQP\x00\x00\x09\x01")
            return sock.recv(1) == b"\x01"
    except OSError:
        return False


class RabbitNode:
    def __init__(self, index: int, directory: Path, plugins_file: Path) -> None:
        self.name = f"{NODE_PREFIX}{index}@localhost"
        self.port = free_port()
        self.dist_port = free_port()
        self.env = {
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(directory / "mnesia"),
            "RABBITMQ_LOG_BASE": str(directory / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(plugins_file),
            "RABBITMQ_CONFIG_FILE": str(directory / f"lq{index}"),  # none: defaults
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(directory / f"lq{index}-advanced.config"),
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The node's start script: its process tree holds the Erlang VM, for its CPU."""
        return self.proc.pid if self.proc is not None else None


class RabbitCluster:
    def __init__(self, size: int = 3) -> None:
        self.size = size
        self.directory = Path(tempfile.mkdtemp(prefix="leveret-rabbit-nodes-"))
        plugins = self.directory / "enabled_plugins"
        plugins.write_text("[].\n")
        self.nodes = [RabbitNode(i, self.directory, plugins) for i in range(1, size + 1)]
        self._user = self._as_rabbitmq()

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    @staticmethod
    def _as_rabbitmq() -> tuple[list[str], dict[str, str]]:
        """Run as the ``rabbitmq`` user (its cookie, its file ownership) when we are root."""
        if os.geteuid() != 0:
            return [], {"HOME": os.environ.get("HOME", "/tmp")}
        home = pwd.getpwnam("rabbitmq").pw_dir
        return (["setpriv", "--reuid=rabbitmq", "--regid=rabbitmq", "--init-groups"],
                {"HOME": home})

    def _command(self, tool: str, *args: str) -> list[str]:
        return [*self._user[0], str(RABBIT_BIN / tool), *args]

    def _env(self, node: RabbitNode) -> dict[str, str]:
        return {**os.environ, **self._user[1], **node.env}

    def ctl(self, node: RabbitNode, *args: str, tool: str = "rabbitmqctl") -> str:
        done = subprocess.run(self._command(tool, "-n", node.name, *args),
                              env=self._env(node), capture_output=True, text=True,
                              timeout=120, cwd=self.directory)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} -n {node.name} {' '.join(args)}: "
                               f"{done.stdout}{done.stderr}")
        return done.stdout

    def __enter__(self) -> RabbitCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.directory, "rabbitmq", "rabbitmq")
        for node in self.nodes:
            node.proc = subprocess.Popen(
                self._command("rabbitmq-server"), env=self._env(node), cwd=self.directory,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        for node in self.nodes:
            self._wait_ready(node)
        first = self.nodes[0]
        for node in self.nodes[1:]:
            self.ctl(node, "stop_app")
            self.ctl(node, "join_cluster", first.name)
            self.ctl(node, "start_app")
            self._wait_ready(node)
        running = self.ctl(first, "cluster_status", "--formatter", "json")
        missing = [n.name for n in self.nodes if n.name not in running]
        if missing:
            raise RuntimeError(f"nodes not clustered: {missing}: {running}")

    def _wait_ready(self, node: RabbitNode) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not _amqp_ready(node.port):
            assert node.proc is not None
            if node.proc.poll() is not None:
                raise RuntimeError(f"{node.name} exited ({node.proc.returncode}); "
                                   f"logs in {self.directory / 'log'}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{node.name} did not answer AMQP on {node.port}")
            time.sleep(0.2)

    def members(self, queue: str) -> list[str]:
        """The members of quorum queue ``queue`` (declared on the first node)."""
        out = self.ctl(self.nodes[0], "list_queues", "name", "members", "--formatter",
                       "json", "--quiet")
        for row in json.loads(out):
            if row.get("name") == queue:
                return [str(m) for m in row.get("members", [])]
        return []

    def stop(self) -> None:
        """Stop every node (politely, then by signal) and delete their files."""
        for node in reversed(self.nodes):
            if node.proc is None or node.proc.poll() is not None:
                continue
            try:
                self.ctl(node, "stop")
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
            try:
                node.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(node.proc.pid, signal.SIGKILL)
                node.proc.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)
