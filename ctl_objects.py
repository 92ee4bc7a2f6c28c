"""``leveret ctl`` object commands: list_*, status, purge/delete_queue, close_*,
export/import_definitions, printed as rabbitmqctl 3.10 prints them.

    leveret ctl ... list_queues | list_exchanges | list_bindings | list_consumers
                    [-p VHOST] [COLUMN ...] [--json] [--no-table-headers] [-q] [-s] [-t N]
                    (list_queues also takes --online, --local, --offline)
    leveret ctl ... list_connections | list_channels [COLUMN ...] [--json] ...
    leveret ctl ... status [--json]
    leveret ctl ... purge_queue [-p VHOST] QUEUE
                    | delete_queue [-p VHOST] QUEUE [--if-empty|-e] [--if-unused|-u]
    leveret ctl ... close_connection NAME EXPLANATION
                    | close_all_connections [-p VHOST | --global] [--limit N] EXPLANATION
    leveret ctl ... export_definitions FILE|- | import_definitions [FILE|-]

Columns are rabbitmqctl's info keys (``list_queues name messages_ready
consumers``, commas allowed); the defaults are rabbitmqctl's. Output: an
"...ing" banner line (not with ``--json`` or ``-q``), then a tab-separated
table with a header row (none when there are no rows, as rabbitmqctl), cells
as rabbitmqctl writes them (``true``, ``[{"x-max-length",5}]``); ``--json``
(= ``--formatter json``) prints one JSON list of objects. Where rabbitmqctl
shows an Erlang pid, Leveret shows the connection's or channel's name, and
``close_connection`` takes that name (``broker/control_inventory.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from leveret.broker import control

EXIT_OK = 0
EXIT_REFUSED = 65  # EX_DATAERR
EXIT_UNREACHABLE = 69  # EX_UNAVAILABLE, as rabbitmqctl for a node that is down

LIST_BANNERS = {
    "list_queues": "Listing queues for vhost {vhost} ...",
    "list_exchanges": "Listing exchanges for vhost {vhost} ...",
    "list_bindings": "Listing bindings for vhost {vhost}...",
    "list_connections": "Listing connections ...",
    "list_channels": "Listing channels ...",
    "list_consumers": "Listing consumers in vhost {vhost} ...",
}
COMMANDS = (*LIST_BANNERS, "status", "purge_queue", "delete_queue", "close_connection",
            "close_all_connections", "export_definitions", "import_definitions")


def add_parsers(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register the commands on ``leveret ctl``'s subparsers (``common`` adds -p etc.)."""
    for name in LIST_BANNERS:
        p = sub.add_parser(name, help=name.replace("_", " "))
        common(p)
        p.add_argument("columns", nargs="*", metavar="COLUMN", help="rabbitmqctl info keys")
        _output_flags(p)
        p.add_argument("--no-table-headers", action="store_true")
        if name == "list_queues":  # one node: every queue is online and local
            p.add_argument("--online", action="store_true")
            p.add_argument("--local", action="store_true")
            p.add_argument("--offline", action="store_true", help="(lists nothing)")
    p = sub.add_parser("status", help="the node's status")
    common(p)
    _output_flags(p)
    p = sub.add_parser("purge_queue", help="drop a queue's ready messages")
    common(p)
    p.add_argument("queue")
    _output_flags(p)
    p = sub.add_parser("delete_queue", help="delete a queue")
    common(p)
    p.add_argument("queue")
    p.add_argument("-e", "--if-empty", action="store_true")
    p.add_argument("-u", "--if-unused", action="store_true")
    _output_flags(p)
    p = sub.add_parser("close_connection", help="close a connection (name from list_connections)")
    common(p)
    p.add_argument("name")
    p.add_argument("explanation")
    _output_flags(p)
    p = sub.add_parser("close_all_connections", help="close a vhost's (or all) connections")
    common(p)
    p.add_argument("--global", dest="all_vhosts", action="store_true")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("explanation")
    _output_flags(p)
    p = sub.add_parser("export_definitions", help="write definitions (JSON) to FILE or -")
    common(p)
    p.add_argument("file")
    _output_flags(p)
    p = sub.add_parser("import_definitions", help="import definitions from FILE or stdin")
    common(p)
    p.add_argument("file", nargs="?", default="-")
    _output_flags(p)


