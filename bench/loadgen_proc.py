"""What the load generator reads from ``/proc``: a process tree's CPU, RSS and disk writes,
the whole machine's CPU, open files, and a data directory's size.

A broker is measured as its process tree (``--broker-pid`` and its descendants), so a
RabbitMQ's Erlang helpers and a Leveret's children count too. Linux only.
"""

from __future__ import annotations

import asyncio
import os
import resource

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _proc_stat(pid: int) -> tuple[int, float] | None:
    """(ppid, utime+stime seconds) of one process, or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2:].split()
    # fields[0] is state (field 3); ppid is field 4, utime 14, stime 15
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _CLK_TCK


def process_tree(root: int) -> list[int]:
    """``root`` and all its descendants (found by scanning /proc)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _proc_stat(int(name))
            if st is not None:
                children.setdefault(st[0], []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def tree_cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        st = _proc_stat(pid)
        if st is not None:
            total += st[1]
    return total


def vm_kib(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def tree_io_bytes(pids: list[int]) -> int | None:
    """Summed ``write_bytes`` (bytes sent to the block layer) of /proc/<pid>/io."""
    total, seen = 0, False
    for pid in pids:
        try:
            with open(f"/proc/{pid}/io") as f:
                for line in f:
                    if line.startswith("write_bytes:"):
                        total += int(line.split()[1])
                        seen = True
        except OSError:
            continue
    return total if seen else None


def vm_status(pid: int, keys: tuple[str, ...]) -> dict:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k = line.split(":", 1)[0]
                if k in keys:
                    out[k] = int(line.split()[1])
    except OSError:
        pass
    return out


def host_cpu_ticks() -> list[int]:
    """Aggregate /proc/stat 'cpu' line: user nice system idle iowait irq softirq steal ..."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def host_cpu_breakdown(t0: list[int], t1: list[int], wall: float) -> dict:
    """Whole-machine CPU use between two host_cpu_ticks() samples, in cores."""
    d = [b - a for a, b in zip(t0, t1)]
    def cores(ticks):
        return round(ticks / _CLK_TCK / wall, 3)
    busy = sum(d[:3]) + sum(d[5:7])  # user nice system irq softirq
    return {"host_busy_cores": cores(busy), "host_idle_cores": cores(d[3] + d[4]),
            "host_steal_cores": cores(d[7]) if len(d) > 7 else None}


def self_cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def dir_size(path: str | None) -> dict | None:
    """Disk usage (st_blocks) and apparent size of a directory tree, or None if
    it does not exist / is unreadable (e.g. RabbitMQ's mnesia dir as non-root)."""
    if not path or not os.path.isdir(path):
        return None
    errors = []
    disk = apparent = files = 0
    for root, _dirs, names in os.walk(path, onerror=errors.append):
        for nm in names:
            try:
                st = os.lstat(os.path.join(root, nm))
            except OSError:
                continue
            disk += st.st_blocks * 512
            apparent += st.st_size
            files += 1
    if errors and not files:
        return None
    return {"disk_bytes": disk, "apparent_bytes": apparent, "files": files,
            "unreadable_dirs": len(errors)}


class RssSampler:
    """Polls the summed VmRSS of the broker's process tree every ``interval`` s.
    ``peak_kib`` is the max seen since start; ``mark()`` returns and resets a
    per-phase peak."""

    def __init__(self, pids: list[int], interval: float = 0.2) -> None:
        self.pids = pids
        self.interval = interval
        self.peak_kib = 0
        self.phase_peak_kib = 0
        self.task: asyncio.Task | None = None

    anon_peak_kib = 0  # RssAnon (heap etc.; excludes mmapped files such as LMDB's data file)
    phase_anon_peak_kib = 0

    def sample(self) -> None:
        if self.pids:
            v = a = 0
            for p in self.pids:
                st = vm_status(p, ("VmRSS", "RssAnon"))
                v += st.get("VmRSS", 0)
                a += st.get("RssAnon", 0)
            self.peak_kib = max(self.peak_kib, v)
            self.phase_peak_kib = max(self.phase_peak_kib, v)
            self.anon_peak_kib = max(self.anon_peak_kib, a)
            self.phase_anon_peak_kib = max(self.phase_anon_peak_kib, a)

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        if self.pids:
            self.task = asyncio.create_task(self._run())

    def mark(self) -> tuple[int, int]:
        """(VmRSS peak, RssAnon peak) since the last mark."""
        self.sample()
        v, self.phase_peak_kib = self.phase_peak_kib, 0
        a, self.phase_anon_peak_kib = self.phase_anon_peak_kib, 0
        return v, a

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()


def raise_nofile() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; returns (soft, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def proc_nofile(pid: int) -> list[str] | None:
    """[soft, hard] 'Max open files' of a process from /proc/<pid>/limits."""
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                if line.startswith("Max open files"):
                    return line.split()[3:5]
    except OSError:
        return None
    return None


def proc_fd_count(pids: list[int]) -> int | None:
    try:
        return sum(len(os.listdir(f"/proc/{p}/fd")) for p in pids)
    except OSError:
        return None
