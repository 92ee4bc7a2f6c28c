"""Who may call which management route, and the 401's shape, compared with RabbitMQ 3.10.8.

``management_ui/auth.py`` has the rules. Each case below makes one HTTP call as a user of
one tag (or with broken credentials) and expects RabbitMQ's (status, body) and whether
``WWW-Authenticate`` comes with it: a failed login is 401 ``not_authorized`` ``Login
failed`` with the header (an empty 401 without credentials), every refusal after the login
is 401 ``not_authorised`` without it. The users have every permission on "/" and none in
``VH``, a vhost with a queue and a policy only guest may use.

The table runs with ``test_management_permissions.py``'s fixture and runner: against a
private Leveret always, and against RabbitMQ when its API answers on 127.0.0.1:15672
(skipped otherwise); what it creates there (users, the vhost) is deleted afterwards.
"""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from tests.integration import test_management_permissions as mp
from tests.integration.conftest import HttpApi

guest = mp.guest  # the fixture: guest on a private Leveret, and on RabbitMQ when it answers
SUFFIX = mp.SUFFIX
TAGGED = {tag: f"ma-{tag or 'none'}-{SUFFIX}"
          for tag in ("", "monitoring", "management", "policymaker", "administrator")}
NONE, MON, MGMT, POL, ADM = TAGGED.values()
VH = f"ma-vh-{SUFFIX}"  # only guest has permissions there
NOVH = f"ma-novh-{SUFFIX}"  # does not exist
VQ = "q"  # a queue in VH
VP = "p"  # a policy in VH

LOGIN_FAILED = {"error": "not_authorized", "reason": "Login failed"}


def refused(reason: str) -> dict[str, str]:
    return {"error": "not_authorised", "reason": reason}


NOT_ADMIN = refused("Not administrator user")
NOT_MONITOR = refused("Not monitor user")
NOT_MANAGEMENT = refused("Not management user")
NO_VHOST = refused("User not authorised to access virtual host")
NO_OBJECT = refused("User not authorised to access object")
NO_CHANNEL = refused("Access refused.")
POLICY = {"pattern": "^zz", "definition": {"max-length": 1}}


def basic(raw: bytes) -> str:
    return "Basic " + base64.b64encode(raw).decode()


def case(name: str, user: str, method: str, path: str, status: int, reply: Any,
         body: Any = None, challenge: bool | None = False,
         perms: tuple[str, str, str] | None = mp.ALL, **kw: Any) -> mp.Case:
    return mp.Case(name, perms, method, path, body, status, reply, user=user,
                   challenge=challenge, **kw)


