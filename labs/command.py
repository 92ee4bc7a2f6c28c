"""``leveret lab list`` and ``leveret lab run NAME [--url URL] [--fast]``.

``list`` prints one lab per line (name, a tab, its summary) and nothing else on
stdout, so scripts can read it; how to run one goes to stderr. ``run`` imports the lab's ``lab.py`` by name only
then, because the labs need pika (the ``labs`` extra) and the broker does not.
Without ``--url`` the lab stages its own broker in a temp dir and removes it
afterwards; with ``--url`` it removes the queues it declared.

Exit status of ``run``: 0 the broker behaved as the lesson predicts, 1 it did
not (or an awaited event never came), 2 usage (unknown lab, pika missing).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import tempfile
from pathlib import Path
from typing import Any, TextIO

from leveret.labs import LABS, brokers, find

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
HERE = Path(__file__).resolve().parent


def add_parser(commands: Any) -> None:
    lab = commands.add_parser(
        "lab", help="teaching labs: durability and acks you can run, break and see",
        description="Run a lab: it stages a broker crash (or a consumer's), prints a timeline "
        "and a table of counts, and checks what the lesson predicts.")
    sub = lab.add_subparsers(dest="lab_command", metavar="LAB_COMMAND", required=True)
    sub.add_parser("list", help="the labs, one per line: name<TAB>summary")
    run = sub.add_parser("run", help="run one lab")
    run.add_argument("name", metavar="NAME", help="a name from 'leveret lab list'")
    run.add_argument("--url", metavar="amqp://...",
                     help="use this broker (e.g. a RabbitMQ) instead of starting one; "
                     "parts that crash the broker are skipped")
    run.add_argument("--fast", action="store_true",
                     help="fewer messages, for tests and CI (a normal run takes seconds too)")


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    if args.lab_command == "list":
        for lab in LABS:
            print(f"{lab.name}\t{lab.summary}", file=stdout)
        # On stderr, so that scripts reading the list see only the list.
        print("run one with: leveret lab run NAME  (--url amqp://... to try it on another "
              "broker; the lesson is labs/NAME/lesson.md)", file=stderr)
        return EXIT_OK
    found = find(args.name)
    if found is None:
        print(f"leveret: error: no lab {args.name!r}; 'leveret lab list' shows them",
              file=stderr)
        return EXIT_USAGE
    lab = found
    try:
        module = importlib.import_module(f"leveret.labs.{lab.name}.lab")
        harness = importlib.import_module("leveret.labs.harness")
    except ModuleNotFoundError as exc:
        if exc.name != "pika":
            raise
        print("leveret: error: the labs need pika: pip install 'leveret[labs]'", file=stderr)
        return EXIT_USAGE
    # pika logs every dropped connection; in a lab that drops them on purpose it is noise.
    logging.getLogger("pika").setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory(prefix=f"leveret-lab-{lab.name}-") as tmp:
        broker = (brokers.RemoteBroker(args.url) if args.url
                  else brokers.OwnBroker(Path(tmp) / "data"))
        out = harness.Run(lab.name, broker, args.fast, stdout)
        out.say(f"lab {lab.name}: {lab.summary}")
        out.say(f"lesson:  {HERE / lab.name / 'lesson.md'}")
        out.say(f"example: {HERE / lab.name / 'example.py'}")
        out.say(f"broker:  {broker.describe()}")
        out.say("\ntimeline")
        try:
            if isinstance(broker, brokers.OwnBroker):
                broker.start()
                out.event("start", f"broker pid {broker.pid} listening on 127.0.0.1:"
                          f"{broker.port}")
            module.run(out)
        except brokers.LabFailed as exc:
            out.check(False, f"the lab could not go on: {exc}")
        finally:
            broker.stop()
            if not out.controlled and out.created:
                harness.delete_queues(args.url, sorted(set(out.created)))
        link = harness.console_link(lab.name, [])
        if link:
            out.say(f"console: {link}")
        return EXIT_OK if out.finish() == 0 else EXIT_FAILED
