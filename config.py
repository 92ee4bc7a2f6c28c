"""Broker configuration: one frozen ``Config`` value, built once and passed in.

Theory of operation. ``load_config`` layers four sources, highest first:

    command-line flags  >  LEVERET_* environment variables  >  TOML file  >  defaults

Every field has one *kind* (int, float, str, path, list of strings) which fixes
how it is read from text (flags, environment) and from TOML (typed values, so
``port = "5672"`` is an error rather than a silent conversion), and at most one
*check* (a range or a choice); kinds and checks live in ``config_values.py``. A
value is converted and checked where it is read, so a bad value is reported with
the key and the source it came from, as
one line: ``invalid port in environment variable LEVERET_PORT: expected an
integer, got 'abc'``. Lower layers are still validated even when a higher one
overrides them: a broken config file is an error, not a latent surprise.

Nothing here reads ``os.environ`` or ``sys.argv`` on its own (apart from the
dataclass default for ``data_dir``); the caller injects them (docs/STYLE.md §8).
``Config.__post_init__`` re-runs the checks, so a hand-built invalid ``Config``
cannot exist either.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from leveret.config_values import (
    Check,
    Invalid,
    Kind,
    choice,
    from_text,
    from_toml,
    int_range,
    names,
    names_one,
    no_check,
    non_empty,
    non_negative_float,
    positive_float,
)

__all__ = [
    "CONFIG_ENV_VAR",
    "ENV_PREFIX",
    "LOG_LEVELS",
    "Config",
    "ConfigError",
    "default_data_dir",
    "env_var",
    "flag",
    "load_config",
]

ENV_PREFIX = "LEVERET_"
# Not a Config field: it names the file the other fields may come from.
CONFIG_ENV_VAR = "LEVERET_CONFIG"

# Limits, with where they come from.
MAX_PORT = 65535
# AMQP 0-9-1 §4.2.3 frame-min-size: every peer must accept frames this large,
# so a smaller frame_max could not carry even a connection.tune.
FRAME_MIN_SIZE = 4096
# connection.tune carries frame-max as a 32-bit "long".
MAX_FRAME_MAX = 2**32 - 1
# connection.tune carries channel-max and heartbeat as 16-bit "short"s.
MAX_SHORT = 65535
# RabbitMQ refuses max_message_size above 512 MiB; so do we.
MAX_MESSAGE_SIZE_LIMIT = 536_870_912
# RabbitMQ's level names (it also has "none"; use "critical" to quieten us).
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


class ConfigError(Exception):
    """A configuration value is missing, malformed or out of range.

    ``str(error)`` is a complete one-line message naming the key and its source.
    """


def default_data_dir(env: Mapping[str, str]) -> Path:
    """``$XDG_DATA_HOME/leveret``, else ``~/.local/share/leveret``.

    As the XDG base-directory spec says, an empty or relative XDG_DATA_HOME is
    ignored.
    """
    xdg = env.get("XDG_DATA_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "leveret"
    home = env.get("HOME")
    base = Path(home) if home else Path.home()
    return base / ".local" / "share" / "leveret"


@dataclass(frozen=True)
class Config:
    """Everything the broker can be told at startup. Sizes are bytes, times seconds."""

    # () means every interface, IPv4 and IPv6, as RabbitMQ does (the server
    # binds with host=None).
    host: tuple[str, ...] = ()
    port: int = 5672  # 0 = any free port (tests)
    data_dir: Path = field(default_factory=lambda: default_data_dir(os.environ))
    management_port: int = 15672  # 0 = any free port
    prometheus_port: int = 15692  # 0 = any free port
    # Scrapes of the Prometheus listener need HTTP Basic credentials of a monitoring user or
    # an administrator; off, they are open, as RabbitMQ's (management_ui/metrics_app.py).
    prometheus_authentication: bool = False
    # Interfaces of the management and Prometheus listeners; () = every interface, as ``host``.
    management_host: tuple[str, ...] = ()
    # A definitions file (RabbitMQ's JSON export) imported at start, as RabbitMQ's
    # load_definitions; "" = none. Validated whole before anything is applied.
    load_definitions: str = ""
    frame_max: int = 131072
    channel_max: int = 2047
    heartbeat: int = 60  # 0 disables heartbeats
    max_message_size: int = 134_217_728  # 128 MiB, RabbitMQ's default
    default_user: str = "guest"
    default_pass: str = "guest"
    default_vhost: str = "/"
    # Users that may only connect from localhost, as RabbitMQ's loopback_users.
    loopback_users: tuple[str, ...] = ("guest",)
    disk_free_limit: int = 50_000_000
    # 0: free disk space is the filesystem's. Otherwise the data dir behaves as a disk of
    # this many bytes for the disk alarm (a quota; tests use it to fake a small disk).
    disk_capacity: int = 0
    # Fraction of RAM above which publishers are blocked (RabbitMQ's vm_memory_high_watermark).
    memory_high_watermark: float = 0.6
    # Fraction of that limit above which queues page messages out of memory (RabbitMQ's
    # vm_memory_high_watermark_paging_ratio; queues/paging.py). 0: always page.
    memory_high_watermark_paging_ratio: float = 0.5
    # Ready messages a durable queue keeps in memory before it pages new ones to disk only
    # (queues/paging.py); 0: no bound, the backlog stays in memory until the paging ratio
    # above (RabbitMQ 3.10's classic queues).
    queue_messages_in_memory: int = 10_000
    # Stored entries of a deleted durable queue or stream removed per store transaction
    # (persistence/lmdb_drops.py): other queues' commits interleave with these slices.
    queue_delete_slice: int = 2048
    log_level: str = "info"
    handshake_timeout: float = 10.0
    # Most AMQP connections the node accepts (RabbitMQ's connection_max); 0 = no limit.
    connection_max: int = 0
    # Most delayed messages one delayed exchange releases per second (broker/delayed.py):
    # a backlog due at once, e.g. after downtime, goes out at this rate, not in one burst.
    delayed_release_rate: int = 20_000
    # AMQPS (node/tls.py): a listener on tls_port when tls_certfile is set (0 = any free port).
    tls_port: int = 5671
    tls_certfile: Path | None = None
    tls_keyfile: Path | None = None  # None: the key is in tls_certfile
    tls_cafile: Path | None = None  # CAs that client certificates must chain to
    tls_verify: str = "none"  # "peer": ask for a client certificate and verify it
    tls_fail_if_no_peer_cert: bool = False  # with "peer": refuse clients without one
    # Where EXTERNAL takes the user name from (RabbitMQ's ssl_cert_login_from).
    tls_cert_login_from: str = "distinguished_name"
    # HTTPS for the management API (RabbitMQ's management.ssl.port) with the same
    # certificate settings, when tls_certfile is set (0 = any free port).
    management_tls_port: int = 15671
    # Written (atomically, as JSON with the bound ports) once every listener and the
    # control socket are up (node/ready_file.py); None: no file.
    ready_file: Path | None = None
    # HTTP connection bounds (management API over HTTP and HTTPS, Prometheus), as cowboy's
    # under RabbitMQ's management.tcp.request_timeout / idle_timeout (management_ui/guard.py).
    # Seconds a connection has to send a request's complete headers, counted from its opening
    # or from its previous response; an idle keep-alive connection is closed after it too.
    management_request_timeout: float = 5.0
    # Longest silence while a request's body arrives before the connection is closed.
    management_idle_timeout: float = 60.0
    # Origins besides each listener's own whose state-changing requests are accepted (the
    # console behind a proxy that rewrites Host), as "https://mq.example.com"; any other
    # Origin is refused (403): a page elsewhere cannot use the browser's credentials.
    management_allowed_origins: tuple[str, ...] = ()
    # Seconds between the management plane's samples of every object's counters (rates and
    # chart history, management_ui/sampler.py): RabbitMQ's collect_statistics_interval
    # (which is in milliseconds, default 5000).
    collect_statistics_interval: float = 5.0
    # Clustering (leveret.cluster): on when ``etcd`` names at least one endpoint; otherwise
    # the node is the single broker it always was and none of these is read.
    # This node's name in the cluster (etcd keys, the in-sync set); "" = the host name.
    node_name: str = ""
    etcd: tuple[str, ...] = ()  # etcd client URLs, e.g. http://127.0.0.1:2379
    cluster_name: str = "leveret"  # the etcd key prefix: nodes sharing it form one cluster
    replication_port: int = 5679  # where this node's leader side listens for followers
    replication_host: str = ""  # the address other nodes dial; "" = the first host, else 127.0.0.1
    # The replication port other nodes dial, when a relay (NAT, a TCP proxy) sits in front
    # of ``replication_port``; 0 = ``replication_port`` itself.
    replication_advertised_port: int = 0
    # Copies (the leader's included) a batch must have before it is confirmed.
    min_in_sync: int = 2
    # Seconds the leader's etcd lease lives unrenewed: the failover time, and how long a
    # leader cut off from etcd may go on confirming (it stops before then).
    lease_ttl: int = 5
    # Not a setting: the names a file, the environment or a flag set (``load_config``).
    # A listener on a *default* HTTP port that is taken is skipped with a warning, so a
    # Leveret beside a RabbitMQ (which holds 15672/15692) still serves AMQP; one the
    # operator asked for is a startup error, like the AMQP port.
    explicit: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if f.name == "explicit":
                continue
            problem = _FIELDS[f.name].check(getattr(self, f.name))
            if problem is not None:
                raise ConfigError(f"invalid {f.name} in Config(): {problem}")
        problem = _check_ports(self.port, self.management_port)
        if problem is not None:
            raise ConfigError(f"invalid Config(): {problem}")


def _check_ports(port: int, management_port: int) -> str | None:
    if port == management_port and port != 0:
        return f"port and management_port are both {port}"
    return None


@dataclass(frozen=True)
class _Field:
    kind: Kind
    check: Check = no_check


_FIELDS: dict[str, _Field] = {
    "host": _Field("strs", names("host")),
    "port": _Field("int", int_range(0, MAX_PORT, " (0 = any free port)")),
    "data_dir": _Field("path"),
    "management_port": _Field("int", int_range(0, MAX_PORT, " (0 = any free port)")),
    "prometheus_port": _Field("int", int_range(0, MAX_PORT, " (0 = any free port)")),
    "prometheus_authentication": _Field("bool"),
    "management_host": _Field("strs", names("host")),
    "load_definitions": _Field("str"),
    "frame_max": _Field("int", int_range(FRAME_MIN_SIZE, MAX_FRAME_MAX)),
    # The spec lets 0 mean "no limit"; we ask for the number (65535) instead.
    "channel_max": _Field("int", int_range(1, MAX_SHORT)),
    "heartbeat": _Field("int", int_range(0, MAX_SHORT, " (0 = disabled)")),
    "max_message_size": _Field("int", int_range(1, MAX_MESSAGE_SIZE_LIMIT)),
    "default_user": _Field("str", non_empty),
    "default_pass": _Field("str"),
    "default_vhost": _Field("str", non_empty),
    "loopback_users": _Field("strs", names("user")),
    "disk_free_limit": _Field("int", int_range(0, 2**63 - 1)),
    "disk_capacity": _Field("int", int_range(0, 2**63 - 1)),
    "memory_high_watermark": _Field("float", positive_float),
    "memory_high_watermark_paging_ratio": _Field("float", non_negative_float),
    "queue_messages_in_memory": _Field("int", int_range(0, 2**31 - 1, " (0 = no bound)")),
    "queue_delete_slice": _Field("int", int_range(1, 2**31 - 1)),
    "log_level": _Field("str", choice(*LOG_LEVELS)),
    "handshake_timeout": _Field("float", positive_float),
    "connection_max": _Field("int", int_range(0, 2**31 - 1, " (0 = no limit)")),
    "delayed_release_rate": _Field("int", int_range(1, 2**31 - 1)),
    "tls_port": _Field("int", int_range(0, MAX_PORT, " (0 = any free port)")),
    "tls_certfile": _Field("path"),
    "tls_keyfile": _Field("path"),
    "tls_cafile": _Field("path"),
    "tls_verify": _Field("str", choice("none", "peer")),
    "tls_fail_if_no_peer_cert": _Field("bool"),
    "tls_cert_login_from": _Field("str", choice("distinguished_name", "common_name")),
    "management_tls_port": _Field("int", int_range(0, MAX_PORT, " (0 = any free port)")),
    "ready_file": _Field("path"),
    "management_request_timeout": _Field("float", positive_float),
    "management_idle_timeout": _Field("float", positive_float),
    "collect_statistics_interval": _Field("float", positive_float),
    "management_allowed_origins": _Field("strs", names("origin")),
    "node_name": _Field("str", names_one("node name")),
    "etcd": _Field("strs", names("etcd endpoint")),
    "cluster_name": _Field("str", names_one("cluster name")),
    "replication_port": _Field("int", int_range(0, MAX_PORT, " (0 = any free port)")),
    "replication_host": _Field("str"),
    "replication_advertised_port": _Field(
        "int", int_range(0, MAX_PORT, " (0 = the replication_port)")
    ),
    "min_in_sync": _Field("int", int_range(1, 64)),
    # etcd grants no lease shorter than 2 s.
    "lease_ttl": _Field("int", int_range(2, 3600)),
}
assert set(_FIELDS) == {f.name for f in dataclasses.fields(Config)} - {"explicit"}


def _normalise(name: str, value: Any) -> Any:
    """Small, unambiguous clean-ups applied whatever the source."""
    if name == "log_level" and isinstance(value, str):
        return value.strip().lower()
    if name in ("host", "management_host") and isinstance(value, tuple):
        return tuple(dict.fromkeys(value))  # binding one address twice would fail
    return value


# --- loading ----------------------------------------------------------------


def env_var(name: str) -> str:
    """The environment variable for a field: ``port`` -> ``LEVERET_PORT``."""
    return ENV_PREFIX + name.upper()


def flag(name: str) -> str:
    """The command-line flag for a field: ``data_dir`` -> ``--data-dir``."""
    return "--" + name.replace("_", "-")


def load_config(
    argv_options: Mapping[str, Any],
    env: Mapping[str, str],
    config_file: Path | None,
) -> Config:
    """Build a Config from flags > LEVERET_* env > TOML file > defaults.

    ``argv_options`` maps field names to flag values (strings as typed, or
    already-typed values; ``host`` may be a list from a repeated flag); None
    means "not given". ``config_file`` is the ``--config`` flag; when None,
    ``LEVERET_CONFIG`` from ``env`` names the file, if set. Raises ConfigError.
    """
    unknown = set(argv_options) - set(_FIELDS)
    if unknown:  # a caller's bug, not a user's
        raise ValueError(f"unknown config option(s): {', '.join(sorted(unknown))}")

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}

    def take(name: str, source: str, read: Callable[[], Any]) -> None:
        try:
            value = _normalise(name, read())
            problem = _FIELDS[name].check(value)
        except Invalid as exc:
            problem = str(exc)
        if problem is not None:
            raise ConfigError(f"invalid {name} in {source}: {problem}")
        values[name], sources[name] = value, source

    # Lowest layer first; each later layer overwrites.
    path, path_source = _config_path(env, config_file)
    if path is not None:
        for name, raw in _read_toml(path, path_source).items():
            kind = _FIELDS[name].kind
            take(name, f"config file {path}", partial(_toml_value, kind, raw, path, name))

    for name, spec in _FIELDS.items():
        var = env_var(name)
        if var in env:
            take(name, f"environment variable {var}", partial(from_text, spec.kind, env[var]))

    for name, raw in argv_options.items():
        if raw is None:
            continue
        kind = _FIELDS[name].kind
        take(name, f"command-line flag {flag(name)}", partial(_flag_value, kind, raw))

    if "data_dir" not in values:
        values["data_dir"] = default_data_dir(env)  # the injected env, not os.environ
    port = values.get("port", Config.port)
    management_port = values.get("management_port", Config.management_port)
    problem = _check_ports(port, management_port)
    if problem is not None:
        where = ", ".join(
            f"{n} from {sources.get(n, 'default')}" for n in ("port", "management_port")
        )
        raise ConfigError(f"invalid ports: {problem} ({where})")
    return Config(**values, explicit=frozenset(sources))


def _config_path(env: Mapping[str, str], config_file: Path | None) -> tuple[Path | None, str]:
    if config_file is not None:
        return Path(config_file).expanduser(), "command-line flag --config"
    text = env.get(CONFIG_ENV_VAR, "")
    if text:
        return Path(text).expanduser(), f"environment variable {CONFIG_ENV_VAR}"
    return None, ""


def _read_toml(path: Path, source: str) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(
            f"cannot read config file {path} (from {source}): {exc.strerror or exc}"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    for key in data:
        if key not in _FIELDS:
            close = difflib.get_close_matches(key, list(_FIELDS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown key {key!r} in config file {path}{hint}")
    return data


def _toml_value(kind: Kind, raw: Any, path: Path, name: str) -> Any:
    value = from_toml(kind, raw)
    if name == "data_dir" and not value.is_absolute():
        # Relative to the file, not to wherever the broker happens to be started.
        value = path.parent / value
    return value


def _flag_value(kind: Kind, raw: Any) -> Any:
    if isinstance(raw, str):
        return from_text(kind, raw)
    if kind == "strs" and isinstance(raw, (list, tuple)):
        # A repeated flag (--host a --host b,c): each item may be comma-separated.
        return tuple(h for item in raw for h in from_text(kind, str(item)))
    return from_toml(kind, raw)
