"""Users, vhosts, permissions, topic permissions and limits, compared with RabbitMQ 3.10.

Every case runs against Leveret and, when one answers on 127.0.0.1:5672 and
``rabbitmqctl`` works (it needs root), against RabbitMQ too; the expected
observation is the same literal for both, recorded from RabbitMQ 3.10.8. The
RabbitMQ target is skipped cleanly otherwise. Users and vhosts get a per-run
suffix so the shared RabbitMQ is left as it was found.

The user ``U`` has configure ``^(cfg|amq\\.gen).*``, write ``^w.*``, read ``^r.*``
on ``/``; ``guest`` sets up the objects it uses. ``CASES`` is the permission
table of RabbitMQ's access-control guide, operation by operation, allowed and refused.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pika
import pika.exceptions
import pytest

from leveret.broker import control

RABBITMQ = ("127.0.0.1", 5672)
SUFFIX = uuid.uuid4().hex[:6]
U, U2, T, L, NP = (f"acc-{n}-{SUFFIX}" for n in ("u", "u2", "t", "l", "np"))
VH_EMPTY, VH_LIM, VH_DEL = (f"acc-{n}-{SUFFIX}" for n in ("empty", "lim", "del"))
PW = "pw"
Q_R, Q_W, Q_CFG = (f"{p}-q-{SUFFIX}" for p in ("r", "w", "cfg"))
X_R, X_W = (f"{p}-x-{SUFFIX}" for p in ("r", "w"))
REFUSED = "ACCESS_REFUSED - access to {kind} '{name}' in vhost '{vhost}' refused for user '{user}'"
LOGIN_REFUSED = ("ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
                 "For details see the broker logfile.")


def refused(kind: str, name: str, user: str = U, vhost: str = "/") -> tuple[Any, ...]:
    return ("channel", 403, REFUSED.format(kind=kind, name=name, vhost=vhost, user=user))


# -- targets -----------------------------------------------------------------------------

class LeveretAdmin:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def __call__(self, command: str, **kw: Any) -> Any:
        return control.request(self.data_dir, {"command": command, **kw})


class RabbitAdmin:
    """The same requests through rabbitmqctl."""

    ARGS: ClassVar[dict[str, tuple[str, ...]]] = {"add_user": ("user", "password"), "delete_user": ("user",),
            "clear_password": ("user",), "add_vhost": ("vhost",), "delete_vhost": ("vhost",),
            "set_permissions": ("user", "configure", "write", "read"),
            "set_topic_permissions": ("user", "exchange", "write", "read"),
            "set_vhost_limits": ("definition",), "set_user_limits": ("user", "definition")}
    VHOST_FLAG = ("set_permissions", "set_topic_permissions", "set_vhost_limits")

    def __call__(self, command: str, **kw: Any) -> Any:
        args = ["rabbitmqctl", command]
        if command in self.VHOST_FLAG:
            args += ["-p", kw.get("vhost", "/")]
        for name in self.ARGS[command]:
            value = kw[name]
            args.append(json.dumps(value) if isinstance(value, dict) else value)
        subprocess.run(args, check=True, capture_output=True, timeout=60)


@dataclass
class Target:
    name: str
    port: int
    admin: Callable[..., Any]

    def connect(self, user: str = U, password: str = PW, vhost: str = "/") -> Any:
        return pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", self.port, vhost, pika.PlainCredentials(user, password),
            connection_attempts=1))

    def url(self, user: str = U, vhost: str = "/") -> str:
        return f"amqp://{user}:{PW}@127.0.0.1:{self.port}/{vhost.replace('/', '%2F')}"


def _rabbitmq_usable() -> bool:
    try:
        socket.create_connection(RABBITMQ, timeout=2).close()
    except OSError:
        return False
    if shutil.which("rabbitmqctl") is None:
        return False
    try:
        subprocess.run(["rabbitmqctl", "list_users"], check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return True


def setup_accounts(admin: Callable[..., Any]) -> None:
    for user in (U, U2, T, L, NP):
        admin("add_user", user=user, password=PW)
    admin("clear_password", user=NP)
    for vhost in (VH_EMPTY, VH_LIM, VH_DEL):
        admin("add_vhost", vhost=vhost)
    admin("set_permissions", user=U, vhost="/", configure=r"^(cfg|amq\.gen).*", write="^w.*",
          read="^r.*")
    admin("set_permissions", user=U2, vhost="/", configure=".*", write="^w", read=".*")
    for user in (T, NP):
        admin("set_permissions", user=user, vhost="/", configure=".*", write=".*", read=".*")
    admin("set_topic_permissions", user=T, vhost="/", exchange="amq.topic",
          write=r"^allowed\.", read=r"^r\.")
    for user, vhost in ((L, VH_LIM), (U, VH_DEL)):
        admin("set_permissions", user=user, vhost=vhost, configure=".*", write=".*", read=".*")
    admin("set_vhost_limits", vhost=VH_LIM, definition={"max-connections": 1, "max-queues": 1})
    admin("set_user_limits", user=L, definition={"max-channels": 1})


def teardown_accounts(admin: Callable[..., Any]) -> None:
    for command, kw in ([("delete_user", {"user": u}) for u in (U, U2, T, L, NP)]
                        + [("delete_vhost", {"vhost": v}) for v in (VH_EMPTY, VH_LIM, VH_DEL)]):
        try:
            admin(command, **kw)
        except Exception:
            pass


@pytest.fixture(scope="module", params=["leveret", "rabbitmq"])
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    if request.param == "rabbitmq":
        if not _rabbitmq_usable():
            pytest.skip("no RabbitMQ with a working rabbitmqctl on 127.0.0.1:5672")
        t = Target("rabbitmq", RABBITMQ[1], RabbitAdmin())
    else:
        broker = request.getfixturevalue("broker")
        t = Target("leveret", broker.port, LeveretAdmin(broker.data_dir))
    setup_accounts(t.admin)
    with t.connect("guest", "guest") as conn:
        ch = conn.channel()
        for q in (Q_R, Q_W, Q_CFG):
            ch.queue_declare(q, auto_delete=False)
        for x in (X_R, X_W):
            ch.exchange_declare(x, "direct")
        ch.exchange_declare(f"cfg-gone-{SUFFIX}", "direct")
    yield t
    with t.connect("guest", "guest") as conn:
        ch = conn.channel()
        for q in (Q_R, Q_W, Q_CFG, f"cfg-new-{SUFFIX}", f"cfg-dlx-ok-{SUFFIX}"):
            ch.queue_delete(q)
        for x in (X_R, X_W, f"cfg-x-{SUFFIX}", f"cfg-ae-ok-{SUFFIX}", f"cfg-gone-{SUFFIX}"):
            ch.exchange_delete(x)
    teardown_accounts(t.admin)


def observe(fn: Callable[[], Any]) -> tuple[Any, ...]:
    """What the client saw: ("ok",), ("channel"|"connection", code, text)."""
    try:
        fn()
        return ("ok",)
    except pika.exceptions.ChannelClosedByBroker as exc:
        return ("channel", exc.reply_code, exc.reply_text)
    except pika.exceptions.ConnectionClosedByBroker as exc:
        return ("connection", exc.reply_code, exc.reply_text)
    except (pika.exceptions.ProbableAuthenticationError,
            pika.exceptions.ProbableAccessDeniedError) as exc:
        match = re.search(r"\((\d+)\) ['\"](.*)['\"]", str(exc))
        assert match, str(exc)
        return ("connection", int(match.group(1)), match.group(2))


# -- the permission table --------------------------------------------------------------

def _on_channel(t: Target, user: str, action: Callable[[Any], Any]) -> None:
    with t.connect(user) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        action(ch)


def _publish(exchange: str, key: str = "k") -> Callable[[Any], Any]:
    return lambda ch: ch.basic_publish(exchange, key, b"x")


# (case id, operation, right checked, user, action on a channel, expected)
CASES: list[tuple[str, str, str, str, Callable[[Any], Any], tuple[Any, ...]]] = [
    ("queue_declare_allowed", "queue.declare", "configure", U,
     lambda ch: ch.queue_declare(f"cfg-new-{SUFFIX}"), ("ok",)),
    ("queue_declare_refused", "queue.declare", "configure", U,
     lambda ch: ch.queue_declare(f"x-q-{SUFFIX}"), refused("queue", f"x-q-{SUFFIX}")),
    ("queue_declare_server_named", "queue.declare", "configure", U,
     lambda ch: ch.queue_declare("", exclusive=True), ("ok",)),
    ("queue_declare_passive_unchecked", "queue.declare passive", "none", U,
     lambda ch: ch.queue_declare(Q_W, passive=True), ("ok",)),
    ("exchange_declare_allowed", "exchange.declare", "configure", U,
     lambda ch: ch.exchange_declare(f"cfg-x-{SUFFIX}", "direct"), ("ok",)),
    ("exchange_declare_refused", "exchange.declare", "configure", U,
     lambda ch: ch.exchange_declare(f"x-x-{SUFFIX}", "direct"),
     refused("exchange", f"x-x-{SUFFIX}")),
    ("exchange_declare_passive_unchecked", "exchange.declare passive", "none", U,
     lambda ch: ch.exchange_declare("amq.direct", passive=True), ("ok",)),
    ("queue_delete_allowed", "queue.delete", "configure", U,
     lambda ch: ch.queue_delete(f"cfg-absent-{SUFFIX}"), ("ok",)),
    ("queue_delete_refused", "queue.delete", "configure", U,
     lambda ch: ch.queue_delete(Q_R), refused("queue", Q_R)),
    ("exchange_delete_allowed", "exchange.delete", "configure", U,
     lambda ch: ch.exchange_delete(f"cfg-gone-{SUFFIX}"), ("ok",)),
    ("exchange_delete_refused", "exchange.delete", "configure", U,
     lambda ch: ch.exchange_delete(X_R), refused("exchange", X_R)),
    ("publish_allowed", "basic.publish", "write exchange", U, _publish(X_W), ("ok",)),
    ("publish_refused", "basic.publish", "write exchange", U, _publish(X_R),
     refused("exchange", X_R)),
    ("publish_refused_missing_exchange", "basic.publish", "write exchange", U,
     _publish(f"nope-{SUFFIX}"), refused("exchange", f"nope-{SUFFIX}")),
    ("publish_default_exchange_as_amq_default", "basic.publish", "write amq.default", U,
     _publish("", Q_W), refused("exchange", "amq.default")),
    ("consume_allowed", "basic.consume", "read queue", U,
     lambda ch: ch.basic_consume(Q_R, lambda *a: None), ("ok",)),
    ("consume_refused", "basic.consume", "read queue", U,
     lambda ch: ch.basic_consume(Q_W, lambda *a: None), refused("queue", Q_W)),
    ("get_allowed", "basic.get", "read queue", U, lambda ch: ch.basic_get(Q_R), ("ok",)),
    ("get_refused", "basic.get", "read queue", U, lambda ch: ch.basic_get(Q_W),
     refused("queue", Q_W)),
    ("get_refused_missing_queue", "basic.get", "read queue", U,
     lambda ch: ch.basic_get(f"missing-{SUFFIX}"), refused("queue", f"missing-{SUFFIX}")),
    ("purge_allowed", "queue.purge", "read queue", U, lambda ch: ch.queue_purge(Q_R), ("ok",)),
    ("purge_refused", "queue.purge", "read queue", U, lambda ch: ch.queue_purge(Q_CFG),
     refused("queue", Q_CFG)),
    ("queue_bind_allowed", "queue.bind", "write queue + read exchange", U,
     lambda ch: ch.queue_bind(Q_W, X_R, "k"), ("ok",)),
    ("queue_bind_refused_write_on_queue", "queue.bind", "write queue", U,
     lambda ch: ch.queue_bind(Q_R, X_R, "k"), refused("queue", Q_R)),
    ("queue_bind_refused_read_on_exchange", "queue.bind", "read exchange", U,
     lambda ch: ch.queue_bind(Q_W, X_W, "k"), refused("exchange", X_W)),
    ("queue_unbind_allowed", "queue.unbind", "write queue + read exchange", U,
     lambda ch: ch.queue_unbind(Q_W, X_R, "k"), ("ok",)),
    ("queue_unbind_refused", "queue.unbind", "read exchange", U,
     lambda ch: ch.queue_unbind(Q_W, "amq.direct", "k"), refused("exchange", "amq.direct")),
    ("exchange_bind_allowed", "exchange.bind", "write destination + read source", U,
     lambda ch: ch.exchange_bind(X_W, X_R, "k"), ("ok",)),
    ("exchange_bind_refused_write_on_destination", "exchange.bind", "write destination", U,
     lambda ch: ch.exchange_bind(X_R, X_R, "k"), refused("exchange", X_R)),
    ("exchange_bind_refused_read_on_source", "exchange.bind", "read source", U,
     lambda ch: ch.exchange_bind(X_W, X_W, "k"), refused("exchange", X_W)),
    ("exchange_unbind_allowed", "exchange.unbind", "write destination + read source", U,
     lambda ch: ch.exchange_unbind(X_W, X_R, "k"), ("ok",)),
    ("exchange_unbind_refused", "exchange.unbind", "read source", U,
     lambda ch: ch.exchange_unbind(X_W, "amq.direct", "k"), refused("exchange", "amq.direct")),
    ("dlx_allowed", "queue.declare + DLX", "write DLX + read queue", U2,
     lambda ch: ch.queue_declare(f"cfg-dlx-ok-{SUFFIX}",
                                 arguments={"x-dead-letter-exchange": X_W}), ("ok",)),
    ("dlx_refused_write_on_dlx", "queue.declare + DLX", "write DLX", U2,
     lambda ch: ch.queue_declare(f"cfg-dlx-{SUFFIX}",
                                 arguments={"x-dead-letter-exchange": "amq.fanout"}),
     refused("exchange", "amq.fanout", U2)),
    ("dlx_refused_read_on_queue", "queue.declare + DLX", "read queue", U,
     lambda ch: ch.queue_declare(f"cfg-dlx-{SUFFIX}",
                                 arguments={"x-dead-letter-exchange": X_W}),
     refused("queue", f"cfg-dlx-{SUFFIX}")),
    ("ae_allowed", "exchange.declare + AE", "write AE + read exchange", U2,
     lambda ch: ch.exchange_declare(f"cfg-ae-ok-{SUFFIX}", "direct",
                                    arguments={"alternate-exchange": X_W}), ("ok",)),
    ("ae_refused_write_on_ae", "exchange.declare + AE", "write AE", U2,
     lambda ch: ch.exchange_declare(f"cfg-ae-{SUFFIX}", "direct",
                                    arguments={"alternate-exchange": "amq.fanout"}),
     refused("exchange", "amq.fanout", U2)),
    ("ae_refused_read_on_exchange", "exchange.declare + AE", "read exchange", U,
     lambda ch: ch.exchange_declare(f"cfg-ae-{SUFFIX}", "direct",
                                    arguments={"alternate-exchange": X_W}),
     refused("exchange", f"cfg-ae-{SUFFIX}")),
    ("topic_publish_allowed", "basic.publish (topic)", "topic write", T,
     _publish("amq.topic", "allowed.x"), ("ok",)),
    ("topic_publish_refused", "basic.publish (topic)", "topic write", T,
     _publish("amq.topic", "other.x"),
     ("channel", 403, f"ACCESS_REFUSED - access to topic 'other.x' in exchange 'amq.topic' in "
                      f"vhost '/' refused for user '{T}'")),
    ("topic_not_checked_on_direct", "basic.publish (direct)", "none", T,
     _publish("amq.direct", "other.x"), ("ok",)),
    ("topic_bind_allowed", "queue.bind (topic)", "topic read", T,
     lambda ch: ch.queue_bind(ch.queue_declare("", exclusive=True).method.queue,
                              "amq.topic", "r.x"), ("ok",)),
    ("topic_bind_refused", "queue.bind (topic)", "topic read", T,
     lambda ch: ch.queue_bind(ch.queue_declare("", exclusive=True).method.queue,
                              "amq.topic", "x.x"),
     ("channel", 403, f"ACCESS_REFUSED - access to topic 'x.x' in exchange 'amq.topic' in "
                      f"vhost '/' refused for user '{T}'")),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_permission(target: Target, case: Any) -> None:
    _, _, _, user, action, expected = case
    assert observe(lambda: _on_channel(target, user, action)) == expected


# -- connection.open and login -------------------------------------------------------

def test_wrong_password_is_403(target: Target) -> None:
    assert observe(lambda: target.connect(U, "wrong")) == ("connection", 403, LOGIN_REFUSED)


def test_unknown_user_is_403(target: Target) -> None:
    assert observe(lambda: target.connect(f"nobody-{SUFFIX}")) == (
        "connection", 403, LOGIN_REFUSED)


@pytest.mark.parametrize("password", ["", PW])
def test_passwordless_user_cannot_use_plain(target: Target, password: str) -> None:
    assert observe(lambda: target.connect(NP, password)) == ("connection", 403, LOGIN_REFUSED)


def test_unknown_vhost_is_530(target: Target) -> None:
    assert observe(lambda: target.connect(vhost=f"nope-{SUFFIX}")) == (
        "connection", 530, f"NOT_ALLOWED - vhost nope-{SUFFIX} not found")


def test_vhost_without_permissions_is_530(target: Target) -> None:
    assert observe(lambda: target.connect(vhost=VH_EMPTY)) == (
        "connection", 530, f"NOT_ALLOWED - access to vhost '{VH_EMPTY}' refused for user '{U}'")


# -- limits ---------------------------------------------------------------------------

def test_vhost_and_user_limits(target: Target) -> None:
    first = target.connect(L, vhost=VH_LIM)
    try:
        assert observe(lambda: target.connect(L, vhost=VH_LIM)) == (
            "connection", 530, f"NOT_ALLOWED - access to vhost '{VH_LIM}' refused for user "
            f"'{L}': connection limit (1) is reached")
        ch = first.channel()
        q = f"lim-{SUFFIX}"
        assert observe(lambda: ch.queue_declare(q, auto_delete=True)) == ("ok",)
        ch2 = None
        assert observe(lambda: first.channel()) == (
            "connection", 530, f"NOT_ALLOWED - number of channels opened for user '{L}' has "
            "reached the maximum allowed user limit of (1)")
        del ch2
    finally:
        if first.is_open:
            first.close()
    with target.connect(L, vhost=VH_LIM) as conn:
        ch = conn.channel()
        assert observe(lambda: ch.queue_declare(f"lim2-{SUFFIX}")) == (
            "channel", 406, f"PRECONDITION_FAILED - cannot declare queue 'lim2-{SUFFIX}': queue "
            f"limit in vhost '{VH_LIM}' (1) is reached")


# -- vhost deletion -----------------------------------------------------------------

def test_deleting_a_vhost_closes_its_connections_with_320(target: Target) -> None:
    conn = target.connect(U, vhost=VH_DEL)
    conn.channel().queue_declare(f"doomed-{SUFFIX}", durable=True)
    target.admin("delete_vhost", vhost=VH_DEL)

    def wait() -> None:
        for _ in range(50):
            conn.process_data_events(0.1)

    kind, code, text = observe(wait)
    # RabbitMQ says "is down" instead when its vhost supervisor stops first (it had a queue).
    assert (kind, code) == ("connection", 320)
    assert re.fullmatch(f"CONNECTION_FORCED - vhost '{VH_DEL}' is (deleted|down)", text)
    if target.name == "leveret":
        assert text.endswith("is deleted")
        with target.connect("guest", "guest") as conn:
            assert observe(lambda: conn.channel().queue_declare(
                f"doomed-{SUFFIX}", passive=True))[1] == 404


# -- aio-pika and aiormq see the same codes -------------------------------------------------

async def test_aiormq_publish_and_consume_refused(target: Target) -> None:
    aiormq = pytest.importorskip("aiormq")
    conn = await aiormq.connect(target.url())
    try:
        ch = await conn.channel()
        with pytest.raises(aiormq.exceptions.ChannelAccessRefused) as info:
            await ch.basic_publish(b"x", exchange=X_R, routing_key="k")
        assert REFUSED.format(kind="exchange", name=X_R, vhost="/", user=U).split(" - ")[1] in (
            str(info.value))
        ch = await conn.channel()
        with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
            await ch.basic_consume(Q_W, lambda m: None)
        ch = await conn.channel()
        ok = await ch.basic_publish(b"x", exchange=X_W, routing_key="k")
        assert type(ok).__name__ == "Ack"
    finally:
        await conn.close()


async def test_aiopika_vhost_and_login_refused(target: Target) -> None:
    aio_pika = pytest.importorskip("aio_pika")
    aiormq = pytest.importorskip("aiormq")
    with pytest.raises(Exception) as info:
        await asyncio.wait_for(aio_pika.connect(target.url(vhost=VH_EMPTY)), 10)
    # aiormq does not expect a close in answer to connection.open (so with RabbitMQ too).
    assert "Connection.Close" in repr(info.value) or "NOT_ALLOWED" in repr(info.value)
    with pytest.raises(Exception) as info:
        await asyncio.wait_for(aio_pika.connect(
            f"amqp://{U}:wrong@127.0.0.1:{target.port}/"), 10)
    assert "ACCESS_REFUSED" in repr(info.value) or "403" in repr(info.value)
    conn = await aio_pika.connect(target.url())
    try:
        ch = await conn.channel()
        with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
            await ch.declare_queue(f"x-aio-{SUFFIX}")
    finally:
        await conn.close()