def _output_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    p.add_argument("--formatter", choices=("table", "json"), default="table")
    p.add_argument("-q", "--quiet", action="store_true", help="no banner line")
    p.add_argument("-s", "--silent", action="store_true", help="no banner, no table header")
    p.add_argument("-t", "--timeout", type=float, default=60.0, metavar="SECONDS")


def run(args: argparse.Namespace, data_dir: Path, out: TextIO, err: TextIO,
        stdin: TextIO | None = None) -> int:
    command = args.ctl_command
    as_json = args.json or args.formatter == "json"
    quiet = as_json or args.quiet or args.silent
    vhost = args.vhost
    request: dict[str, Any] = {"command": command, "vhost": vhost}
    banner = ""
    if command in LIST_BANNERS:
        request["columns"] = args.columns
        banner = LIST_BANNERS[command].format(vhost=vhost)
    elif command == "status":
        pass  # the status text opens with its own "Status of node ..." line
    elif command in ("purge_queue", "delete_queue"):
        request.update(queue=args.queue)
        if command == "purge_queue":
            banner = f"Purging queue '{args.queue}' in vhost '{vhost}' ..."
        else:
            request.update(if_empty=args.if_empty, if_unused=args.if_unused)
            cond = "".join([" if queue is empty" if args.if_empty else "",
                            " if queue is unused" if args.if_unused else ""])
            banner = f"Deleting queue '{args.queue}' on vhost '{vhost}'{cond} ..."
    elif command == "close_connection":
        request.update(name=args.name, reason=args.explanation)
        banner = f"Closing connection {args.name}, reason: {args.explanation}..."
    elif command == "close_all_connections":
        request.update(reason=args.explanation, limit=args.limit, **{"global": args.all_vhosts})
        where = "across all vhosts" if args.all_vhosts else f"in vhost {vhost}"
        banner = f"Closing all connections {where}, reason: {args.explanation}..."
    elif command == "export_definitions":
        quiet = quiet or args.file == "-"
        banner = f'Exporting definitions in JSON to a file at "{args.file}" ...'
    else:  # import_definitions
        source = "standard input" if args.file == "-" else f'a file at "{args.file}"'
        banner = f"Importing definitions in JSON from {source} ..."
        try:
            text = ((stdin or sys.stdin).read() if args.file == "-"
                    else Path(args.file).read_text())
        except OSError as exc:
            print(f"Error (argument validation): Bad argument: File {args.file} cannot be read: "
                  f"{exc.strerror}", file=err)
            return EXIT_REFUSED
        if not quiet:
            print(banner, file=out)
            banner = ""
        try:
            request["definitions"] = json.loads(text)
        except ValueError as exc:
            print(f"Error:\nFailed to deserialise input (format: JSON) (error: {exc})", file=err)
            return EXIT_REFUSED
    if banner and not quiet:
        print(banner, file=out)
    result, failed = send(data_dir, request, err, args.timeout)
    if failed is not None:
        return failed
    return _print_result(args, command, result, as_json, out)


def send(data_dir: Path, request: dict[str, Any], err: TextIO,
         timeout: float = 10.0) -> tuple[Any, int | None]:
    """One control request: ``(result, None)``, or ``(None, exit status)`` once rabbitmqctl's
    error text is printed (69 when the broker is down, else the operation's own status)."""
    try:
        return control.request(data_dir, request, timeout=timeout), None
    except control.BrokerUnreachable as exc:
        print(f"Error:\n{exc}", file=err)
        return None, EXIT_UNREACHABLE
    except control.ControlError as exc:
        print(f"Error:\n{exc}", file=err)
        return None, exc.exit_code or EXIT_REFUSED


