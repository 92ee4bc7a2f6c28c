"""The Spark bench's CPU sampler: what it reports is the pipeline's, by role.

``bench/cpu_sampler.py`` is not part of the package, but its figures go into the issue
notes; these check the parts that turn /proc into them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
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


def test_a_process_is_named_by_its_command_after_its_exec() -> None:
    """The JVM starts Spark's Python processes by fork (or ``jspawnhelper``) and exec: one
    seen in between shows a JVM's command line, and is named by what it runs after; its
    CPU is counted under that role."""
    # The shell's command line holds "pyspark", "$1.daemon" and "java", never "pyspark.daemon".
    script = 'sleep 0.6; exec "$0" -c "while True: pass" "$1.daemon"'
    child = subprocess.Popen(["sh", "-c", script, sys.executable, "pyspark", "java"])
    try:
        table = cpu_sampler.ProcessTable()
        with cpu_sampler.CpuSampler(0.05) as cpu:
            assert cpu_sampler._role(table.descendants(os.getpid())[child.pid]) == "JVM"
            time.sleep(1.6)
        found = table.descendants(os.getpid())
        assert cpu_sampler._role(found[child.pid]) == "task workers (Python)"
        busy = cpu.by_role()
        assert busy.get("task workers (Python)", 0.0) > 0.3, busy
    finally:
        child.kill()
        child.wait()
    table.descendants(os.getpid())
    assert child.pid not in table.parent  # gone processes are forgotten


def test_a_process_that_exits_keeps_its_name() -> None:
    """A source runner exits with its query; unreaped, it has no command line left."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass"
    child = subprocess.Popen([sys.executable, "-c", burn, "python_streaming_source_runner"])
    try:
        with cpu_sampler.CpuSampler(0.05) as cpu:
            time.sleep(1.5)  # it runs 0.4 s of CPU, then waits as a zombie
        assert cpu.by_role().get("source driver (Python)", 0.0) >= 0.3, cpu.by_role()
    finally:
        child.wait()


def test_the_sampler_costs_little() -> None:
    """It looks every 0.1 s at a machine's processes; its own CPU comes out of the run."""
    started = time.process_time()
    with cpu_sampler.CpuSampler(0.1):
        time.sleep(2.0)
    assert time.process_time() - started < 0.06  # 3% of a core; reading all of /proc: 5%+
