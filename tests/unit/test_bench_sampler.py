"""The Spark bench's CPU sampler: what it reports is the pipeline's, by role.

``bench/cpu_sampler.py`` is not part of the package, but its figures go into the issue
notes; these check the parts that turn /proc into them. What the sampler costs is
measured, not asserted: ``bench/sampler_cost.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import cpu_sampler  # bench/ is beside tests/ in a checkout, not a package

if not Path("/proc/self/stat").exists():
    pytest.skip("the sampler reads Linux's /proc", allow_module_level=True)


def test_cpu_in_windows_counts_the_samples_inside_only() -> None:
    timeline = [(0.0, {"broker": 1.0}), (1.0, {"broker": 1.0}),
                (2.0, {"broker": 0.5, "JVM": 1.0}), (3.0, {"broker": 1.0}),
                (4.0, {"broker": 0.25})]
    # Each sample covers the second before it: only the one taken at 2.0 is inside.
    assert cpu_sampler.cpu_in_windows(timeline, [(1.5, 2.5)]) == {"broker": 0.5, "JVM": 1.0}
    assert cpu_sampler.cpu_in_windows(timeline, [(1.5, 2.5), (3.5, 4.5)]) == {
        "broker": 0.75, "JVM": 1.0}
    assert cpu_sampler.cpu_in_windows(timeline, []) == {}


# A bound for a state the test waits for, never a budget: each wait ends once it holds.
WAIT = 120.0


def _until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not done():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.01)


def _zombie(pid: int) -> bool:
    """Exited and not yet reaped: its CPU is still in /proc, its command line is gone."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2] == "Z"


def test_a_process_is_named_by_its_command_after_its_exec() -> None:
    """The JVM starts Spark's Python processes by fork (or ``jspawnhelper``) and exec: one
    seen in between shows a JVM's command line, and is named by what it runs after; its
    CPU is counted under that role."""
    # The shell's command line holds "pyspark", "$1.daemon" and "java", never
    # "pyspark.daemon"; it execs when the test says so (a line on its stdin).
    script = 'read go; exec "$0" -c "while True: pass" "$1.daemon"'
    child = subprocess.Popen(["sh", "-c", script, sys.executable, "pyspark", "java"],
                             stdin=subprocess.PIPE)
    assert child.stdin is not None
    try:
        table = cpu_sampler.ProcessTable()
        with cpu_sampler.CpuSampler(0.05) as cpu:
            assert cpu_sampler._role(table.descendants(os.getpid())[child.pid]) == "JVM"
            child.stdin.write(b"go\n")
            child.stdin.close()
            _until(lambda: cpu_sampler._role(table.descendants(os.getpid())[child.pid])
                   == "task workers (Python)", "exec'd")
            _until(lambda: (cpu_sampler._cpu_s(child.pid) or 0.0) > 0.35, "busy for 0.35 s")
        busy = cpu.by_role()
        assert busy.get("task workers (Python)", 0.0) > 0.3, busy
    finally:
        child.kill()
        child.wait()
    table.descendants(os.getpid())
    assert child.pid not in table.parent  # gone processes are forgotten


def test_a_process_that_exits_keeps_its_name() -> None:
    """A source runner exits with its query; unreaped, it has no command line left."""
    burn = ("import sys, time\nsys.stdin.readline()\n"
            "t = time.process_time()\nwhile time.process_time() - t < 0.4: pass")
    child = subprocess.Popen([sys.executable, "-c", burn, "python_streaming_source_runner"],
                             stdin=subprocess.PIPE)
    assert child.stdin is not None
    try:
        with cpu_sampler.CpuSampler(0.05) as cpu:
            # Seen (and named) while it runs: the first sample is taken as the sampler starts.
            assert cpu.role[child.pid] == "source driver (Python)"
            child.stdin.write(b"go\n")
            child.stdin.close()
            _until(lambda: _zombie(child.pid), "exited")  # 0.4 s of CPU, then a zombie
        assert cpu.by_role().get("source driver (Python)", 0.0) >= 0.3, cpu.by_role()
    finally:
        child.wait()
