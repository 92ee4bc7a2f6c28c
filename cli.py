"""The ``leveret`` command (also ``python -m leveret``).

    leveret [serve] [--host H]... [--port N] [--data-dir D] [--management-port N]
                    [--prometheus-port N] [--management-host H]... [--config FILE] [--log-level L]
                    [--ready-file PATH]
    leveret ctl [--data-dir D] COMMAND ...   (see ctl.py: set_policy, clear_policy, list_policies)
    leveret lab list | lab run NAME [--url URL] [--fast]   (teaching labs: see labs/)
    leveret --version

``main`` is the only place that touches the process: it reads ``sys.argv`` and
``os.environ`` (unless given others), configures logging to stderr and turns
the two expected failures into one line on stderr and an exit code, never a
traceback:

    2  configuration error (ConfigError; argparse usage errors are also 2)
    1  startup error: unusable data directory, port taken (StartupError)
    0  clean stop, including Ctrl-C

The node and its front doors are imported inside ``serve`` so that ``--version`` stays
fast and this module's tests do not need them.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

from leveret import __version__, ctl
from leveret.config import LOG_LEVELS, ConfigError, load_config
from leveret.labs import command as lab_command
from leveret.node import compiled

__all__ = ["DataDirError", "build_parser", "configure_logging", "main", "prepare_data_dir"]

PROG = "leveret"
EXIT_OK = 0
EXIT_STARTUP = 1
EXIT_CONFIG = 2
_SUBCOMMANDS = ("serve", "ctl", "lab")
# Flags that the serve subcommand passes to load_config, by Config field name.
_SERVE_FIELDS = ("host", "port", "data_dir", "management_port", "prometheus_port",
                 "management_host", "log_level", "tls_port", "tls_certfile", "tls_keyfile",
                 "tls_cafile", "tls_verify", "management_tls_port", "ready_file", "node_name", "etcd",
                 "cluster_name", "replication_port", "replication_host", "replication_advertised_port",
                 "min_in_sync", "lease_ttl", "queue_messages_in_memory")

log = logging.getLogger("leveret.cli")


class DataDirError(Exception):
    """The data directory cannot be created or written (reported like StartupError)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Leveret, an AMQP 0-9-1 message broker. With no command, runs 'serve'.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = commands.add_parser(
        "serve",
        help="run the broker (the default)",
        description="Run the broker until SIGINT or SIGTERM. Flags override LEVERET_* "
        "environment variables, which override the config file.",
    )
    # Values stay strings: load_config converts and validates them, so a bad
    # --port gets the same precise message (and exit code) as a bad LEVERET_PORT.
    serve.add_argument(
        "--host",
        action="append",
        metavar="H",
        help="interface to listen on; repeatable (default: all, IPv4 and IPv6)",
    )
    serve.add_argument("--port", metavar="N", help="AMQP port (default 5672; 0 = any free)")
    serve.add_argument("--data-dir", metavar="D", help="message store directory")
    serve.add_argument("--management-port", metavar="N",
                       help="management HTTP API port (default 15672; 0 = any free)")
    serve.add_argument("--prometheus-port", metavar="N",
                       help="Prometheus metrics port (default 15692; 0 = any free)")
    serve.add_argument(
        "--management-host",
        action="append",
        metavar="H",
        help="interface for the management and Prometheus listeners; repeatable (default: all)",
    )
    serve.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="TOML config file (default: $LEVERET_CONFIG, if set)",
    )
    serve.add_argument("--log-level", metavar="L", help=f"one of {', '.join(LOG_LEVELS)}")
    serve.add_argument("--queue-messages-in-memory", metavar="N",
                       help="ready messages a durable queue keeps in memory before paging to disk "
                            "(default 10000; 0 = no bound, RabbitMQ 3.10's behaviour)")
    serve.add_argument("--tls-port", metavar="N",
                       help="AMQPS port when a certificate is set (default 5671; 0 = any free)")
    serve.add_argument("--tls-certfile", metavar="F", help="server certificate (PEM) for AMQPS")
    serve.add_argument("--tls-keyfile", metavar="F", help="its private key (PEM)")
    serve.add_argument("--tls-cafile", metavar="F", help="CA certificates for client certificates")
    serve.add_argument("--tls-verify", metavar="none|peer", help="verify client certificates")
    serve.add_argument("--management-tls-port", metavar="N",
                       help="HTTPS management API port when a certificate is set "
                            "(default 15671; 0 = any free)")
    serve.add_argument("--ready-file", metavar="PATH",
                       help="once serving, write the bound ports here as JSON (atomically)")
    cluster = serve.add_argument_group("clustering", "on when --etcd is given")
    cluster.add_argument("--node-name", metavar="NAME", help="this node's name (default: host name)")
    cluster.add_argument("--etcd", metavar="URLS", help="etcd endpoints, comma-separated")
    cluster.add_argument("--cluster-name", metavar="NAME",
                         help="etcd key prefix shared by the cluster's nodes (default leveret)")
    cluster.add_argument("--replication-port", metavar="N",
                         help="port followers connect to (default 5679)")
    cluster.add_argument("--replication-host", metavar="H",
                         help="address other nodes dial (default: the first --host)")
    cluster.add_argument("--replication-advertised-port", metavar="N",
                         help="replication port other nodes dial, when a relay sits in front "
                              "(default: --replication-port)")
    cluster.add_argument("--min-in-sync", metavar="N",
                         help="copies a batch needs before it is confirmed (default 2)")
    cluster.add_argument("--lease-ttl", metavar="S",
                         help="seconds of the leader's etcd lease (default 5)")
    ctl.add_parser(commands)
    lab_command.add_parser(commands)
    return parser