ANSWERS = [
    # -- the login ---------------------------------------------------------------------------
    case("no credentials", MGMT, "GET", "/overview", 401, None, credentials=False,
         challenge=True),
    case("bad password", MGMT, "GET", "/overview", 401, LOGIN_FAILED, password="wrong",
         challenge=True),
    case("unknown user", f"ma-nobody-{SUFFIX}", "GET", "/overview", 401, LOGIN_FAILED,
         challenge=True, perms=None),
    case("another scheme", MGMT, "GET", "/overview", 401, LOGIN_FAILED,
         authorization="Bearer abc", challenge=True),
    case("empty user and password", MGMT, "GET", "/overview", 401, LOGIN_FAILED,
         authorization=basic(b":"), challenge=True),
    case("Basic, not base64", MGMT, "GET", "/overview", 400, None, authorization="Basic !!!"),
    case("Basic, no colon", MGMT, "GET", "/overview", 400, None,
         authorization=basic(b"guestguest")),
    case("no tag", NONE, "GET", "/overview", 401, NOT_MANAGEMENT),
    case("no tag, whoami", NONE, "GET", "/whoami", 401, NOT_MANAGEMENT),
    case("no tag, bad password: the login first", NONE, "GET", "/overview", 401,
         LOGIN_FAILED, password="wrong", challenge=True),
    case("no tag, a vhost route", NONE, "GET", f"/queues/{VH}", 401, NOT_MANAGEMENT),
    # -- the tag a route needs ---------------------------------------------------------------
    case("monitoring, an administrator route", MON, "GET", "/users", 401, NOT_ADMIN),
    case("management, an administrator route", MGMT, "GET", "/users", 401, NOT_ADMIN),
    case("monitoring, definitions", MON, "GET", "/definitions", 401, NOT_ADMIN),
    case("management, nodes", MGMT, "GET", "/nodes", 401, NOT_MONITOR),
    case("policymaker, nodes", POL, "GET", "/nodes", 401, NOT_MONITOR),
    case("monitoring, nodes", MON, "GET", "/nodes", 200, mp.ANY),
    case("management, a vhost", MGMT, "GET", "/vhosts/%2F", 401, NOT_ADMIN),
    case("monitoring, a vhost", MON, "GET", f"/vhosts/{VH}", 401, NOT_ADMIN),
    case("management, a vhost's permissions", MGMT, "GET", f"/vhosts/{VH}/permissions", 401,
         NOT_ADMIN),
    case("management, a permission", MGMT, "GET", f"/permissions/{VH}/{MGMT}", 401,
         NOT_ADMIN),
    case("management, HEAD", MGMT, "HEAD", "/users", 401, None),
    # -- a policy: administrators, or policymakers with access ------------------------------
    case("management, put a policy", MGMT, "PUT", "/policies/%2F/p", 401, NO_OBJECT,
         body=POLICY),
    case("monitoring, get a policy", MON, "GET", "/policies/%2F/p", 401, NO_OBJECT),
    case("management, a policy of a missing vhost", MGMT, "GET", f"/policies/{NOVH}/p", 401,
         NO_OBJECT),
    case("policymaker, put a policy", POL, "PUT", f"/policies/%2F/ma-{SUFFIX}", 201, None,
         body=POLICY),
    case("policymaker, get it", POL, "GET", f"/policies/%2F/ma-{SUFFIX}", 200, mp.ANY),
    case("policymaker, delete it", POL, "DELETE", f"/policies/%2F/ma-{SUFFIX}", 204, None),
    case("policymaker, a policy of a missing vhost", POL, "GET", f"/policies/{NOVH}/p", 404,
         mp.NOT_FOUND),
    case("administrator, put a policy in a missing vhost", ADM, "PUT", f"/policies/{NOVH}/p",
         404, {"error": "not_found", "reason": "vhost_not_found"}, body=POLICY),
    case("policymaker, a policy without access", POL, "GET", f"/policies/{VH}/{VP}", 401,
         NO_OBJECT),
    case("policymaker, put a policy without access", POL, "PUT", f"/policies/{VH}/{VP}", 401,
         NO_OBJECT, body=POLICY),
    case("administrator, a policy without access", ADM, "GET", f"/policies/{VH}/nope", 404,
         mp.NOT_FOUND),
    # -- vhost access -------------------------------------------------------------------------
    case("management, queues", MGMT, "GET", f"/queues/{VH}", 401, NO_VHOST),
    case("management, a queue", MGMT, "GET", f"/queues/{VH}/{VQ}", 401, NO_VHOST),
    case("monitoring, queues", MON, "GET", f"/queues/{VH}", 401, NO_VHOST),
    case("policymaker, policies", POL, "GET", f"/policies/{VH}", 401, NO_VHOST),
    case("management, an exchange", MGMT, "GET", f"/exchanges/{VH}/amq.direct", 401,
         NO_VHOST),
    case("management, source bindings", MGMT, "GET",
         f"/exchanges/{VH}/amq.direct/bindings/source", 401, NO_VHOST),
    case("management, publish", MGMT, "POST", f"/exchanges/{VH}/amq.default/publish", 401,
         NO_VHOST, body=mp.publish_body(VQ)),
    case("monitoring, publish", MON, "POST", f"/exchanges/{VH}/amq.default/publish", 401,
         NO_VHOST, body=mp.publish_body(VQ)),
    case("management, get", MGMT, "POST", f"/queues/{VH}/{VQ}/get", 401, NO_VHOST,
         body=mp.GET_BODY),
    case("management, declare", MGMT, "PUT", f"/queues/{VH}/new", 401, NO_VHOST, body={}),
    case("management, the vhost's connections", MGMT, "GET", f"/vhosts/{VH}/connections",
         401, NO_VHOST),
    case("management, aliveness test", MGMT, "GET", f"/aliveness-test/{VH}", 401, NO_VHOST),
    case("management, limits", MGMT, "GET", f"/vhost-limits/{VH}", 401, NO_VHOST),
    case("monitoring, limits: any vhost", MON, "GET", f"/vhost-limits/{VH}", 200, []),
    case("management, consumers: none shown", MGMT, "GET", f"/consumers/{VH}", 200, []),
    case("management, a missing vhost", MGMT, "GET", f"/queues/{NOVH}", 404, mp.NOT_FOUND),
    case("monitoring, a missing vhost", MON, "GET", f"/queues/{NOVH}", 404, mp.NOT_FOUND),
    # -- administrators read any vhost; their channel there is refused ----------------------
    case("administrator, queues", ADM, "GET", f"/queues/{VH}?columns=name", 200,
         [{"name": VQ}]),
    case("administrator, queue bindings", ADM, "GET", f"/queues/{VH}/{VQ}/bindings", 200,
         mp.ANY),
    case("administrator, publish", ADM, "POST", f"/exchanges/{VH}/amq.default/publish", 401,
         NO_CHANNEL, body=mp.publish_body(VQ)),
    case("administrator, get", ADM, "POST", f"/queues/{VH}/{VQ}/get", 401, NO_CHANNEL,
         body=mp.GET_BODY),
    case("administrator, declare", ADM, "PUT", f"/queues/{VH}/new", 401, NO_CHANNEL, body={}),
    case("administrator, purge", ADM, "DELETE", f"/queues/{VH}/{VQ}/contents", 401,
         NO_CHANNEL),
    case("administrator, bind", ADM, "POST", f"/bindings/{VH}/e/amq.direct/q/{VQ}", 401,
         NO_CHANNEL, body={}),
    case("administrator, delete a missing queue: 404 first", ADM, "DELETE",
         f"/queues/{VH}/missing", 404, mp.NOT_FOUND),
    case("administrator, aliveness test", ADM, "GET", f"/aliveness-test/{VH}", 401,
         NO_CHANNEL),
]


