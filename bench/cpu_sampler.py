"""CPU by role (broker, RabbitMQ, JVM, Spark's Python processes) from Linux's /proc, sampled.

``spark_bench.py`` runs one inside each scenario: the CPU each process spent per row, and
over a streaming query's later batches who worked when (:func:`overlap_shares`) and what a
steady batch costs (:func:`cpu_in_windows`).
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

ROLES = (  # (command-line fragment, role), first match wins
    ("leveret serve", "broker"),
    ("beam.smp", "rabbitmq"),
    ("python_streaming_source_runner", "source driver (Python)"),
    ("python_streaming_sink_runner", "sink commit (Python)"),
    ("pyspark.daemon", "task workers (Python)"),
    ("java", "JVM"),
)
SPARK_ROLES = ("source driver (Python)", "sink commit (Python)", "task workers (Python)", "JVM")
CLK_TCK = os.sysconf("SC_CLK_TCK")


class ProcessTable:
    """This machine's processes, from /proc, read incrementally (Linux only).

    The sampler looks every 0.1 s; reading every process's ``stat`` and ``cmdline`` each time
    cost the bench itself 5-7% of a core, taken from the pipeline it measures. A process's
    parent is read once; only this bench's descendants (a dozen) have their command line
    read each time, since a process seen between its fork and its exec shows its parent's
    (the JVM's, or ``jspawnhelper``'s under the JVM's directory) and is named by what it
    runs after.
    """

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def _read(self, pid: int) -> None:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return
        self.parent[pid] = int(stat.rsplit(")", 1)[1].split()[1])

    def descendants(self, root: int) -> dict[int, str]:
        """pid -> command line of every process below ``root``."""
        pids = {int(name) for name in os.listdir("/proc") if name.isdigit()}
        for gone in self.parent.keys() - pids:
            del self.parent[gone]
        for pid in pids - self.parent.keys():
            self._read(pid)
        children: dict[int, list[int]] = {}
        for pid, ppid in self.parent.items():
            children.setdefault(ppid, []).append(pid)
        out, todo = {}, [root]
        while todo:
            for child in children.get(todo.pop(), []):
                try:
                    out[child] = Path(f"/proc/{child}/cmdline").read_bytes().replace(
                        b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                todo.append(child)
        return out


def _role(cmd: str) -> str:
    return next((role for fragment, role in ROLES if fragment in cmd), "other")


def _rabbitmq_nodes() -> dict[int, str]:
    """pid -> command line of RabbitMQ nodes (Erlang's ``beam.smp``) on this machine."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "beam.smp":
                    out[int(entry.name)] = "beam.smp"
            except OSError:
                continue
    return out


def _cpu_s(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


class CpuSampler:
    """CPU seconds by role (broker, JVM, Python workers, ...) over a run, from /proc.

    Samples every ``interval`` s in a thread so processes that start and exit inside the
    run (a query's source runner) are counted up to their last sample. This bench's own
    descendants are seen, and a RabbitMQ node on this machine (``beam.smp``, found by name,
    role ``rabbitmq``): it is idle but for the runs against it.
    """

    def __init__(self, interval: float = 0.25) -> None:
        import threading

        self.interval = interval
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.role: dict[int, str] = {}
        # (epoch seconds, {role: cores busy since the previous sample}): who works when.
        self.timeline: list[tuple[float, dict[str, float]]] = []
        self._at = 0.0
        self.processes = ProcessTable()
        self.rabbitmq = _rabbitmq_nodes()  # started before the run, if at all
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        now = time.time()
        busy: dict[str, float] = {}
        for pid, cmd in {**self.processes.descendants(os.getpid()), **self.rabbitmq,
                         os.getpid(): "bench"}.items():
            cpu = _cpu_s(pid)
            if cpu is None:
                continue
            if pid not in self.first:
                # A process born during the run starts at zero; one seen at the start, at its
                # CPU then.
                self.first[pid] = cpu if not self._started else 0.0
            if pid == os.getpid():
                self.role[pid] = "bench (Python)"
            elif (role := _role(cmd)) != "other" or pid not in self.role:
                # Named by what it runs now (ProcessTable); an exited one (a zombie has no
                # command line) keeps its name.
                self.role[pid] = role
            role = self.role[pid]
            busy[role] = busy.get(role, 0.0) + cpu - self.last.get(pid, self.first[pid])
            self.last[pid] = cpu
        if self._at:
            self.timeline.append((now, {r: c / (now - self._at) for r, c in busy.items()}))
        self._at = now

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> CpuSampler:
        self._started = False
        self._sample()
        self._started = True
        self.wall = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self.wall = time.perf_counter() - self.wall

    def by_role(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for pid, cpu in self.last.items():
            role = self.role[pid]
            out[role] = out.get(role, 0.0) + cpu - self.first[pid]
        return out


def overlap_shares(timeline: list[tuple[float, dict[str, float]]],
                   windows: list[tuple[float, float]]) -> dict[str, float]:
    """Of the samples inside ``windows`` (the later batches), the share in which the broker
    worked alone, Spark alone, both, or neither ("works": at least half a core).

    Spark's later batches run one after another: its phases can overlap the broker's work
    only inside a batch. "broker alone" is where Spark waits for the broker (publisher
    confirms, deliveries), "Spark alone" where the broker waits for Spark.
    """
    counts = {"broker alone": 0, "Spark alone": 0, "both": 0, "neither": 0}
    for at, busy in timeline:
        if not any(start <= at <= end for start, end in windows):
            continue
        broker = busy.get("broker", 0.0) + busy.get("rabbitmq", 0.0) >= 0.5
        spark = sum(c for r, c in busy.items() if r in SPARK_ROLES) >= 0.5
        key = ("both" if spark else "broker alone") if broker else (
            "Spark alone" if spark else "neither")
        counts[key] += 1
    total = sum(counts.values())
    return {k: round(v / total, 2) for k, v in counts.items()} if total else {}


def cpu_in_windows(timeline: list[tuple[float, dict[str, float]]],
                   windows: list[tuple[float, float]]) -> dict[str, float]:
    """CPU seconds by role of the samples inside ``windows`` (the later batches): what a
    steady batch costs, without the query's start (the source runner's imports, the first
    batch's planning)."""
    out: dict[str, float] = {}
    for (before, _), (at, busy) in itertools.pairwise(timeline):
        if any(start <= at <= end for start, end in windows):
            for role, cores in busy.items():
                out[role] = out.get(role, 0.0) + cores * (at - before)
    return out
