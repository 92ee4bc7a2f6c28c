#!/usr/bin/env python3
"""Last-level cache misses a deduplicated publish costs, by function, at a full window.

    python bench/dedupe_misses.py --window 1000000 --warm 50000 --messages 200000
    python bench/dedupe_misses.py --window 1000000 --store      # and the store's writer

``dedupe_icount.py``'s workload (read the key, check it, admit it evicting the oldest, record
it in the pending batch; ``--store``: write each batch's record to LMDB) under
``valgrind --tool=callgrind --cache-sim=yes`` with a last-level cache of this machine's L3
(32 MiB, 16-way: valgrind's default here is a 256 MiB direct-mapped one, which hides every
miss). The window is filled with instrumentation off (fast), then ``--warm`` publishes warm
the simulated caches, the counters are zeroed (``callgrind_control``), and ``--messages``
publishes are counted: long enough a span to take in the periodic work (a full window's
dict rebuilds, its FIFO list's cuts). Printed: instructions and LL misses a publish, and
the functions with the most LL misses (self cost, not inclusive).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from callgrind import lmdb_capped  # bench/ is not a package: found through sys.path

LL = "--LL=33554432,16,64"
WAIT = 3600.0  # a phase of a million-key fill under valgrind takes minutes, not hours


def _wait_for(path: Path, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + WAIT
    while not path.exists():
        if process.poll() is not None:
            raise SystemExit(f"the workload exited ({process.returncode}) before {path.name}")
        if time.monotonic() > deadline:
            raise SystemExit(f"no {path.name} after {WAIT} s")
        time.sleep(0.2)


def workload(args: argparse.Namespace, phases: Path) -> None:
    from dedupe_icount import publisher

    run = publisher(args.window, False, args.store_dir)
    run(0, args.window)
    for name, first, count in (("filled", args.window, args.warm),
                               ("warm", args.window + args.warm, args.messages)):
        (phases / name).touch()
        while not (phases / f"{name}.go").exists():
            time.sleep(0.05)
        run(first, count)
    (phases / "done").touch()  # counting stops here, not after the interpreter's teardown
    while not (phases / "done.go").exists():
        time.sleep(0.05)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--window", type=int, default=1_000_000)
    p.add_argument("--warm", type=int, default=50_000)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--store", action="store_true", help="also write each batch to LMDB")
    p.add_argument("--top", type=int, default=15, help="functions listed")
    p.add_argument("--keep", help="keep callgrind's output file here")
    p.add_argument("--workload", help=argparse.SUPPRESS)
    p.add_argument("--store-dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.workload:
        workload(args, Path(args.workload))
        return
    with tempfile.TemporaryDirectory(prefix="leveret-dedupe-misses-") as tmp:
        out = Path(args.keep) if args.keep else Path(tmp) / "callgrind.out"
        phases = Path(tmp) / "phases"
        phases.mkdir()
        command = [sys.executable, __file__, "--workload", str(phases),
                   "--window", str(args.window), "--warm", str(args.warm),
                   "--messages", str(args.messages)]
        if args.store:
            command += ["--store-dir", str(Path(tmp) / "store")]
        env = lmdb_capped(Path(tmp))
        env.setdefault("PYTHONHASHSEED", "0")
        process = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no",
             "--cache-sim=yes", LL, "--instr-atstart=no", *command],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        pid = str(process.pid)
        _wait_for(phases / "filled", process)
        subprocess.run(["callgrind_control", "-i", "on", pid], check=True,
                       capture_output=True)
        (phases / "filled.go").touch()
        _wait_for(phases / "warm", process)
        subprocess.run(["callgrind_control", "-z", pid], check=True, capture_output=True)
        (phases / "warm.go").touch()
        _wait_for(phases / "done", process)
        subprocess.run(["callgrind_control", "-i", "off", pid], check=True,
                       capture_output=True)
        (phases / "done.go").touch()
        if process.wait(timeout=WAIT):
            raise SystemExit(f"the workload exited with {process.returncode}")
        report(out, args.messages, args.top)


def report(out: Path, messages: int, top: int) -> None:
    text = out.read_text(errors="replace")
    events = re.search(r"^events: (.+)$", text, re.MULTILINE)
    totals = re.search(r"^totals: (.+)$", text, re.MULTILINE)  # summary: wrong once zeroed
    if events is None or totals is None:
        raise SystemExit(f"no events or totals in {out}")
    names = events.group(1).split()
    values = dict(zip(names, map(int, totals.group(1).split()), strict=False))
    ll = sum(values.get(n, 0) for n in ("ILmr", "DLmr", "DLmw"))
    print(f"instructions a publish: {values['Ir'] / messages:,.0f}")
    print(f"LL misses a publish: {ll / messages:.2f} (reads {values.get('DLmr', 0) / messages:.2f},"
          f" writes {values.get('DLmw', 0) / messages:.2f})")
    annotated = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--auto=no", "--tree=none", "--sort=DLmr,DLmw", "--threshold=100",
         str(out)], capture_output=True, text=True, check=True).stdout
    # Rows of nine counts (each with its share in parentheses), then file:function.
    row = re.compile(r"^\s*((?:[\d,]+(?: \(\s*[\d.]+%\))?\s+|\.\s+){9})(\S.*)$")
    print(f"\nLL misses a publish by function (self), top {top}: reads, writes, function")
    found: dict[str, list[int]] = {}  # a function's lines may be filed under its headers
    for line in annotated.splitlines():
        match = row.match(line)
        if match is None or "PROGRAM TOTALS" in line:
            continue
        counts = re.sub(r"\(\s*[\d.]+%\)", "", match.group(1)).split()
        dlmr, dlmw = (0 if c == "." else int(c.replace(",", "")) for c in counts[7:9])
        name = re.sub(r"^.*?:(?=[^:/]+(?: \[|$))", "", match.group(2)).split(" [")[0]
        total = found.setdefault(name, [0, 0])
        total[0] += dlmr
        total[1] += dlmw
    for name, (dlmr, dlmw) in sorted(found.items(), key=lambda kv: -sum(kv[1]))[:top]:
        print(f"{dlmr / messages:7.2f} {dlmw / messages:7.2f}  {name[:100]}")

if __name__ == "__main__":
    main()
