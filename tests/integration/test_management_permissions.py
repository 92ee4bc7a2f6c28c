"""Resource permissions on the management API's write routes, compared with RabbitMQ 3.10.

RabbitMQ's management plugin performs declare, delete, bind, purge, publish and
get over an AMQP channel as the requesting user, so configure / write / read
(and topic permissions) apply; ``management_ui/rights.py`` has the table. Each
case below sets the user's permissions, makes one HTTP call as that user and
expects one (status, body): the literals were recorded from RabbitMQ 3.10.8.

The same table runs against a private Leveret (always) and, when a RabbitMQ
management API answers on 127.0.0.1:15672, against RabbitMQ (skipped cleanly
otherwise). Names carry a per-run suffix and everything created on RabbitMQ
(users, queues, exchanges) is deleted afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.integration.conftest import HttpApi

SUFFIX = uuid.uuid4().hex[:6]
PW = "pw"
U = f"mp-u-{SUFFIX}"  # tagged management
ADMIN = f"mp-a-{SUFFIX}"  # tagged administrator: no exemption from permissions
Q, X, T = (f"mp-{n}-{SUFFIX}" for n in ("q", "x", "t"))  # queue, direct and topic exchange
NEW, MISSING = f"mp-new-{SUFFIX}", f"mp-missing-{SUFFIX}"

NONE = ("^$", "^$", "^$")  # configure, write, read
ALL = (".*", ".*", ".*")
ACCESS_REFUSED = {"error": "not_authorised", "reason": "Access refused."}
NOT_FOUND = {"error": "Object Not Found", "reason": "Not Found"}
GET_BODY = {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}
ANY = object()  # a body not compared (an allowed call's answer)


def publish_body(routing_key: str) -> dict[str, Any]:
    return {"routing_key": routing_key, "payload": "m", "payload_encoding": "string",
            "properties": {}}


def refused(kind: str, name: str, user: str = U) -> str:
    return f"ACCESS_REFUSED - access to {kind} '{name}' in vhost '/' refused for user '{user}'"


def publish_refused(name: str) -> dict[str, str]:
    return {"error": "bad_request", "reason": "403 " + refused("exchange", name)}


def get_refused(name: str, user: str = U) -> dict[str, str]:
    return {"error": "not_authorised", "reason": refused("queue", name, user)}


@dataclass
class Case:
    name: str
    perms: tuple[str, str, str] | None  # the user's on "/" (None: left as they are)
    method: str
    path: str
    body: Any
    status: int
    reply: Any = None  # the JSON body, None for an empty one, ANY: not compared
    user: str = U
    topic: tuple[str, str] | None = None  # topic permission on T: (write, read)
    setup: list[tuple[str, str, Any]] = field(default_factory=list)  # as guest, before
    after: tuple[str, int] | None = None  # GET path as guest, and its status afterwards
    password: str = PW
    credentials: bool = True  # False: no Authorization header at all
    authorization: str | None = None  # this Authorization header instead of the user's
    challenge: bool | None = None  # WWW-Authenticate expected (True) or not (False)


B_XQ = f"/bindings/%2F/e/{X}/q/{Q}"
B_XT = f"/bindings/%2F/e/{X}/e/{T}"
B_TQ = f"/bindings/%2F/e/{T}/q/{Q}"

CASES = [
    # -- exchanges: configure ----------------------------------------------------------------
    Case("put exchange, existing", NONE, "PUT", f"/exchanges/%2F/{X}", {"type": "direct"},
         401, ACCESS_REFUSED),
    Case("put exchange, new", NONE, "PUT", f"/exchanges/%2F/{NEW}-x", {"type": "direct"},
         401, ACCESS_REFUSED, after=(f"/exchanges/%2F/{NEW}-x", 404)),
    Case("put exchange, administrator", NONE, "PUT", f"/exchanges/%2F/{NEW}-x",
         {"type": "direct"}, 401, ACCESS_REFUSED, user=ADMIN),
    Case("put exchange, bad type before permissions", NONE, "PUT", f"/exchanges/%2F/{X}",
         {"type": "bogus"}, 400, {"error": "bad_request", "reason": "unknown exchange type 'bogus'"}),
    Case("put exchange, amq.*", NONE, "PUT", "/exchanges/%2F/amq.direct",
         {"type": "direct", "durable": True}, 401, ACCESS_REFUSED),
    Case("put exchange, configure", (f"^{NEW}", "^$", "^$"), "PUT", f"/exchanges/%2F/{NEW}-x1",
         {"type": "direct"}, 201, after=(f"/exchanges/%2F/{NEW}-x1", 200)),
    Case("put exchange, AE needs write on it", (f"^{NEW}", "^$", f"^{NEW}"), "PUT",
         f"/exchanges/%2F/{NEW}-x2", {"type": "direct", "arguments": {"alternate-exchange": X}},
         401, ACCESS_REFUSED, after=(f"/exchanges/%2F/{NEW}-x2", 404)),
    Case("put exchange, AE needs read on the exchange", (f"^{NEW}", f"^{X}$", "^$"), "PUT",
         f"/exchanges/%2F/{NEW}-x2", {"type": "direct", "arguments": {"alternate-exchange": X}},
         401, ACCESS_REFUSED),
    Case("put exchange, AE allowed", (f"^{NEW}", f"^{X}$", f"^{NEW}"), "PUT",
         f"/exchanges/%2F/{NEW}-x2", {"type": "direct", "arguments": {"alternate-exchange": X}},
         201),
    Case("put exchange, AE not checked on redeclare", (f"^{NEW}", "^$", "^$"), "PUT",
         f"/exchanges/%2F/{NEW}-x2", {"type": "direct", "arguments": {"alternate-exchange": X}},
         204),
    Case("delete exchange", NONE, "DELETE", f"/exchanges/%2F/{X}", None, 401, ACCESS_REFUSED,
         after=(f"/exchanges/%2F/{X}", 200)),
    Case("delete exchange, missing: 404 first", NONE, "DELETE", f"/exchanges/%2F/{MISSING}",
         None, 404, NOT_FOUND),
    Case("delete exchange, amq.default", ALL, "DELETE", "/exchanges/%2F/amq.default", None,
         401, ACCESS_REFUSED),
    Case("delete exchange, configure", (f"^{NEW}-x1$", "^$", "^$"), "DELETE",
         f"/exchanges/%2F/{NEW}-x1", None, 204, after=(f"/exchanges/%2F/{NEW}-x1", 404)),
    # -- queues: configure; purge: read --------------------------------------------------------
    Case("put queue, existing", NONE, "PUT", f"/queues/%2F/{Q}", {}, 401, ACCESS_REFUSED),
    Case("put queue, new", NONE, "PUT", f"/queues/%2F/{NEW}-q", {}, 401, ACCESS_REFUSED,
         after=(f"/queues/%2F/{NEW}-q", 404)),
    Case("put queue, administrator", NONE, "PUT", f"/queues/%2F/{NEW}-q", {}, 401,
         ACCESS_REFUSED, user=ADMIN),
    Case("put queue, bad argument: permission first", NONE, "PUT", f"/queues/%2F/{NEW}-q",
         {"arguments": {"x-max-length": "x"}}, 401, ACCESS_REFUSED),
    Case("put queue, not json before permissions", NONE, "PUT", f"/queues/%2F/{Q}", "not json",
         400, {"error": "bad_request", "reason": "not_json"}),
    Case("put queue, amq.*", (".*", "^$", "^$"), "PUT", "/queues/%2F/amq.foo", {}, 401,
         ACCESS_REFUSED),
    Case("put queue, configure", (f"^{NEW}", "^$", "^$"), "PUT", f"/queues/%2F/{NEW}-q1", {},
         201, after=(f"/queues/%2F/{NEW}-q1", 200)),
    Case("put queue, redeclare", (f"^{NEW}", "^$", "^$"), "PUT", f"/queues/%2F/{NEW}-q1", {},
         204),
    Case("put queue, DLX needs write on it", (f"^{NEW}", "^$", f"^{NEW}"), "PUT",
         f"/queues/%2F/{NEW}-q2", {"arguments": {"x-dead-letter-exchange": X}}, 401,
         ACCESS_REFUSED, after=(f"/queues/%2F/{NEW}-q2", 404)),
    Case("put queue, DLX needs read on the queue", (f"^{NEW}", f"^{X}$", "^$"), "PUT",
         f"/queues/%2F/{NEW}-q2", {"arguments": {"x-dead-letter-exchange": X}}, 401,
         ACCESS_REFUSED),
    Case("put queue, DLX allowed", (f"^{NEW}", f"^{X}$", f"^{NEW}"), "PUT",
         f"/queues/%2F/{NEW}-q2", {"arguments": {"x-dead-letter-exchange": X}}, 201),
    Case("put queue, DLX not checked on redeclare", (f"^{NEW}", "^$", "^$"), "PUT",
         f"/queues/%2F/{NEW}-q2", {"arguments": {"x-dead-letter-exchange": X}}, 204),
    Case("delete queue", NONE, "DELETE", f"/queues/%2F/{Q}", None, 401, ACCESS_REFUSED,
         after=(f"/queues/%2F/{Q}", 200)),
    Case("delete queue, if-empty: permission first", NONE, "DELETE",
         f"/queues/%2F/{Q}?if-empty=true", None, 401, ACCESS_REFUSED),
    Case("delete queue, missing: 404 first", NONE, "DELETE", f"/queues/%2F/{MISSING}", None,
         404, NOT_FOUND),
    Case("delete queue, read and write are not enough", ("^$", ".*", ".*"), "DELETE",
         f"/queues/%2F/{NEW}-q1", None, 401, ACCESS_REFUSED),
    Case("delete queue, configure", (f"^{NEW}-q1$", "^$", "^$"), "DELETE",
         f"/queues/%2F/{NEW}-q1", None, 204, after=(f"/queues/%2F/{NEW}-q1", 404)),
    Case("purge", NONE, "DELETE", f"/queues/%2F/{Q}/contents", None, 401, ACCESS_REFUSED),
    Case("purge, configure and write are not enough", (".*", ".*", "^$"), "DELETE",
         f"/queues/%2F/{Q}/contents", None, 401, ACCESS_REFUSED),
    Case("purge, missing: 404 first", NONE, "DELETE", f"/queues/%2F/{MISSING}/contents", None,
         404, NOT_FOUND),
    Case("purge, read", ("^$", "^$", f"^{Q}$"), "DELETE", f"/queues/%2F/{Q}/contents", None,
         204),
    # -- bindings: write on the destination, read on the source --------------------------------
    Case("bind", NONE, "POST", B_XQ, {"routing_key": "k2"}, 401, ACCESS_REFUSED),
    Case("bind, write only", ("^$", ".*", "^$"), "POST", B_XQ, {"routing_key": "k2"}, 401,
         ACCESS_REFUSED),
    Case("bind, read only", ("^$", "^$", ".*"), "POST", B_XQ, {"routing_key": "k2"}, 401,
         ACCESS_REFUSED),
    Case("bind, missing queue: refused first", NONE, "POST", f"/bindings/%2F/e/{X}/q/{MISSING}",
         {"routing_key": "k2"}, 401, ACCESS_REFUSED),
    Case("bind, missing source: refused first", NONE, "POST",
         f"/bindings/%2F/e/{MISSING}/q/{Q}", {"routing_key": "k2"}, 401, ACCESS_REFUSED),
    Case("bind, write queue and read exchange", ("^$", f"^{Q}$", f"^{X}$"), "POST", B_XQ,
         {"routing_key": "k2"}, 201, after=(B_XQ + "/k2", 200)),
    Case("unbind", NONE, "DELETE", B_XQ + "/k2", None, 401, ACCESS_REFUSED,
         after=(B_XQ + "/k2", 200)),
    Case("unbind, write only", ("^$", ".*", "^$"), "DELETE", B_XQ + "/k2", None, 401,
         ACCESS_REFUSED),
    Case("unbind, missing binding: 404 first", NONE, "DELETE", B_XQ + "/nokey", None, 404,
         NOT_FOUND),
    Case("unbind, write queue and read exchange", ("^$", f"^{Q}$", f"^{X}$"), "DELETE",
         B_XQ + "/k2", None, 204, after=(B_XQ + "/k2", 404)),
    Case("exchange bind, write on the source is not enough", ("^$", f"^{Q}$", f"^{X}$"),
         "POST", B_XT, {"routing_key": "k2"}, 401, ACCESS_REFUSED),
    Case("exchange bind, write destination and read source", ("^$", f"^{T}$", f"^{X}$"),
         "POST", B_XT, {"routing_key": "k2"}, 201),
    Case("exchange unbind", NONE, "DELETE", B_XT + "/k2", None, 401, ACCESS_REFUSED),
    Case("exchange unbind, allowed", ("^$", f"^{T}$", f"^{X}$"), "DELETE", B_XT + "/k2", None,
         204),
    # -- publish: write on the exchange; 400 with the channel's close reason -------------------
    Case("publish", NONE, "POST", f"/exchanges/%2F/{X}/publish", publish_body("k"), 400,
         publish_refused(X)),
    Case("publish, read and configure are not enough", (".*", "^$", ".*"), "POST",
         f"/exchanges/%2F/{X}/publish", publish_body("k"), 400, publish_refused(X)),
    Case("publish, missing exchange: refused first", NONE, "POST",
         f"/exchanges/%2F/{MISSING}/publish", publish_body("k"), 400, publish_refused(MISSING)),
    Case("publish, key missing before permissions", NONE, "POST", f"/exchanges/%2F/{X}/publish",
         {"routing_key": "k", "payload": "m", "properties": {}}, 400,
         {"error": "bad_request", "reason": "[{key_missing,payload_encoding}]"}),
    Case("publish, default exchange is amq.default", ("^$", f"^{Q}$", "^$"), "POST",
         "/exchanges/%2F/amq.default/publish", publish_body(Q), 400,
         publish_refused("amq.default")),
    Case("publish, write on amq.default", ("^$", r"^amq\.default$", "^$"), "POST",
         "/exchanges/%2F/amq.default/publish", publish_body(Q), 200, {"routed": True}),
    Case("publish, write", ("^$", f"^{X}$", "^$"), "POST", f"/exchanges/%2F/{X}/publish",
         publish_body("k"), 200, {"routed": True}),
    # -- get: read on the queue; 401 with the close reason, before the lookup ------------------
    Case("get", NONE, "POST", f"/queues/%2F/{Q}/get", GET_BODY, 401, get_refused(Q)),
    Case("get, administrator", NONE, "POST", f"/queues/%2F/{Q}/get", GET_BODY, 401,
         get_refused(Q, ADMIN), user=ADMIN),
    Case("get, configure and write are not enough", (".*", ".*", "^$"), "POST",
         f"/queues/%2F/{Q}/get", GET_BODY, 401, get_refused(Q)),
    Case("get, missing queue: refused first", NONE, "POST", f"/queues/%2F/{MISSING}/get",
         GET_BODY, 401, get_refused(MISSING)),
    Case("get, key missing before permissions", NONE, "POST", f"/queues/%2F/{Q}/get",
         {"count": 1, "encoding": "auto"}, 400,
         {"error": "bad_request", "reason": "[{key_missing,ackmode}]"}),
    Case("get, read", ("^$", "^$", f"^{Q}$"), "POST", f"/queues/%2F/{Q}/get", GET_BODY, 200,
         ANY),
    # -- topic permissions: publish's routing key (write), a binding key (read) ----------------
    Case("publish, topic refused", ALL, "POST", f"/exchanges/%2F/{T}/publish",
         publish_body("b.x"), 400, {"error": "bad_request", "reason": (
             f"403 ACCESS_REFUSED - access to topic 'b.x' in exchange '{T}' in vhost '/' "
             f"refused for user '{U}'")}, topic=("^a", "^a")),
    Case("publish, topic allowed", ALL, "POST", f"/exchanges/%2F/{T}/publish",
         publish_body("a.x"), 200, {"routed": False}, topic=("^a", "^a")),
    Case("bind, topic refused", ALL, "POST", B_TQ, {"routing_key": "b.#"}, 401, ACCESS_REFUSED,
         topic=("^a", "^a")),
    Case("bind, topic allowed", ALL, "POST", B_TQ, {"routing_key": "a.#"}, 201,
         topic=("^a", "^a")),
    Case("unbind, topic refused", ALL, "DELETE", B_TQ + "/b.%23", None, 401, ACCESS_REFUSED,
         topic=("^a", "^a"), setup=[("POST", B_TQ, {"routing_key": "b.#"})]),
    Case("unbind, topic allowed", ALL, "DELETE", B_TQ + "/a.%23", None, 204,
         topic=("^a", "^a")),
]


# -- targets -----------------------------------------------------------------------------

def _rabbitmq_api() -> HttpApi | None:
    candidate = HttpApi("http://127.0.0.1:15672/api")
    try:
        status, _, _ = candidate.get("/overview")
    except OSError:
        return None
    return candidate if status == 200 else None


def _ok(reply: tuple[int, Any, Any], *wanted: int) -> None:
    assert reply[0] in wanted, reply


@pytest.fixture(params=["leveret", "rabbitmq"])
def guest(request: pytest.FixtureRequest) -> Iterator[HttpApi]:
    """guest (administrator) on Leveret, or on RabbitMQ when one answers; the user, queue
    and exchanges of the table are set up, and removed afterwards."""
    if request.param == "rabbitmq":
        found = _rabbitmq_api()
        if found is None:
            pytest.skip("no RabbitMQ management API on 127.0.0.1:15672")
        api = found
    else:
        b = request.getfixturevalue("make_broker")()
        api = HttpApi(b.api_url + "/api")
    try:
        _ok(api.put(f"/users/{U}", {"password": PW, "tags": "management"}), 201, 204)
        _ok(api.put(f"/users/{ADMIN}", {"password": PW, "tags": "administrator"}), 201, 204)
        _ok(api.put(f"/queues/%2F/{Q}", {}), 201, 204)
        _ok(api.put(f"/exchanges/%2F/{X}", {"type": "direct"}), 201, 204)
        _ok(api.put(f"/exchanges/%2F/{T}", {"type": "topic"}), 201, 204)
        _ok(api.post(B_XQ, {"routing_key": "k"}), 201)
        _ok(api.post("/exchanges/%2F/amq.default/publish", publish_body(Q)), 200)
        yield api
    finally:
        for path in (f"/users/{U}", f"/users/{ADMIN}", f"/queues/%2F/{Q}",
                     f"/exchanges/%2F/{X}", f"/exchanges/%2F/{T}",
                     *(f"/queues/%2F/{NEW}-{n}" for n in ("q", "q1", "q2")),
                     *(f"/exchanges/%2F/{NEW}-{n}" for n in ("x", "x1", "x2"))):
            api.delete(path)


def _run(guest: HttpApi, case: Case) -> list[str]:
    """The case's differences from what RabbitMQ answered ([] = as recorded)."""
    if case.perms is not None:
        _ok(guest.put(f"/permissions/%2F/{case.user}", dict(zip(
            ("configure", "write", "read"), case.perms, strict=True))), 201, 204)
    if case.topic is not None:
        _ok(guest.put(f"/topic-permissions/%2F/{case.user}",
                      {"exchange": T, "write": case.topic[0], "read": case.topic[1]}), 201, 204)
    for method, path, body in case.setup:
        status = guest.request(method, path, body)[0]
        if status not in (201, 204):
            return [f"{case.name}: setup {method} {path} answered {status}"]
    user = HttpApi(guest.base, case.user, case.password)
    extra = {"Authorization": case.authorization} if case.authorization is not None else None
    use_auth = case.credentials and case.authorization is None
    try:
        if isinstance(case.body, str):
            status, headers, reply = user.request(case.method, case.path, auth=use_auth,
                                                  raw=case.body.encode(), headers=extra)
        else:
            status, headers, reply = user.request(case.method, case.path, case.body,
                                                  auth=use_auth, headers=extra)
    finally:
        if case.topic is not None:
            guest.delete(f"/topic-permissions/%2F/{case.user}")
    problems = []
    if status != case.status or (case.reply is not ANY and reply != case.reply):
        problems.append(f"{case.name}: got {status} {reply!r}, "
                        f"RabbitMQ answers {case.status} {case.reply!r}")
    challenged = headers.get("WWW-Authenticate") is not None
    if case.challenge is not None and challenged != case.challenge:
        problems.append(f"{case.name}: WWW-Authenticate {'sent' if challenged else 'missing'}")
    if case.after is not None:
        after = guest.get(case.after[0])[0]
        if after != case.after[1]:
            problems.append(f"{case.name}: afterwards GET {case.after[0]} is {after}, "
                            f"not {case.after[1]}")
    return problems


def test_write_routes_check_resource_permissions(guest: HttpApi) -> None:
    """Every case in order (later ones use what earlier ones created); all differences
    are reported at once."""
    problems = [p for case in CASES for p in _run(guest, case)]
    assert not problems, "\n".join(problems)


def test_permissions_apply_at_once(guest: HttpApi) -> None:
    """A permission change applies to the next HTTP request (no cached refusal)."""
    user = HttpApi(guest.base, U, PW)
    path = f"/queues/%2F/{Q}/get"
    for perms, status in ((NONE, 401), (("^$", "^$", ".*"), 200), (NONE, 401)):
        _ok(guest.put(f"/permissions/%2F/{U}", dict(zip(
            ("configure", "write", "read"), perms, strict=True))), 201, 204)
        assert user.post(path, GET_BODY)[0] == status
