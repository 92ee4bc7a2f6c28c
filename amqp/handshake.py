"""The connection class of AMQP: the handshake as a transition table.

``HEADER`` (waiting for the protocol header) → ``START`` (connection.start
sent, waiting for start-ok: SASL login) → ``TUNE`` (waiting for tune-ok: the
negotiated frame_max, channel_max and heartbeat, checked as rabbit_reader
does) → ``OPEN`` (waiting for connection.open: vhost, node connection limit,
vhost and user limits, the vhost permission) → ``RUNNING`` → ``CLOSING`` →
``CLOSED``. ``HANDSHAKE`` is the table: (state, method) → (handler, next
state); ``connection.close`` and ``close-ok`` are accepted in every state;
anything else is 504 "unexpected method in connection state ...". The
handlers work on a ``Connection`` (``connection.py``), which owns the
sockets' sans-IO state and calls ``connection_method`` for channel 0.
"""

from __future__ import annotations

import logging
import platform
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pamqp import commands

import leveret
from leveret.amqp.codec import class_and_method, encode_method
from leveret.broker import auth
from leveret.model.errors import ACCESS_REFUSED, CHANNEL_ERROR, NOT_ALLOWED, ConnectionError_

if TYPE_CHECKING:
    from leveret.amqp.connection import Connection

log = logging.getLogger("leveret.amqp.connection")

HEADER, START, TUNE, OPEN, RUNNING, CLOSING, CLOSED = range(7)
# RabbitMQ's names for the states, used in its error texts.
STATE_NAMES = ("pre_init", "starting", "tuning", "opening", "running", "closing", "closed")

_CONNECTION_CLOSE = commands.Connection.Close.index
_CONNECTION_CLOSE_OK = commands.Connection.CloseOk.index

SERVER_CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,  # amqp/reply_to.py
}


def check_negotiated(field: str, value: int, minimum: int, maximum: int) -> None:
    """A tune-ok value must lie in [minimum, maximum]; 0 is "no limit". RabbitMQ's texts."""
    if value and value < minimum:
        raise ConnectionError_(
            NOT_ALLOWED, f"negotiated {field} = {value} is lower than the minimum allowed "
            f"value ({minimum})", (10, 30))
    if maximum and (value == 0 or value > maximum):
        detail = " (no limit)" if value == 0 and field == "channel_max" else ""
        raise ConnectionError_(
            NOT_ALLOWED, f"negotiated {field} = {value}{detail} is higher than the maximum "
            f"allowed value ({maximum})", (10, 30))


def send_start(conn: Connection) -> None:
    conn.state = START
    props: dict[str, Any] = {
        "product": "Leveret",
        "version": leveret.__version__,
        "platform": f"Python {platform.python_version()}",
        "copyright": "Leveret contributors",
        "information": "Licensed under the Apache License 2.0",
        "cluster_name": conn.broker.cluster_name,
        "capabilities": dict(SERVER_CAPABILITIES),
    }
    conn.write(encode_method(0, commands.Connection.Start(
        version_major=0, version_minor=9, server_properties=props,
        mechanisms=" ".join(auth.mechanisms(conn.peer_cert_user)), locales="en_US")))


def connection_method(conn: Connection, method: Any, index: int) -> None:
    state = conn.state
    if index == _CONNECTION_CLOSE:
        conn.write(encode_method(0, commands.Connection.CloseOk()))
        conn.end()
        # As RabbitMQ: the client, which started the close, closes the socket after
        # reading close-ok; the server only closes it if the client does not.
        conn.peer_closes = True
        return
    if index == _CONNECTION_CLOSE_OK:
        conn.end()
        return
    step = HANDSHAKE.get((state, index))
    if step is None:
        raise ConnectionError_(CHANNEL_ERROR,
                               f"unexpected method in connection state {STATE_NAMES[state]}",
                               class_and_method(index))
    handler, next_state = step
    handler(conn, method)
    if conn.state == state:  # a handler that closed the connection has moved it already
        conn.state = next_state


def start_ok(conn: Connection, method: commands.Connection.StartOk) -> None:
    conn.client_properties = dict(method.client_properties or {})
    accounts = conn.broker.accounts
    user = auth.authenticate(method.mechanism, method.response, accounts,
                             conn.peer, conn.config, conn.peer_cert_user)
    accounts.auth_attempts["total"] += 1
    accounts.auth_attempts["succeeded" if user is not None else "failed"] += 1
    if user is None:
        if not conn.client_capability("authentication_failure_close"):
            # Clients that cannot handle the close method just see the socket close.
            conn.end()
            return
        raise ConnectionError_(
            ACCESS_REFUSED,
            f"Login was refused using authentication mechanism {method.mechanism}. "
            "For details see the broker logfile.")
    conn.user = user
    conn.auth_mechanism = method.mechanism
    conn.write(encode_method(0, commands.Connection.Tune(
        channel_max=conn.config.channel_max, frame_max=conn.config.frame_max,
        heartbeat=conn.config.heartbeat)))


def open_vhost(conn: Connection, method: commands.Connection.Open) -> None:
    vhost = conn.broker.vhosts.get(method.virtual_host)
    if vhost is None:
        raise ConnectionError_(NOT_ALLOWED, f"vhost {method.virtual_host} not found",
                               (10, 40))
    limit = conn.config.connection_max
    if limit and len(conn.broker.connections) >= limit:
        raise ConnectionError_(NOT_ALLOWED, f"connection refused: node connection limit "
                               f"({limit}) is reached", (10, 40))
    user = conn.user or ""
    conn.broker.accounts.check_connection(user, vhost)
    if not conn.broker.accounts.control.can_open(user, vhost.name):
        raise ConnectionError_(NOT_ALLOWED, f"access to vhost '{vhost.name}' refused for "
                               f"user '{user}'", (10, 40))
    conn.vhost = vhost
    conn.broker.connections.add(conn)
    conn.write(encode_method(0, commands.Connection.OpenOk()))
    log.info("connection %s opened (user %r, vhost %r)", conn.name, conn.user, vhost.name)


def update_secret(conn: Connection, method: commands.Connection.UpdateSecret) -> None:
    conn.write(encode_method(0, commands.Connection.UpdateSecretOk()))


def tune_ok(conn: Connection, m: commands.Connection.TuneOk) -> None:
    # As rabbit_reader's validate_negotiated_integer_value: 0 means "no limit",
    # which is above any limit we proposed, so it is refused like a larger value.
    check_negotiated("frame_max", m.frame_max, 4096, conn.config.frame_max)
    check_negotiated("channel_max", m.channel_max, 0, conn.config.channel_max)
    conn.frame_max = m.frame_max
    conn._frames.frame_max = m.frame_max
    conn.channel_max = m.channel_max
    conn.heartbeat = m.heartbeat


# The handshake as data: (state, connection-class method) -> (handler, next state).
# Anything not here (except close/close-ok, accepted everywhere) is 504 "unexpected
# method in connection state ...", as RabbitMQ's rabbit_reader answers.
HANDSHAKE: dict[tuple[int, int], tuple[Callable[[Connection, Any], None], int]] = {
    (START, commands.Connection.StartOk.index): (start_ok, TUNE),
    (TUNE, commands.Connection.TuneOk.index): (tune_ok, OPEN),
    (OPEN, commands.Connection.Open.index): (open_vhost, RUNNING),
    (RUNNING, commands.Connection.UpdateSecret.index): (update_secret, RUNNING),
}
