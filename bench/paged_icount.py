#!/usr/bin/env python3
"""Instructions per message of a durable queue's drain, paged or in memory, under callgrind.

``paged_drain.py`` times a drain in CPU microseconds, which move with the machine's load;
this counts the instructions instead, a load-independent measure of the same drain. It
runs ``paged_drain.py`` under ``valgrind --tool=callgrind`` twice for ``--messages``: once
publishing only, once publishing and draining, and prints the difference over the
messages: the drain alone (take, settle, and with a bound the read-back from the store),
startup and the publish cancel out.

    python bench/paged_icount.py --messages 20000               # paged (bound 1,000)
    python bench/paged_icount.py --messages 20000 --bound 0     # the backlog in memory

The group commit's thread is counted with the loop's (valgrind runs one thread at a time).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from callgrind import callgrind_instructions, lmdb_capped  # bench/ is not a package

HERE = Path(__file__).resolve().parent


def instructions(messages: int, bound: int, drain: bool, tmp: Path) -> int:
    command = [sys.executable, str(HERE / "paged_drain.py"), "--messages", str(messages),
               "--bound", str(bound), "--dir", str(tmp)]
    if not drain:
        command.append("--no-drain")
    out_file = tmp / f"callgrind-{'drained' if drain else 'published'}.out"
    return callgrind_instructions(command, out_file, env=lmdb_capped(tmp))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--bound", type=int, default=1_000,
                        help="queue_messages_in_memory (0: the backlog in memory)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="leveret-paged-icount-") as tmp:
        published = instructions(args.messages, args.bound, False, Path(tmp))
        drained = instructions(args.messages, args.bound, True, Path(tmp))
    print(json.dumps({"messages": args.messages, "bound": args.bound,
                      "instructions_published": published, "instructions_drained": drained,
                      "drain_instructions_per_message": round((drained - published)
                                                              / args.messages)}))


if __name__ == "__main__":
    main()
