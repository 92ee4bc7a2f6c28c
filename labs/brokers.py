"""The broker a lab stages: its own Leveret subprocess, or any broker by URL.

Theory of operation
-------------------
``OwnBroker`` runs ``python -m leveret serve --port 0`` on a temp data dir and
learns its port from its ready file (``--ready-file``, written once it serves).
A reader thread drains the broker's stderr (so a chatty log never blocks it)
and wakes waiters on each line: every wait in a lab is for a real event (the
ready file, a log line, a process exit, a confirm, a delivery), never a sleep.
``freeze`` (SIGSTOP) stops the broker dead, so whatever a client sends next
sits unread in a socket; ``kill`` (SIGKILL) is the crash; ``restart`` starts
a new process on the same data dir (on a new port: clients reconnect).

``RemoteBroker`` is ``--url``: any broker, RabbitMQ included. It cannot be
frozen, killed or restarted, so a part that needs that is skipped with a line
saying so (``Run.part(..., own_broker=True)``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from leveret.node import ready_file

# Written by persistence/group_commit.py at debug level, once per synced write.
COMMIT_RE = re.compile(r"group commit \d+: (\d+) confirm\(s\) released by one synced write")
# Python, the broker's imports and LMDB recovery; generous for a loaded CI machine.
START_TIMEOUT = 120.0
# Any single awaited event; a lab that waits longer has failed. Generous: a lab may run
# on a machine busy with other work, and each wait ends as soon as its event comes.
WAIT_TIMEOUT = 60.0


class NeedsOwnBroker(Exception):
    """A step must freeze, kill or restart the broker, and the lab was given --url."""


class LabFailed(Exception):
    """An awaited event did not come: the lab cannot go on."""


class OwnBroker:
    """A Leveret subprocess the lab starts, freezes, kills and restarts."""

    controlled = True

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []  # the whole log, across restarts
        self._changed = threading.Condition()
        self._reader: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        ready = self.data_dir.with_name(f"{self.data_dir.name}.ready.json")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1", "--port", "0",
             "--management-host", "127.0.0.1", "--management-port", "0", "--prometheus-port", "0",
             "--data-dir", str(self.data_dir), "--log-level", "debug",
             "--ready-file", str(ready)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, errors="replace")
        self._reader = threading.Thread(target=self._read, args=(self.proc,), daemon=True)
        self._reader.start()
        proc = self.proc
        document = ready_file.wait(ready, proc, START_TIMEOUT)
        if document is None or document["amqp"] is None:
            tail = "\n".join(self.lines[-20:])
            raise LabFailed(f"the broker did not start:\n{tail}")
        self.port = document["amqp"]

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:  # EOF: the process has exited (or closed stderr)
            self._changed.notify_all()

    def wait_for_line(self, pattern: re.Pattern[str], after: int, timeout: float = WAIT_TIMEOUT,
                      proc: subprocess.Popen[str] | None = None) -> str:
        """The first log line from index ``after`` on that matches ``pattern``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines[after:]:
                    if pattern.search(line):
                        return line
                after = len(self.lines)
                reader_done = self._reader is None or not self._reader.is_alive()
                left = deadline - time.monotonic()
                if reader_done or left <= 0:
                    tail = "\n".join(self.lines[-20:])
                    raise LabFailed(f"broker log never showed {pattern.pattern!r}:\n{tail}")
                self._changed.wait(left)

    def confirms_committed(self, after: int, at_least: int) -> tuple[int, int]:
        """(synced writes, confirms they released) in the log from ``after`` on, once the
        confirms reach ``at_least`` (the lab has received them, so their lines exist)."""
        deadline = time.monotonic() + WAIT_TIMEOUT
        with self._changed:
            while True:
                counts = [int(m.group(1)) for line in self.lines[after:]
                          if (m := COMMIT_RE.search(line))]
                if sum(counts) >= at_least:
                    return len(counts), sum(counts)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LabFailed(f"only {sum(counts)} of {at_least} confirms in the log")
                self._changed.wait(left)

    def freeze(self) -> None:
        """SIGSTOP, and wait until the kernel reports the process stopped."""
        os.kill(self.pid, signal.SIGSTOP)
        os.waitpid(self.pid, os.WUNTRACED)

    def kill(self) -> None:
        """SIGKILL (works on a frozen process too), and wait for the exit."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._join()

    def restart(self) -> None:
        self.start()

    def stop(self) -> None:
        """Clean stop at the end of the lab (SIGTERM; SIGKILL if it hangs)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.pid, signal.SIGCONT)  # in case a part left it frozen
        self.proc.terminate()
        try:
            self.proc.wait(WAIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._join()

    def _join(self) -> None:
        if self._reader is not None:
            self._reader.join(WAIT_TIMEOUT)

    def describe(self) -> str:
        return f"its own Leveret (python -m leveret serve), data dir {self.data_dir}"


@dataclass
class RemoteBroker:
    """``--url``: any broker; the lab cannot freeze, kill or restart it."""

    url: str
    controlled = False

    def freeze(self) -> None:
        raise NeedsOwnBroker("part freezes the broker (SIGSTOP)")

    def kill(self) -> None:
        raise NeedsOwnBroker("part kills the broker (SIGKILL)")

    def restart(self) -> None:
        raise NeedsOwnBroker("part restarts the broker on the same data dir")

    def stop(self) -> None:
        pass

    def describe(self) -> str:
        return f"--url {self.url} (steps that crash the broker are skipped)"


Broker = OwnBroker | RemoteBroker
