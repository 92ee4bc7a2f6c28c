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
    elif command == "status":  # JSON: rabbitmqctl's keys ("node" is the text's banner only)
        print(json.dumps({k: v for k, v in result.items() if k != "node"},
                         separators=(",", ":")) if as_json else format_status(result), file=out)
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


STATUS_SECTIONS = ("Runtime", "Plugins", "Data directory", "Config files", "Log file(s)",
                   "Alarms", "Memory", "File Descriptors", "Free Disk Space", "Totals",
                   "Listeners")


def _gb(n: int) -> str:
    """Bytes as rabbitmqctl status writes them: decimal gigabytes, at most 4 decimals."""
    return f"{round(n / 1e9, 4)} gb"


def format_status(s: dict[str, Any]) -> str:
    """rabbitmqctl status's text (3.10.8's sections and lines, without its bold headings),
    for the facts one Leveret node has: no Erlang lines, no plugins, no memory breakdown."""
    files = s["file_descriptors"]
    totals = s["totals"]
    limit = s["vm_memory_high_watermark_setting"]["relative"]
    sections = {
        "Runtime": [
            f"OS PID: {s['pid']}", f"OS: {s['os']}", f"Uptime (seconds): {s['uptime']}",
            f"Is under maintenance?: {str(s['is_under_maintenance']).lower()}",
            f"RabbitMQ version: {s['rabbitmq_version']}",
            f"RabbitMQ release series support status: {s['release_series_support_status']}",
            f"Product name: {s['product_name']}", f"Product version: {s['product_version']}",
            f"Node name: {s['node']}", f"Crypto library: {s['crypto_lib_version']}"],
        "Plugins": ["Enabled plugins:", "", *([f" * {p}" for p in s["active_plugins"]]
                                              or ["(none)"])],
        "Data directory": [f"Node data directory: {s['data_directory']}"],
        "Config files": [f" * {f}" for f in s["config_files"]],
        "Log file(s)": [f" * {f}" for f in s["log_files"]],
        "Alarms": list(s["alarms"]) or ["(none)"],
        "Memory": [
            f"Total memory used: {_gb(s['memory']['total']['rss'])}",
            f"Calculation strategy: {s['vm_memory_calculation_strategy']}",
            f"Memory high watermark setting: {limit} of available memory, computed to: "
            f"{_gb(s['vm_memory_high_watermark_limit'])}"],
        "File Descriptors": [f"Total: {files['total_used']}, limit: {files['total_limit']}",
                             f"Sockets: {files['sockets_used']}, limit: {files['sockets_limit']}"],
        "Free Disk Space": [f"Low free disk space watermark: {_gb(s['disk_free_limit'])}",
                            f"Free disk space: {_gb(s['disk_free'])}"],
        "Totals": [f"Connection count: {totals['connection_count']}",
                   f"Queue count: {totals['queue_count']}",
                   f"Virtual host count: {totals['virtual_host_count']}"],
        "Listeners": [f"Interface: {x['interface']}, port: {x['port']}, protocol: "
                      f"{x['protocol']}, purpose: {x['purpose']}" for x in s["listeners"]],
    }
    lines = [f"Status of node {s['node']} ..."]
    for title in STATUS_SECTIONS:
        lines += [title, "", *sections[title], ""]
    return "\n".join(lines[:-1])