def main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    stderr: TextIO | None = None,
    stdout: TextIO | None = None,
) -> int:
    """Run the command line; return the process exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    env = os.environ if env is None else env
    err = sys.stderr if stderr is None else stderr
    # No subcommand means serve, with or without serve's flags.
    if not args_list or (
        args_list[0].startswith("-") and args_list[0] not in ("-h", "--help", "--version")
    ):
        args_list.insert(0, "serve")
    try:
        args = build_parser().parse_args(args_list)
    except SystemExit as exc:  # --help, --version, usage errors: keep main() -> int
        return exc.code if isinstance(exc.code, int) else EXIT_OK if exc.code is None else 1
    if args.command == "ctl":
        return ctl.run(args, env, sys.stdout if stdout is None else stdout, err)
    if args.command == "lab":
        return lab_command.run(args, sys.stdout if stdout is None else stdout, err)
    try:
        return _serve(args, env, err)
    except KeyboardInterrupt:  # Ctrl-C before run() installed its own handlers
        return EXIT_OK


def _serve(args: argparse.Namespace, env: Mapping[str, str], err: TextIO) -> int:
    try:
        config = load_config({f: getattr(args, f) for f in _SERVE_FIELDS}, env, args.config)
    except ConfigError as exc:
        return _fail(err, str(exc), EXIT_CONFIG)
    configure_logging(config.log_level, err)
    try:
        prepare_data_dir(config.data_dir)
    except DataDirError as exc:
        return _fail(err, str(exc), EXIT_STARTUP)

    try:
        node = importlib.import_module("leveret.node.process")
        amqp = importlib.import_module("leveret.amqp.server")
        # The management API and Prometheus run beside the AMQP listeners on the same loop;
        # the node cannot import the front doors (it sits below them), so they are handed in.
        management = importlib.import_module("leveret.management_ui")
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("leveret."):
            raise  # a missing third-party package: keep its traceback
        return _fail(err, f"the module {exc.name} is missing from this installation",
                     EXIT_STARTUP)
    log.info("leveret %s starting; data dir %s", __version__, config.data_dir)
    log.info("%s", compiled.describe())
    # Clustering is chosen here, once: without --etcd its package is not even imported.
    runner = importlib.import_module("leveret.cluster.node") if config.etcd else node
    try:
        runner.run(config, [amqp.AmqpListeners(), *management.services()])
    except node.StartupError as exc:
        return _fail(err, str(exc), EXIT_STARTUP)
    return EXIT_OK


def _fail(err: TextIO, message: str, code: int) -> int:
    one_line = " ".join(message.split("\n"))
    print(f"{PROG}: error: {one_line}", file=err, flush=True)
    return code


def prepare_data_dir(path: Path) -> None:
    """Create the data directory if missing; check it is a writable directory.

    Checked here, before the server starts, so that the user gets one clear
    line naming the path rather than an error from deep inside the store.
    Writability is probed by creating a file: os.access() is wrong for root
    and for some network filesystems.
    """
    if path.exists() and not path.is_dir():
        raise DataDirError(f"data directory {path} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataDirError(f"cannot create data directory {path}: {exc.strerror or exc}") from None
    try:
        with tempfile.TemporaryFile(dir=path, prefix=".leveret-probe-"):
            pass
    except OSError as exc:
        raise DataDirError(
            f"data directory {path} is not writable: {exc.strerror or exc}"
        ) from None


class _Formatter(logging.Formatter):
    """``2026-11-22 10:00:00.123 [info] leveret.amqp: message`` (RabbitMQ-like)."""

    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s.%(msecs)03d [%(levelname)s] %(name)s: %(message)s",
            datefmt="%Y-%m-%d %H:%M:%S",
        )

    def format(self, record: logging.LogRecord) -> str:
        # Lower-case the level on a copy: other handlers see the record unchanged.
        record = logging.makeLogRecord(record.__dict__)
        record.levelname = record.levelname.lower()
        return super().format(record)


def configure_logging(level: str, stream: TextIO) -> logging.Handler:
    """Send log records at ``level`` and above to ``stream``.

    The root logger is process-wide state, so only the entry point touches it;
    calling this again replaces the handler it installed before (tests call
    main() more than once per process) and leaves other handlers alone.
    """
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_Formatter())
    setattr(handler, _HANDLER_MARK, True)
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler


_HANDLER_MARK = "_leveret_cli"
