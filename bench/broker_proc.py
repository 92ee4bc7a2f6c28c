"""Start a Leveret for a bench script: ``python -m leveret serve`` on free ports, ready-file.

Shared by the bench scripts that need one broker of this tree (this process's
interpreter and environment, so ``PYTHONPATH`` chooses the build). ``wrapper`` goes
before the interpreter's module (``["-m", "cProfile", "-o", path]`` profiles the broker;
it writes the profile when the broker exits on SIGINT).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from leveret.node import ready_file

START_TIMEOUT = 120  # seconds; a loaded 2-core machine starts slowly


def start_leveret(workdir: Path, *, wrapper: Sequence[str] = (),
                  extra: Sequence[str] = ()) -> tuple[subprocess.Popen[bytes], str,
                                                      dict[str, Any]]:
    """(process, AMQP URL for guest, the ready-file document with every port)."""
    ready = workdir / "ready.json"
    proc = subprocess.Popen(
        [sys.executable, *wrapper, "-m", "leveret", "serve", "--host", "127.0.0.1",
         "--port", "0", "--management-host", "127.0.0.1", "--management-port", "0",
         "--prometheus-port", "0", "--data-dir", str(workdir / "data"),
         "--ready-file", str(ready), *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    document = ready_file.wait(ready, proc, START_TIMEOUT)
    if document is None:
        proc.kill()
        raise SystemExit("the broker did not start")
    return proc, f"amqp://guest:guest@127.0.0.1:{document['amqp']}/%2F", document