def _print_result(args: argparse.Namespace, command: str, result: Any, as_json: bool,
                  out: TextIO) -> int:
    if command in LIST_BANNERS:
        if getattr(args, "offline", False):
            result = []  # one node, always up: no queue is on an offline node
        if as_json:
            print(json.dumps(result, separators=(",", ":")), file=out)
        else:
            headers = not (args.no_table_headers or args.silent)
            print(format_rows(result, headers=headers), file=out, end="")
    elif command == "status":
        print(json.dumps(result, separators=(",", ":")) if as_json else format_status(result),
              file=out)
    elif command == "delete_queue":
        if as_json:
            print(json.dumps({"result": "ok", "message_count": result}), file=out)
        else:
            print(f"Queue was successfully deleted with {result} ready messages", file=out)
    elif command == "close_all_connections":
        print(json.dumps({"closed": result}) if as_json else f"Closed {result} connections",
              file=out)
    elif command == "export_definitions":
        text = json.dumps(result, separators=(",", ":"))
        if args.file == "-":
            print(text, file=out)
        else:
            Path(args.file).write_text(text + "\n")
    elif command == "import_definitions" and not as_json:
        print("Successfully imported definitions", file=out)
    return EXIT_OK


def cell(value: Any) -> str:
    """A value as rabbitmqctl's table writes it: ``true``, ``[{"x-max-length",5}]``."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "[" + ",".join("{" + json.dumps(str(k)) + "," + _term(v) + "}"
                              for k, v in value.items()) + "]"
    if isinstance(value, list):
        return "[" + ",".join(_term(v) for v in value) + "]"
    return str(value)


def _term(value: Any) -> str:
    """A nested value: strings quoted, as in rabbitmqctl's table."""
    if isinstance(value, str):
        return json.dumps(value)
    return cell(value)


def format_rows(rows: list[dict[str, Any]], headers: bool = True) -> str:
    """TSV: a header row (none when there are no rows), then one line per row."""
    if not rows:
        return ""
    columns = list(rows[0])
    lines = ["\t".join(columns)] if headers else []
    lines += ["\t".join(cell(row[c]) for c in columns) for row in rows]
    return "\n".join(lines) + "\n"


def format_status(s: dict[str, Any]) -> str:
    """rabbitmqctl status's sections, for the facts Leveret has."""
    gb = 1 << 30
    listeners = "\n".join(f"Interface: {x['ip_address']}, port: {x['port']}, "
                          f"protocol: {x['protocol']}" for x in s["listeners"])
    alarms = "\n".join(s["alarms"]) or "(none)"
    totals = s["totals"]
    return "\n".join([
        f"Status of node {s['name']} ...", "Runtime", "",
        f"OS PID: {s['os_pid']}", f"Uptime (seconds): {s['uptime'] // 1000}",
        f"Product name: {s['product_name']}",
        f"RabbitMQ version: {s['rabbitmq_version']}", f"Node name: {s['name']}", "",
        "Data directory", "", f"Node data directory: {s['db_dir']}", "",
        "Alarms", "", alarms, "",
        "Memory", "", f"Total memory used: {s['mem_used'] / gb:.4f} gb",
        f"Calculation strategy: {s['mem_calculation_strategy']}",
        f"Memory high watermark computed to: {s['mem_limit'] / gb:.4f} gb", "",
        "File Descriptors", "", f"Total: {s['fd_used']}, limit: {s['fd_total']}",
        f"Sockets: {s['sockets_used']}, limit: {s['sockets_total']}", "",
        "Free Disk Space", "", f"Low free disk space watermark: {s['disk_free_limit'] / gb:.4f} gb",
        f"Free disk space: {s['disk_free'] / gb:.4f} gb", "",
        "Totals", "", f"Connection count: {totals['connection_count']}",
        f"Queue count: {totals['queue_count']}",
        f"Virtual host count: {totals['virtual_host_count']}", "",
        "Listeners", "", listeners,
    ])
