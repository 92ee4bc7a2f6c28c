"""Every write route of the management API answers only after the commit that records it.

For each route: set up what it needs, send the request, SIGKILL the broker as soon as the
answer arrives, restart it on the same data dir, and check the change is there (declared,
bound, set: present; deleted, purged, cleared: gone). ``CASES`` and ``NOT_DURABLE``
together name every PUT, POST and DELETE of ``api.ROUTES``: a new write route without a
case fails ``test_every_write_route_has_a_case``.

Setups need no sleep: they are HTTP writes (answered after their commit, the property
under test) or publishes followed by a durable redeclare on the same channel (its "-ok"
follows the commit of all that came before it). The bulky cases (a queue of
``BIG_QUEUE`` messages deleted, an import of ``BIG_IMPORT`` queues and bindings) make
the commit long enough that an answer sent before it is caught every time; for the
others, ``keep_the_store_busy`` makes the request wait behind other writes, as on a
loaded broker.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pika
import pytest

from leveret.management_ui import api as management_api
from leveret.management_ui.router import WRITE_METHODS
from tests.integration.conftest import HttpApi

V = "%2F"
BIG_QUEUE = 20_000  # messages in the queue deleted (its commit removes every entry)
BIG_IMPORT = 8_000  # queues, and as many bindings, in the imported file
BALLAST = 10_000  # persistent messages being written when each request under test arrives
PERSISTENT = pika.BasicProperties(delivery_mode=2)
GUEST = "Basic " + base64.b64encode(b"guest:guest").decode()


@dataclass
class Ctx:
    broker: Any
    name: str

    def ok(self, method: str, path: str, body: Any = None, want: tuple[int, ...] = (201, 204),
           ) -> Any:
        """The request, waiting as long as the answer takes (a big import's commit may take
        longer than ``HttpApi``'s 10 s on a busy machine)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.broker.api_url + "/api" + path, data, method=method,
                                     headers={"Authorization": GUEST,
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=300) as resp:
                status, text = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read()
        assert status in want, (method, path, status, text)
        return json.loads(text) if text else None

    def get(self, path: str) -> tuple[int, Any]:
        status, _, answer = HttpApi(self.broker.api_url + "/api").get(path)  # ports change
        return status, answer

    def channel(self) -> Any:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.broker.port))
        return conn.channel()

    def fill(self, queue: str, count: int, **arguments: Any) -> None:
        """A durable queue holding ``count`` persistent messages, all committed."""
        ch = self.channel()
        ch.queue_declare(queue, durable=True, arguments=arguments or None)
        for i in range(count):
            ch.basic_publish("", queue, b"m%d" % i, PERSISTENT)
        ch.queue_declare(queue, durable=True, arguments=arguments or None)  # after the commit
        ch.connection.close()

    def keep_the_store_busy(self) -> None:
        """Pipeline ``BALLAST`` persistent publishes (nothing waits for them): the request
        under test arrives while their batches are being written, so its change is
        committed in a later batch, well after an answer that did not wait for it."""
        ch = self.channel()
        ch.queue_declare("ballast", durable=True)
        for _ in range(BALLAST):
            ch.basic_publish("", "ballast", b"x" * 100, PERSISTENT)

    def messages(self, queue: str) -> int:
        ch = self.channel()
        count = int(ch.queue_declare(queue, passive=True).method.message_count)
        ch.connection.close()
        return count


@dataclass(frozen=True)
class Case:
    """``setup`` prepares, ``op`` is the request under test, ``check`` runs after the
    restart and asserts what the answer reported."""

    op: Callable[[Ctx], None]
    check: Callable[[Ctx], None]
    setup: Callable[[Ctx], None] = lambda ctx: None


def _status(path: str, want: int) -> Callable[[Ctx], None]:
    def check(ctx: Ctx) -> None:
        status, answer = ctx.get(path.format(n=ctx.name))
        assert status == want, (path, status, answer)
    return check


def _put(path: str, body: Any) -> Callable[[Ctx], None]:
    return lambda ctx: ctx.ok("PUT", path.format(n=ctx.name), body)


def _delete(path: str) -> Callable[[Ctx], None]:
    return lambda ctx: ctx.ok("DELETE", path.format(n=ctx.name))