@pytest.fixture
def access(guest: HttpApi) -> Iterator[HttpApi]:
    """The table's users (every permission on "/") and VH (a queue, a policy)."""
    try:
        for tag, name in TAGGED.items():
            mp._ok(guest.put(f"/users/{name}", {"password": mp.PW, "tags": tag}), 201, 204)
        mp._ok(guest.put(f"/vhosts/{VH}", {}), 201, 204)
        mp._ok(guest.put(f"/queues/{VH}/{VQ}", {}), 201, 204)
        mp._ok(guest.put(f"/policies/{VH}/{VP}", POLICY), 201, 204)
        yield guest
    finally:
        for name in TAGGED.values():
            guest.delete(f"/users/{name}")
        guest.delete(f"/vhosts/{VH}")
        guest.delete(f"/policies/%2F/ma-{SUFFIX}")


def test_access_and_401_shapes_as_rabbitmq(access: HttpApi) -> None:
    """Every case in order; all differences from RabbitMQ's recorded answers at once."""
    problems = [p for c in ANSWERS for p in mp._run(access, c)]
    assert not problems, "\n".join(problems)


def test_lists_show_the_vhosts_the_user_may_see(access: HttpApi) -> None:
    """Queues, bindings and policies of VH only to administrators; the vhost itself and
    its limits to monitoring users too."""
    for name in TAGGED.values():
        mp._ok(access.put(f"/permissions/%2F/{name}", dict(zip(
            ("configure", "write", "read"), mp.ALL, strict=True))), 201, 204)
    mp._ok(access.put(f"/vhost-limits/{VH}/max-queues", {"value": 5}), 204)
    seen: dict[str, dict[str, bool]] = {}
    for name in (MGMT, MON, POL, ADM):
        user = HttpApi(access.base, name, mp.PW)
        seen[name] = {path: any(item.get("vhost", item.get("name")) == VH
                                for item in user.ok(path))
                      for path in ("/queues", "/exchanges", "/bindings", "/policies",
                                   "/vhosts", "/vhost-limits")}
    only_admin = {"/queues", "/exchanges", "/bindings", "/policies"}
    for name, paths in seen.items():
        for path, shown in paths.items():
            wanted = name == ADM or (name == MON and path not in only_admin)
            assert shown == wanted, (name, path)


def _leveret_port(api: HttpApi) -> int:
    listeners = api.ok("/overview")["listeners"]
    return next(int(lst["port"]) for lst in listeners if lst["protocol"] == "amqp")


def test_other_users_connections(access: HttpApi) -> None:
    """Another user's connection and channel: monitoring users and administrators read
    them, only administrators close them; lists show management users their own."""
    port = 5672 if access.base.startswith("http://127.0.0.1:15672") else _leveret_port(access)
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", port, credentials=pika.PlainCredentials("guest", "guest"),
        client_properties={"connection_name": f"ma-{SUFFIX}"}))
    try:
        conn.channel()
        name = ""
        for _ in range(100):  # RabbitMQ lists a connection once its stats are emitted
            mine = [c["name"] for c in access.ok("/connections")
                    if c.get("client_properties", {}).get("connection_name") == f"ma-{SUFFIX}"]
            if mine and f"{mine[0]} (1)" in [ch["name"] for ch in access.ok("/channels")]:
                name = mine[0]
                break
            conn.process_data_events(0.1)
        assert name, "the connection was not listed"
        path = "/connections/" + urllib.parse.quote(name, safe="")
        channel = "/channels/" + urllib.parse.quote(f"{name} (1)", safe="")
        for user, read_status in ((MGMT, 401), (POL, 401), (MON, 200), (ADM, 200)):
            as_user = HttpApi(access.base, user, mp.PW)
            for p in (path, path + "/channels", channel):
                status, _, body = as_user.get(p)
                assert status == read_status, (user, p, status, body)
                if status == 401:
                    assert body == NO_OBJECT
            listed = [c["name"] for c in as_user.ok("/connections")]
            assert (name in listed) == (read_status == 200), user
        for user in (MGMT, MON):
            status, headers, body = HttpApi(access.base, user, mp.PW).delete(path)
            assert (status, body) == (401, NO_OBJECT), user
            assert headers.get("WWW-Authenticate") is None
        assert conn.is_open
    finally:
        if conn.is_open:
            conn.close()
