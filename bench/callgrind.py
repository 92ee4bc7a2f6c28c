"""A command's instructions under ``valgrind --tool=callgrind``, for the ``*_icount.py`` benches.

Each of them runs a workload for N and for 2N messages and divides the difference by N, so
start-up and shutdown cancel out; this is the one place that runs a command under callgrind
and reads the count back. The count is the ``summary:`` line of callgrind's output file: the
instructions of every thread of the process (callgrind runs one at a time) and of none of
its children (``--trace-children=no``). ``PYTHONHASHSEED`` is 0 unless the caller's
environment sets it: the same dict layouts from run to run.

``lmdb_capped`` puts a ``sitecustomize`` before the caller's ``PYTHONPATH`` that caps LMDB's
map: LMDB reserves a 1 TiB map by default, and valgrind's address space is smaller. Both
builds being compared get the same cap (the transient path never maps it).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

SUMMARY_RE = re.compile(rb"^summary: (\d+)", re.MULTILINE)
LMDB_CAP = """\
import lmdb
_open = lmdb.open
def _capped(path, *args, **kw):
    kw["map_size"] = min(kw.get("map_size", 1 << 30), 1 << 34)
    return _open(path, *args, **kw)
lmdb.open = _capped
"""
# A server stopped by SIGTERM flushes and exits; under callgrind, that takes a while.
STOP_TIMEOUT = 600.0


def lmdb_capped(out_dir: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with the LMDB cap first on ``PYTHONPATH``."""
    base = dict(os.environ if env is None else env)
    shim = out_dir / "shim"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(LMDB_CAP)
    base["PYTHONPATH"] = os.pathsep.join([str(shim), *filter(None, [base.get("PYTHONPATH")])])
    return base


def callgrind_instructions(
    command: list[str], out_file: Path, *, env: Mapping[str, str] | None = None,
    cwd: Path | None = None, stderr: IO[bytes] | None = None,
    while_running: Callable[[subprocess.Popen[bytes]], None] | None = None,
) -> int:
    """Instructions ``command`` executes under callgrind, its output kept in ``out_file``.

    Without ``while_running`` the command runs to its end, and a failure raises with the
    tail of its stderr. With it, the command is a server: ``while_running(process)`` drives
    it, then SIGTERM stops it (also when ``while_running`` raises) and its exit is awaited.
    ``stderr``: where the command's stderr goes (default: kept for the error message, or
    dropped for a server).
    """
    run_env = dict(os.environ if env is None else env)
    run_env.setdefault("PYTHONHASHSEED", "0")
    # A server's stderr nobody reads would fill its pipe and stall it: dropped instead.
    err_to: IO[bytes] | int = stderr if stderr is not None else (
        subprocess.PIPE if while_running is None else subprocess.DEVNULL)
    process = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}",
         "--dump-instr=no", "--trace-children=no", *command],
        stdout=subprocess.DEVNULL, stderr=err_to, cwd=cwd, env=run_env,
        start_new_session=while_running is not None)
    if while_running is None:
        _, err = process.communicate()
        if process.returncode:
            tail = (err or b"").decode(errors="replace")[-2000:]
            raise SystemExit(f"{command[:3]} exited with {process.returncode}:\n{tail}")
    else:
        try:
            while_running(process)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=STOP_TIMEOUT)
    match = SUMMARY_RE.search(out_file.read_bytes())
    if match is None:
        raise SystemExit(f"no 'summary:' line in {out_file}")
    return int(match.group(1))
