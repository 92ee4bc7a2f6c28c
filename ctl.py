"""``leveret ctl``: a rabbitmqctl-like client of the running broker.

    leveret ctl [--data-dir D] [--config FILE] set_policy [-p VHOST] [--priority N]
                [--apply-to queues|exchanges|all] NAME PATTERN DEFINITION
    leveret ctl ... clear_policy [-p VHOST] NAME
    leveret ctl ... list_policies [-p VHOST]
    leveret ctl ... add_user USER PASSWORD | delete_user USER | change_password USER PASSWORD
                    | clear_password USER | authenticate_user USER PASSWORD
                    | set_user_tags USER [TAG...] | list_users | hash_password PASSWORD
    leveret ctl ... add_vhost VHOST [--description D] [--tags T] [--default-queue-type T]
                    | delete_vhost VHOST | list_vhosts [COLUMN...]
    leveret ctl ... set_permissions [-p VHOST] USER CONF WRITE READ | clear_permissions [-p VHOST] USER
                    | list_permissions [-p VHOST] | list_user_permissions USER
                    | set_topic_permissions [-p VHOST] USER EXCHANGE WRITE READ
                    | clear_topic_permissions [-p VHOST] USER [EXCHANGE] | list_topic_permissions [-p VHOST]
    leveret ctl ... set_vhost_limits [-p VHOST] JSON | set_user_limits USER JSON
                    | clear_vhost_limits [-p VHOST] | clear_user_limits USER LIMIT|all

    leveret ctl ... list_queues | list_exchanges | list_bindings | list_connections
                    | list_channels | list_consumers [-p VHOST] [COLUMN...]
                    | status | purge_queue QUEUE | delete_queue QUEUE [--if-empty] [--if-unused]
                    | close_connection NAME EXPLANATION
                    | close_all_connections [-p VHOST | --global] [--limit N] EXPLANATION
                    | export_definitions FILE|- | import_definitions [FILE|-]
                    (ctl_objects.py: rabbitmqctl's columns and output)

List commands take ``--json`` (rabbitmqctl's ``--formatter json``) for scripts.
    leveret ctl ... compact
    leveret ctl ... cluster_status [--etcd URLS] [--cluster-name NAME] [--formatter json]

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
import asyncio
import importlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from leveret import ctl_objects
from leveret.broker import control
from leveret.config import ConfigError, load_config
from leveret.ctl_objects import EXIT_OK, EXIT_REFUSED, EXIT_UNREACHABLE

EXIT_CONFIG = 2

# Compaction copies the live data: allow for a large store on a slow disk.
COMPACT_TIMEOUT = 3600.0

COLUMNS = ("vhost", "name", "pattern", "apply-to", "definition", "priority")

# Access-control commands: (positional arguments, takes -p, banner, table columns or None).
# Banners and columns are rabbitmqctl 3.10's; {vhost} and the arguments fill them in.
ACCESS: dict[str, tuple[tuple[str, ...], bool, str, tuple[str, ...] | None]] = {
    "add_user": (("user", "password"), False, 'Adding user "{user}" ...', None),
    "delete_user": (("user",), False, 'Deleting user "{user}" ...', None),
    "change_password": (("user", "password"), False,
                        'Changing password for user "{user}" ...', None),
    "clear_password": (("user",), False, 'Clearing password for user "{user}" ...', None),
    "authenticate_user": (("user", "password"), False, 'Authenticating user "{user}" ...', None),
    "set_user_tags": (("user", "tags*"), False, 'Setting tags for user "{user}" to [{tags}] ...',
                      None),
    "list_users": ((), False, "Listing users ...", ("user", "tags")),
    "hash_password": (("password",), False, "Will hash password {password}", None),
    "add_vhost": (("vhost_name",), False, 'Adding vhost "{vhost_name}" ...', None),
    "delete_vhost": (("vhost_name",), False, 'Deleting vhost "{vhost_name}" ...', None),
    "list_vhosts": (("columns*",), False, "Listing vhosts ...", ("name",)),
    "set_permissions": (("user", "configure", "write", "read"), True,
                        'Setting permissions for user "{user}" in vhost "{vhost}" ...', None),
    "clear_permissions": (("user",), True,
                          'Clearing permissions for user "{user}" in vhost "{vhost}" ...', None),
    "list_permissions": ((), True, 'Listing permissions for vhost "{vhost}" ...',
                         ("user", "configure", "write", "read")),
    "list_user_permissions": (("user",), False, 'Listing permissions for user "{user}" ...',
                              ("vhost", "configure", "write", "read")),
    "set_topic_permissions": (("user", "exchange", "write", "read"), True,
                              'Setting topic permissions on "{exchange}" for user "{user}" in '
                              'vhost "{vhost}" ...', None),
    "clear_topic_permissions": (("user", "exchange?"), True,
                                'Clearing topic permissions for user "{user}" in vhost '
                                '"{vhost}" ...', None),
    "list_topic_permissions": ((), True, 'Listing topic permissions for vhost "{vhost}" ...',
                               ("user", "exchange", "write", "read")),
    "list_user_topic_permissions": (("user",), False,
                                    'Listing topic permissions for user "{user}" ...',
                                    ("vhost", "exchange", "write", "read")),
    "set_vhost_limits": (("definition",), True,
                         'Setting vhost limits to "{definition}" for vhost "{vhost}" ...', None),
    "set_user_limits": (("user", "definition"), False,
                        'Setting user limits to "{definition}" for user "{user}" ...', None),
    "clear_vhost_limits": ((), True, 'Clearing vhost "{vhost}" limits ...', None),
    "clear_user_limits": (("user", "limit"), False,
                          'Clearing "{limit}" limit for user "{user}" ...', None),
    "list_vhost_limits": ((), True, 'Listing limits for vhost "{vhost}" ...', ("limits",)),
    "list_user_limits": (("user",), False, 'Listing limits for user "{user}" ...', ("limits",)),
}


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
    for name, (positionals, _, _, columns) in ACCESS.items():
        p = sub.add_parser(name, help=name.replace("_", " "))
        vhost_arg(p)
        for arg in positionals:
            if arg.endswith("*"):
                p.add_argument(arg[:-1], nargs="*")
            elif arg.endswith("?"):
                p.add_argument(arg[:-1], nargs="?")
            else:
                p.add_argument(arg)
        if columns is not None:
            p.add_argument("--json", action="store_true", help="print JSON (for scripts)")
            p.add_argument("--formatter", choices=("table", "json"), default="table")
        if name == "add_vhost":
            p.add_argument("--description", default="")
            p.add_argument("--tags", default="")
            p.add_argument("--default-queue-type", default=None)
        if name == "add_user":
            p.add_argument("--pre-hashed-password", action="store_true",
                           help="PASSWORD is a RabbitMQ password hash (base64)")
    p = sub.add_parser("cluster_status", help="the cluster's nodes, leader and in-sync set")
    vhost_arg(p)
    p.add_argument("--etcd", metavar="URLS", help="etcd endpoints (default: the config's)")
    p.add_argument("--cluster-name", metavar="NAME", help="default: the config's")
    p.add_argument("--formatter", choices=("table", "json"), default="table")
    p = sub.add_parser("compact", help="shrink the message store file to its live data")
    vhost_arg(p)
    ctl_objects.add_parsers(sub, vhost_arg)


def run(args: argparse.Namespace, env: Mapping[str, str], out: TextIO, err: TextIO) -> int:
    command = args.ctl_command
    options = {"data_dir": args.data_dir}
    if command == "cluster_status":
        options.update(etcd=args.etcd, cluster_name=args.cluster_name)
    try:
        config = load_config(options, env, args.config)
    except ConfigError as exc:
        print(f"leveret: error: {exc}", file=err)
        return EXIT_CONFIG
    if command == "cluster_status":
        return run_cluster_status(args, config, out, err)
    if command in ACCESS:
        return run_access(args, config, out, err)
    if command in ctl_objects.COMMANDS:
        return ctl_objects.run(args, Path(config.data_dir), out, err)
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


def run_cluster_status(args: argparse.Namespace, config: Any, out: TextIO, err: TextIO) -> int:
    """Read from etcd (``cluster/status.py``): it answers with the leader down too."""
    if not config.etcd:
        print("Error:\nnot a cluster node: no etcd endpoints (--etcd or LEVERET_ETCD)", file=err)
        return EXIT_CONFIG
    # Imported here, as cli.py imports the node: every other command (and --version) stays
    # free of aiohttp.
    status = importlib.import_module("leveret.cluster.status")
    try:
        result = asyncio.run(status.cluster_status(config.etcd, config.cluster_name))
    except status.CoordinatorError as exc:
        print(f"Error:\n{exc}", file=err)
        return EXIT_UNREACHABLE
    if args.formatter == "json":
        print(json.dumps(result), file=out)
    else:
        print(f"Cluster status of cluster {config.cluster_name} ...", file=out)
        print(status.format_status(result), file=out, end="")
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


def run_access(args: argparse.Namespace, config: Any, out: TextIO, err: TextIO) -> int:
    """One access-control command: banner, request, then a table, JSON or a result line."""
    command = args.ctl_command
    positionals, _, banner, columns = ACCESS[command]
    fields = {a.rstrip("*?"): getattr(args, a.rstrip("*?")) for a in positionals}
    request: dict[str, Any] = {"command": command, "vhost": args.vhost, **fields}
    if "vhost_name" in fields:
        request["vhost"] = fields.pop("vhost_name")
    if command == "add_vhost":
        request.update(description=args.description, tags=args.tags,
                       default_queue_type=args.default_queue_type)
    if command == "add_user" and args.pre_hashed_password:
        request["password_hash"] = request.pop("password")
    if "definition" in request:
        try:
            request["definition"] = json.loads(args.definition)
        except ValueError as exc:
            print(f"Error:\nJSON decoding error. Reason: {exc}", file=err)
            return EXIT_REFUSED
    as_json = columns is not None and (args.json or args.formatter == "json")
    if not as_json:
        text = {k: ", ".join(v) if isinstance(v, list) else v for k, v in vars(args).items()}
        if command == "clear_user_limits" and args.limit == "all":
            banner = 'Clearing all limits for user "{user}" ...'
        print(banner.format(**{**text, "vhost": request["vhost"],
                               "vhost_name": request["vhost"]}), file=out)
    result, failed = ctl_objects.send(Path(config.data_dir), request, err)
    if failed is not None:
        return failed
    if command == "authenticate_user":
        print("Success", file=out)
    elif command == "hash_password":
        print(result, file=out)
    elif command in ("list_vhost_limits", "list_user_limits") and not as_json:
        print(json.dumps(result[0]["limits"], separators=(",", ":")), file=out)
    elif columns is not None:
        if command == "list_vhosts" and args.columns:
            columns = tuple(args.columns)
        if as_json:
            rows = [{c: row.get(c) for c in columns} for row in result]
            print(json.dumps(rows, separators=(",", ":")), file=out)
        else:
            print(format_table(columns, result), file=out, end="")
    return EXIT_OK


def format_table(columns: tuple[str, ...], rows: list[dict[str, Any]]) -> str:
    """rabbitmqctl's TSV: a header row, lists as ``[a, b]``, None as ``undefined``."""
    def cell(value: Any) -> str:
        if value is None:
            return "undefined"
        if isinstance(value, list):
            return "[" + ", ".join(map(str, value)) + "]"
        if isinstance(value, dict):
            return json.dumps(value, separators=(",", ":"))
        return str(value)

    lines = ["\t".join(columns)]
    lines += ["\t".join(cell(row.get(c)) for c in columns) for row in rows]
    return "\n".join(lines) + "\n"
