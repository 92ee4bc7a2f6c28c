"""``leveret serve --ready-file``: written once the broker serves, gone once it stopped.

(The ``broker`` fixtures learn their ports from it on every start; this checks what a
supervisor relies on besides: a stale file is not taken for the new one, the file goes
away at a clean stop, and a file that cannot be written stops the start in one line.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pika

START_TIMEOUT = 120.0  # a bound for a broken start, not a budget: the wait ends on a state


def _serve(tmp_path: Path, ready: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEVERET_")}
    return subprocess.Popen(
        [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1", "--port", "0",
         "--management-host", "127.0.0.1", "--management-port", "0", "--prometheus-port", "0",
         "--data-dir", str(tmp_path / "data"), "--ready-file", str(ready)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)


def test_ready_file_replaces_a_stale_one_and_goes_at_stop(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    ready.write_text(json.dumps({"amqp": 1, "pid": 1}))  # a crashed run's
    proc = _serve(tmp_path, ready)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        document = None
        while proc.poll() is None and time.monotonic() < deadline:
            if ready.exists():
                document = json.loads(ready.read_text())
                if document["pid"] == proc.pid:
                    break
            time.sleep(0.02)
        assert document is not None and document["pid"] == proc.pid, document
        assert document["node"].startswith("leveret@")
        assert document["amqps"] is None and document["management_tls"] is None
        with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", document["amqp"])):
            pass
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(START_TIMEOUT) == 0
        assert not ready.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()


def test_an_unwritable_ready_file_is_a_startup_error(tmp_path: Path) -> None:
    ready = tmp_path / "missing-dir" / "ready.json"
    proc = _serve(tmp_path, ready)
    _out, err = proc.communicate(timeout=START_TIMEOUT)
    assert proc.returncode == 1, err
    errors = [line for line in err.decode().splitlines() if line.startswith("leveret: error: ")]
    assert errors == [f"leveret: error: cannot write the ready file {ready}: "
                      "No such file or directory"], err
