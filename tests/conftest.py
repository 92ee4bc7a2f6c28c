"""Shared fixtures: a real Leveret broker in a subprocess, reached over TCP.

``broker`` is one broker for the whole test session (tests use unique queue
names); ``make_broker`` starts a private one for tests that stop, kill or
restart it. The broker listens on 127.0.0.1 with port 0 and the fixture reads
the ports it got from its ready file (``--ready-file``, written once every
listener and the control socket are up), so parallel runs never collide.

``--quick`` (``.venv/bin/pytest --quick``) keeps the loop a developer runs between edits:
the unit tests without the property-based (hypothesis) ones, and the core integration
files of ``QUICK``. The full run stays the one CI and commits answer to (docs/testing.md).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from leveret.node import ready_file

# Property tests answer for what they find, not for how fast: hypothesis's default 200 ms
# deadline per example and its too-slow health check fail a correct test on a busy machine.
# Loaded here, before any test module builds its own ``@settings``, so those inherit it.
settings.register_profile("leveret", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("leveret")

# What ``--quick`` runs besides the unit tests: a node id prefix each (a file, or a test).
QUICK = (
    "tests/test_imports.py",
    "tests/integration/test_smoke.py",
    "tests/integration/test_ready_file.py",
    "tests/integration/test_pika_basic.py",
    "tests/integration/test_durability.py::test_durable_topology_and_persistent_messages",
    "tests/integration/test_durability.py::test_unacked_messages_come_back_redelivered",
    "tests/integration/test_management_api.py",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--quick", action="store_true",
                     help="the quick loop: unit tests (no hypothesis) and core integration tests")


def _quick(item: pytest.Item) -> bool:
    if item.nodeid.startswith("tests/unit/"):
        return not getattr(getattr(item, "obj", None), "is_hypothesis_test", False)
    return item.nodeid.startswith(QUICK)


# The longest files, first: spread over workers (.ci/test), one started last would run alone
# while the others sit idle. Each is a minute or more of one worker (wheels, a JVM, etcd).
LONGEST_FIRST = (
    "tests/test_packaging.py",
    "tests/integration/test_spark.py",
    "tests/cluster/",
    "tests/test_lint.py",
    "tests/integration/test_celery_worker.py",
    "tests/test_labs.py",
)


def _rank(item: pytest.Item) -> int:
    for rank, prefix in enumerate(LONGEST_FIRST):
        if item.nodeid.startswith(prefix):
            return rank
    return len(LONGEST_FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--quick"):
        items.sort(key=_rank)  # stable: every file keeps its own order
        return
    keep = [item for item in items if _quick(item)]
    config.hook.pytest_deselected(items=[item for item in items if not _quick(item)])
    items[:] = keep


# Generous: on a machine busy with other work a start (imports, store recovery) can take
# many times its idle few hundred milliseconds; a broker that exits fails at once.
START_TIMEOUT = 120.0


@dataclass
class BrokerProcess:
    data_dir: Path
    log_path: Path
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    host: str = "127.0.0.1"
    port: int = 0
    management_port: int = 0
    prometheus_port: int = 0
    tls_port: int | None = None  # the AMQPS and HTTPS ports, when a certificate is set
    management_tls_port: int | None = None
    # The command that runs the broker; the packaging test passes an installed `leveret`.
    command: list[str] = field(default_factory=lambda: [sys.executable, "-m", "leveret"])

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/%2F"

    @property
    def api_url(self) -> str:
        return f"http://{self.host}:{self.management_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.prometheus_port}"

    def start(self) -> BrokerProcess:
        self._log = open(self.log_path, "ab")
        ready = self.log_path.with_name(f"ready-{uuid.uuid4().hex[:8]}.json")
        env = {**os.environ, **self.env}
        self.proc = subprocess.Popen(
            [*self.command, "serve", "--host", "127.0.0.1", "--port", "0",
             "--management-host", "127.0.0.1", "--management-port", "0",
             "--prometheus-port", "0", "--management-tls-port", "0",
             "--data-dir", str(self.data_dir), "--log-level", "debug",
             "--ready-file", str(ready), *self.extra_args],
            stdout=self._log, stderr=subprocess.STDOUT, env=env,
        )
        ports = ready_file.wait(ready, self.proc, START_TIMEOUT)
        if ports is not None:
            ready.unlink()
            self.port, self.tls_port = ports["amqp"] or 0, ports["amqps"]
            self.management_port = ports["management"] or 0
            self.prometheus_port = ports["prometheus"] or 0
            self.management_tls_port = ports["management_tls"]
            return self
        self.stop(kill=True)
        raise RuntimeError(f"broker did not start:\n{self.log_text()}")

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, kill: bool = False, timeout: float = 15.0) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._log.close()
        self.proc = None
        return proc.returncode


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("broker")
    b = BrokerProcess(base / "data", base / "broker.log").start()
    yield b
    code = b.stop()
    # A broker that crashed during the session is a failure even if every test passed.
    assert code == 0, f"broker exited with {code}:\n{b.log_text()[-4000:]}"
    assert "Traceback" not in b.log_text(), b.log_text()[-4000:]


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator[object]:
    started: list[BrokerProcess] = []

    def factory(data_dir: Path | None = None, *args: str, **env: str) -> BrokerProcess:
        b = BrokerProcess(data_dir or tmp_path / "data", tmp_path / "broker.log", list(args), env)
        started.append(b)
        return b.start()

    yield factory
    for b in started:
        b.stop(kill=True)


@pytest.fixture
def qname() -> str:
    """A queue/exchange name unique to this test."""
    return f"test-{uuid.uuid4().hex[:12]}"
