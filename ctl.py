"""``leveret ctl``: a rabbitmqctl-like client of the running broker.

    leveret ctl [--data-dir D] [--config FILE] set_policy [-p VHOST] [--priority N]
                [--apply-to queues|exchanges|all] NAME PATTERN DEFINITION
    leveret ctl ... clear_policy [-p VHOST] NAME
    leveret ctl ... list_policies [-p VHOST]
    leveret ctl ... compact

``compact`` rewrites the message store without its free pages while the broker
runs (LMDB reuses freed pages but never shrinks its file; after a large queue
is deleted this gives the disk space back). It needs free disk space for a copy
of the live data and pauses store writes while it copies.

The broker is found like ``serve`` finds its data dir (flag > LEVERET_DATA_DIR >
config file > default) and reached over ``<data_dir>/ctl.sock``
(``amqp/control.py``). Output follows rabbitmqctl: an "...ing" banner line,
then the result (list_policies: a tab-separated table with a header row);
errors go to stderr after "Error:". Exit codes: 0 ok, 65 the broker refused
the request (bad definition, unknown policy or vhost), 69 no broker reachable,
2 usage or configuration error. (rabbitmqctl uses 69 for refusals too.)
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from leveret.broker import control
from leveret.config import ConfigError, load_config

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_REFUSED = 65  # EX_DATAERR
EXIT_UNREACHABLE = 69  # EX_UNAVAILABLE, as rabbitmqctl for a node that is down

# Compaction copies the live data: allow for a large store on a slow disk.
COMPACT_TIMEOUT = 3600.0

COLUMNS = ("vhost", "name", "pattern", "apply-to", "definition", "priority")


def add_parser(commands: Any) -> None:
    ctl = commands.add_parser(
        "ctl", help="manage the running broker (rabbitmqctl-like)",
        description="Send a command to the running broker over its control socket.")
    ctl.add_argument("--data-dir", metavar="D", help="the broker's data directory")
    ctl.add_argument("--config", type=Path, metavar="FILE", help="TOML config file")
    sub = ctl.add_subparsers(dest="ctl_command", metavar="CTL_COMMAND", required=True)

    def vhost_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("-p", "--vhost", default="/", metavar="VHOST", help="virtual host (/)")
        # Also accepted after the command (rabbitmqctl takes global flags anywhere).
        p.add_argument("--data-dir", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        p.add_argument("--config", type=Path, default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    p = sub.add_parser("set_policy", help="set or replace a policy")
    vhost_arg(p)
    p.add_argument("--priority", type=int, default=0, metavar="N")
    p.add_argument("--apply-to", default="all", metavar="queues|exchanges|all")
    p.add_argument("name")
    p.add_argument("pattern")
    p.add_argument("definition", help="JSON object, e.g. '{\"max-length\": 100}'")
    p = sub.add_parser("clear_policy", help="remove a policy")
    vhost_arg(p)
    p.add_argument("name")
    p = sub.add_parser("list_policies", help="list a vhost's policies")
    vhost_arg(p)
    p = sub.add_parser("compact", help="shrink the message store file to its live data")
    vhost_arg(p)


def run(args: argparse.Namespace, env: Mapping[str, str], out: TextIO, err: TextIO) -> int:
    try:
        config = load_config({"data_dir": args.data_dir}, env, args.config)
    except ConfigError as exc:
        print(f"leveret: error: {exc}", file=err)
        return EXIT_CONFIG
    command = args.ctl_command
    request: dict[str, Any] = {"command": command, "vhost": args.vhost}
    if command == "set_policy":
        print(f'Setting policy "{args.name}" for pattern "{args.pattern}" to '
              f'"{args.definition}" with priority "{args.priority}" for vhost "{args.vhost}" ...',
              file=out)
        try:
            definition = json.loads(args.definition)
        except ValueError as exc:
            print(f"Error:\nJSON decoding error. Reason: {exc}", file=err)
            return EXIT_REFUSED
        request.update(name=args.name, pattern=args.pattern, definition=definition,
                       priority=args.priority, apply_to=args.apply_to)
    elif command == "clear_policy":
        print(f'Clearing policy "{args.name}" on vhost "{args.vhost}" ...', file=out)
        request["name"] = args.name
    elif command == "compact":
        print("Compacting the message store ...", file=out)
    else:
        print(f'Listing policies for vhost "{args.vhost}" ...', file=out)
    try:
        result = control.request(Path(config.data_dir), request,
                                 timeout=COMPACT_TIMEOUT if command == "compact" else 10.0)
    except control.BrokerUnreachable as exc:
        print(f"Error:\n{exc}", file=err)
        return EXIT_UNREACHABLE
    except control.ControlError as exc:
        print(f"Error:\n{exc}", file=err)
        return EXIT_REFUSED
    if command == "list_policies":
        print(format_policies(result), file=out, end="")
    elif command == "compact":
        print(f"{result['before']} bytes -> {result['after']} bytes", file=out)
    return EXIT_OK


def format_policies(rows: list[dict[str, Any]]) -> str:
    """rabbitmqctl's table: a header row, then one tab-separated row per policy."""
    if not rows:
        return ""
    lines = ["\t".join(COLUMNS)]
    for row in rows:
        cells = [json.dumps(row[c], separators=(",", ":")) if c == "definition" else str(row[c])
                 for c in COLUMNS]
        lines.append("\t".join(cells))
    return "\n".join(lines) + "\n"
