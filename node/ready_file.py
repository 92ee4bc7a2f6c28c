"""The ready file (``leveret serve --ready-file PATH``): the bound ports, once serving.

A supervisor, a test fixture or a script that starts Leveret on port 0 needs to know
when it is up and which ports it got. Reading them out of the log ties the caller to
the wording of log lines; the ready file is a contract instead. It is written once,
after every listener (AMQP, AMQPS, management HTTP/HTTPS, Prometheus) and the control
socket are up, so a caller that sees it can connect and run ``leveret ctl`` at once.

It is written to a temporary file in the same directory and renamed over PATH, so a
reader sees either no file or the whole document, never a half-written one. A stale
file from an earlier run is removed before the broker listens, and the file is removed
again at a clean stop. RabbitMQ has no such file (its readiness is ``rabbitmqctl
await_startup``); systemd's ``sd_notify`` is the same idea for one supervisor.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol, TypedDict

# How often ``wait`` looks for the file: a start takes a few hundred milliseconds idle.
POLL_SECONDS = 0.02
# broker.listeners' protocol names (RabbitMQ's, as in /api/overview) -> the file's keys.
PROTOCOL_KEYS = {
    "amqp": "amqp",
    "amqp/ssl": "amqps",
    "http": "management",
    "https": "management_tls",
    "http/prometheus": "prometheus",
}


class ReadyDocument(TypedDict):
    """The file's JSON: each listener's port (the first one bound, when the broker
    listens on several interfaces), None for a listener that is not running."""

    amqp: int | None
    amqps: int | None
    management: int | None
    management_tls: int | None
    prometheus: int | None
    pid: int
    node: str


def ready_document(listeners: Iterable[tuple[str, str, int]], pid: int,
                   node: str) -> ReadyDocument:
    """The document for ``listeners`` as the broker records them: (protocol, host, port)."""
    ports: dict[str, int | None] = dict.fromkeys(PROTOCOL_KEYS.values())
    for protocol, _host, port in listeners:
        key = PROTOCOL_KEYS.get(protocol)
        if key is not None and ports[key] is None:
            ports[key] = port
    return ReadyDocument(amqp=ports["amqp"], amqps=ports["amqps"],
                         management=ports["management"],
                         management_tls=ports["management_tls"],
                         prometheus=ports["prometheus"], pid=pid, node=node)


def write(path: Path, document: ReadyDocument) -> None:
    """Write ``document`` to ``path`` atomically: a temporary file beside it, renamed."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(document, out)
            out.write("\n")
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def remove(path: Path) -> None:
    """Remove the file (a stale one before start, ours at stop); absent is fine."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


class Started(Protocol):
    """The broker process as its starter holds it (a ``subprocess.Popen``)."""

    pid: int

    def poll(self) -> int | None: ...


def wait(path: Path, process: Started, timeout: float) -> ReadyDocument | None:
    """For whoever started the broker: the document once ``path`` holds ``process``'s
    (not a killed earlier broker's), or None when the process exits first or after
    ``timeout`` seconds. The rename in ``write`` means a file that exists is whole."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            document: ReadyDocument = json.loads(path.read_text())
            if document["pid"] == process.pid:
                return document
        except FileNotFoundError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            return None
        time.sleep(POLL_SECONDS)