def _both(*steps: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
    def run(ctx: Ctx) -> None:
        for step in steps:
            step(ctx)
    return run


EXCHANGE = "/exchanges/%2F/{n}"
QUEUE = "/queues/%2F/{n}"
USER = "/users/{n}"
PERMISSION = "/permissions/%2F/{n}"
TOPIC = "/topic-permissions/%2F/{n}"
POLICY = "/policies/%2F/{n}"
BINDING = "/bindings/%2F/e/{n}/q/{n}"

put_exchange = _put(EXCHANGE, {"type": "fanout", "durable": True})
put_queue = _put(QUEUE, {"durable": True})
put_user = _put(USER, {"password": "pw", "tags": "management"})
put_vhost = _put("/vhosts/{n}", {})
put_permission = _put(PERMISSION, {"configure": ".*", "write": ".*", "read": ".*"})
put_topic = _put(TOPIC, {"exchange": "amq.topic", "write": "^w", "read": "^r"})
put_policy = _put(POLICY, {"pattern": "^p-", "definition": {"max-length": 7}})
put_vhost_limit = _put("/vhost-limits/{n}/max-connections", {"value": 10})
put_user_limit = _put("/user-limits/{n}/max-connections", {"value": 5})


def post_binding(ctx: Ctx) -> None:
    ctx.ok("POST", BINDING.format(n=ctx.name), {"routing_key": "k"})


def bindings_are(keys: list[str]) -> Callable[[Ctx], None]:
    def check(ctx: Ctx) -> None:
        status, found = ctx.get(BINDING.format(n=ctx.name))
        assert status == 200 and [b["routing_key"] for b in found] == keys, found
    return check


def limits_are(path: str, value: dict[str, int]) -> Callable[[Ctx], None]:
    def check(ctx: Ctx) -> None:
        status, found = ctx.get(path.format(n=ctx.name))
        assert status == 200, found
        assert [item["value"] for item in found] == ([value] if value else []), found
    return check


def topic_permissions_are(count: int) -> Callable[[Ctx], None]:
    def check(ctx: Ctx) -> None:
        status, found = ctx.get(TOPIC.format(n=ctx.name))
        assert status == 200 and len(found) == count, found
    return check


def messages_are(queue_suffix: str, count: int) -> Callable[[Ctx], None]:
    return lambda ctx: _equal(ctx.messages(ctx.name + queue_suffix), count)


def _equal(got: Any, want: Any) -> None:
    assert got == want


def big_definitions(name: str) -> dict[str, Any]:
    queues = [{"name": f"{name}-{i}", "vhost": "/", "durable": True, "auto_delete": False,
               "arguments": {}} for i in range(BIG_IMPORT)]
    bindings = [{"source": "amq.direct", "vhost": "/", "destination": f"{name}-{i}",
                 "destination_type": "queue", "routing_key": f"k{i}", "arguments": {}}
                for i in range(BIG_IMPORT)]
    return {"users": [{"name": name, "password": "pw", "tags": ""}],
            "vhosts": [{"name": name}],
            "permissions": [{"user": name, "vhost": name, "configure": ".*", "write": ".*",
                             "read": ".*"}],
            "exchanges": [{"name": name, "vhost": "/", "type": "topic", "durable": True}],
            "queues": queues, "bindings": bindings}


def imported(ctx: Ctx) -> None:
    n = ctx.name
    for path in (f"/users/{n}", f"/vhosts/{n}", f"/permissions/{n}/{n}", f"/exchanges/{V}/{n}",
                 f"/queues/{V}/{n}-0", f"/queues/{V}/{n}-{BIG_IMPORT - 1}"):
        _status(path, 200)(ctx)
    status, found = ctx.get("/bindings/%2F/e/amq.direct/q/" + f"{n}-{BIG_IMPORT - 1}")
    assert status == 200 and [b["routing_key"] for b in found] == [f"k{BIG_IMPORT - 1}"]


def dead_letters(ctx: Ctx) -> None:
    """Three messages rejected from ``name`` into ``name-dlq`` (x-death points back)."""
    n = ctx.name
    ctx.fill(n + "-dlq", 0)
    ctx.fill(n, 3, **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": n + "-dlq"})
    ch = ctx.channel()
    for _ in range(3):
        method, _props, _body = ch.basic_get(n)
        ch.basic_reject(method.delivery_tag, requeue=False)
    ch.queue_declare(n + "-dlq", durable=True)  # answered after the dead letters' commit
    ch.connection.close()


def redrive(ctx: Ctx) -> None:
    answer = ctx.ok("POST", f"/queues/{V}/{ctx.name}-dlq/redrive", {"count": 2}, (200,))
    assert answer["moved"] == 2, answer


def move(ctx: Ctx) -> None:
    answer = ctx.ok("POST", f"/queues/{V}/{ctx.name}/move",
                    {"destination": ctx.name + "-to", "count": 2}, (200,))
    assert answer["moved"] == 2, answer


def delete_messages(ctx: Ctx) -> None:
    answer = ctx.ok("DELETE", f"/queues/{V}/{ctx.name}/messages", {"count": 2}, (200,))
    assert answer["deleted"] == 2, answer


DELAYED = EXCHANGE + "/delayed"


def scheduled(ctx: Ctx) -> None:
    """A durable delayed exchange ``name`` bound to queue ``name`` by "k", holding three
    persistent messages due in ten minutes, all committed."""
    n = ctx.name
    ch = ctx.channel()
    ch.exchange_declare(n, "x-delayed-message", durable=True,
                        arguments={"x-delayed-type": "direct"})
    ch.queue_declare(n, durable=True)
    ch.queue_bind(n, n, "k")
    ch.confirm_delivery()  # each publish returns after its commit
    for i in range(3):
        ch.basic_publish(n, "k", b"d%d" % i,
                         pika.BasicProperties(delivery_mode=2, headers={"x-delay": 600_000}))
    ch.connection.close()


def delayed_ids(ctx: Ctx) -> list[str]:
    return [m["id"] for m in ctx.ok("GET", DELAYED.format(n=ctx.name), want=(200,))["messages"]]


def delayed_are(count: int, ready: int) -> Callable[[Ctx], None]:
    def check(ctx: Ctx) -> None:
        _equal(len(delayed_ids(ctx)), count)
        _equal(ctx.messages(ctx.name), ready)
    return check


def cancel_first(ctx: Ctx) -> None:
    ctx.ok("DELETE", DELAYED.format(n=ctx.name) + "/" + delayed_ids(ctx)[0])


def release_first(ctx: Ctx) -> None:
    ctx.ok("POST", DELAYED.format(n=ctx.name) + "/" + delayed_ids(ctx)[0] + "/release")


B = "bindings/{vhost}/e/{source}/{kind}/{dest}"
CASES: dict[tuple[str, str], Case] = {
    ("PUT", "exchanges/{vhost}/{name}"): Case(put_exchange, _status(EXCHANGE, 200)),
    ("DELETE", "exchanges/{vhost}/{name}"): Case(
        _delete(EXCHANGE), _status(EXCHANGE, 404), put_exchange),
    ("PUT", "queues/{vhost}/{name}"): Case(put_queue, _status(QUEUE, 200)),
    ("DELETE", "queues/{vhost}/{name}"): Case(
        _delete(QUEUE), _status(QUEUE, 404), lambda ctx: ctx.fill(ctx.name, BIG_QUEUE)),
    ("DELETE", "queues/{vhost}/{name}/contents"): Case(
        _delete(QUEUE + "/contents"), messages_are("", 0),
        lambda ctx: ctx.fill(ctx.name, 2_000)),
    ("POST", "queues/{vhost}/{name}/redrive"): Case(
        redrive, _both(messages_are("", 2), messages_are("-dlq", 1)), dead_letters),
    ("POST", "queues/{vhost}/{name}/move"): Case(
        move, _both(messages_are("", 1), messages_are("-to", 2)),
        lambda ctx: (ctx.fill(ctx.name + "-to", 0), ctx.fill(ctx.name, 3))),
    ("DELETE", "queues/{vhost}/{name}/messages"): Case(
        delete_messages, messages_are("", 1), lambda ctx: ctx.fill(ctx.name, 3)),
    ("DELETE", "exchanges/{vhost}/{name}/delayed"): Case(
        _delete(DELAYED), delayed_are(0, 0), scheduled),
    ("DELETE", "exchanges/{vhost}/{name}/delayed/{id}"): Case(
        cancel_first, delayed_are(2, 0), scheduled),
    ("POST", "exchanges/{vhost}/{name}/delayed/{id}/release"): Case(
        release_first, delayed_are(2, 1), scheduled),
    ("POST", B): Case(post_binding, bindings_are(["k"]), _both(put_exchange, put_queue)),
    ("DELETE", B + "/{props}"): Case(
        _delete(BINDING + "/k"), bindings_are([]), _both(put_exchange, put_queue, post_binding)),
    ("PUT", "vhosts/{name}"): Case(
        put_vhost, _both(_status("/vhosts/{n}", 200), _status("/permissions/{n}/guest", 200))),
    ("DELETE", "vhosts/{name}"): Case(
        _delete("/vhosts/{n}"), _status("/vhosts/{n}", 404), put_vhost),
    ("PUT", "users/{name}"): Case(put_user, _status(USER, 200)),
    ("DELETE", "users/{name}"): Case(_delete(USER), _status(USER, 404), put_user),
    ("PUT", "permissions/{vhost}/{user}"): Case(
        put_permission, _status(PERMISSION, 200), put_user),
    ("DELETE", "permissions/{vhost}/{user}"): Case(
        _delete(PERMISSION), _status(PERMISSION, 404), _both(put_user, put_permission)),
    ("PUT", "topic-permissions/{vhost}/{user}"): Case(
        put_topic, topic_permissions_are(1), put_user),
    ("DELETE", "topic-permissions/{vhost}/{user}"): Case(
        _delete(TOPIC), topic_permissions_are(0), _both(put_user, put_topic)),
    ("DELETE", "topic-permissions/{vhost}/{user}/{exchange}"): Case(
        _delete(TOPIC + "/amq.topic"), topic_permissions_are(0), _both(put_user, put_topic)),
    ("PUT", "policies/{vhost}/{name}"): Case(put_policy, _status(POLICY, 200)),
    ("DELETE", "policies/{vhost}/{name}"): Case(
        _delete(POLICY), _status(POLICY, 404), put_policy),
    ("PUT", "vhost-limits/{vhost}/{limit}"): Case(
        put_vhost_limit, limits_are("/vhost-limits/{n}", {"max-connections": 10}), put_vhost),
    ("DELETE", "vhost-limits/{vhost}/{limit}"): Case(
        _delete("/vhost-limits/{n}/max-connections"), limits_are("/vhost-limits/{n}", {}),
        _both(put_vhost, put_vhost_limit)),
    ("PUT", "user-limits/{name}/{limit}"): Case(
        put_user_limit, limits_are("/user-limits/{n}", {"max-connections": 5}), put_user),
    ("DELETE", "user-limits/{name}/{limit}"): Case(
        _delete("/user-limits/{n}/max-connections"), limits_are("/user-limits/{n}", {}),
        _both(put_user, put_user_limit)),
    ("POST", "definitions"): Case(
        lambda ctx: ctx.ok("POST", "/definitions", big_definitions(ctx.name)), imported),
    ("POST", "definitions/{vhost}"): Case(
        lambda ctx: ctx.ok("POST", f"/definitions/{ctx.name}",
                           {"queues": [{"name": ctx.name, "durable": True}]}),
        _status("/queues/{n}/{n}", 200), put_vhost),
}

# Write routes whose change is not durable state, or is another file's to test.
NOT_DURABLE: dict[tuple[str, str], str] = {
    ("DELETE", "connections/{name}"): "a connection does not outlive its broker",
    ("DELETE", "consumers/{vhost}/{channel}/{tag}"): "a consumer does not outlive its broker",
    ("PUT", "traces/{vhost}"): "traces are runtime state, as RabbitMQ's tracing plugin's",
    ("DELETE", "traces/{vhost}"): "traces are runtime state, as RabbitMQ's tracing plugin's",
    ("POST", "queues/{vhost}/{name}/peek"): "reads: changes nothing",
    ("POST", "queues/{vhost}/{name}/search"): "reads: changes nothing",
    ("POST", "exchanges/{vhost}/{name}/publish"): "basic.py waits for its own commit",
    ("POST", "queues/{vhost}/{name}/get"): "basic.py's get",
}


def write_routes() -> set[tuple[str, str]]:
    return {(method, pattern) for method, pattern, _, _ in management_api.ROUTES
            if method in WRITE_METHODS}


def test_every_write_route_has_a_case() -> None:
    missing = write_routes() - set(CASES) - set(NOT_DURABLE)
    assert not missing, f"write routes without a crash case: {sorted(missing)}"
    assert not (set(CASES) | set(NOT_DURABLE)) - write_routes(), "a case for no route"


@pytest.mark.parametrize("route", sorted(CASES), ids=lambda r: f"{r[0]} {r[1]}")
def test_write_survives_sigkill_right_after_the_answer(make_broker: Any, qname: str,
                                                        route: tuple[str, str]) -> None:
    case = CASES[route]
    b = make_broker()
    ctx = Ctx(b, qname)
    case.setup(ctx)
    ctx.keep_the_store_busy()
    case.op(ctx)
    b.stop(kill=True)  # as soon as the answer is in
    b.start()
    case.check(ctx)
