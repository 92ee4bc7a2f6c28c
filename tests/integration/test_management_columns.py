"""``?columns=`` on single objects, binding lists and their paging parameters, and the
``?auth=`` query parameter, compared with RabbitMQ 3.10.8.

Observed on RabbitMQ 3.10.8 (``management_ui/listing.py`` and ``router.py`` have the
rules): a column keeps a field or a field of a field (deeper parts are ignored; a missing
sub-field of an existing object leaves it empty), on lists and on single objects alike.
Binding lists ignore ``page``/``page_size``/``pagination`` and ``name``: the answer is the
whole plain list, though a bad ``page_size`` with a ``page`` crashes RabbitMQ (an empty
500, where Leveret answers the other lists' 400). ``?auth=<base64 user:password>`` is read
on ``/api/definitions[/{vhost}]`` only, before the ``Authorization`` header; elsewhere it
is no credentials.

Runs against a private Leveret always, and against RabbitMQ when its API answers on
127.0.0.1:15672 (skipped otherwise); what it creates there is deleted afterwards.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.integration import test_management_permissions as mp
from tests.integration.conftest import WAIT, HttpApi

SUFFIX = uuid.uuid4().hex[:6]
VH = f"col-{SUFFIX}"
Q = "q"
MGMT = f"col-m-{SUFFIX}"  # tagged management, every permission in VH
PW = "pw"
ALL = {"configure": ".*", "write": ".*", "read": ".*"}
LOGIN_FAILED = {"error": "not_authorized", "reason": "Login failed"}


@pytest.fixture(params=["leveret", "rabbitmq"])
def target(request: pytest.FixtureRequest) -> Iterator[tuple[str, HttpApi]]:
    """(which broker, guest's API) with VH holding Q (2 messages, bound to amq.direct
    with key "k"), a policy "p" and a management user."""
    if request.param == "rabbitmq":
        found = mp._rabbitmq_api()
        if found is None:
            pytest.skip("no RabbitMQ management API on 127.0.0.1:15672")
        api = found
    else:
        api = HttpApi(request.getfixturevalue("make_broker")().api_url + "/api")
    try:
        mp._ok(api.put(f"/vhosts/{VH}", {}), 201, 204)
        mp._ok(api.put(f"/permissions/{VH}/guest", ALL), 201, 204)
        mp._ok(api.put(f"/users/{MGMT}", {"password": PW, "tags": "management"}), 201, 204)
        mp._ok(api.put(f"/permissions/{VH}/{MGMT}", ALL), 201, 204)
        mp._ok(api.put(f"/queues/{VH}/{Q}", {}), 201, 204)
        mp._ok(api.post(f"/bindings/{VH}/e/amq.direct/q/{Q}", {"routing_key": "k"}), 201)
        mp._ok(api.put(f"/policies/{VH}/p", {"pattern": "^zz", "definition": {
            "max-length": 1}}), 201, 204)
        for _ in range(2):
            mp._ok(api.post(f"/exchanges/{VH}/amq.default/publish", mp.publish_body(Q)), 200)
        deadline = time.monotonic() + WAIT  # RabbitMQ's figures lag by its 5 s stats interval
        while time.monotonic() < deadline and not (
                api.ok(f"/queues/{VH}/{Q}").get("message_stats", {}).get("publish") == 2
                and api.ok(f"/vhosts/{VH}").get("messages") == 2):
            time.sleep(0.2)
        yield request.param, api
    finally:
        api.delete(f"/users/{MGMT}")
        api.delete(f"/vhosts/{VH}")


# (path, the answer): RabbitMQ 3.10.8's, recorded.
SINGLE = [
    (f"/queues/{VH}/{Q}?columns=name,messages,arguments.x,nope.y,nope",
     {"name": Q, "messages": 2, "arguments": {}}),
    (f"/exchanges/{VH}/amq.direct?columns=name,type", {"name": "amq.direct", "type": "direct"}),
    (f"/vhosts/{VH}?columns=name,messages", {"name": VH, "messages": 2}),
    ("/users/guest?columns=name,tags", {"name": "guest", "tags": ["administrator"]}),
    ("/whoami?columns=name", {"name": "guest"}),
    (f"/permissions/{VH}/guest?columns=user,vhost,read", {"user": "guest", "vhost": VH,
                                                          "read": ".*"}),
    (f"/policies/{VH}/p?columns=name,definition.max-length,definition.nope",
     {"name": "p", "definition": {"max-length": 1}}),
    (f"/bindings/{VH}/e/amq.direct/q/{Q}/k?columns=source,routing_key",
     {"source": "amq.direct", "routing_key": "k"}),
    ("/auth?columns=enable_uaa", {"enable_uaa": False}),
    (f"/queues/{VH}?columns=name,arguments.x,message_stats.publish.x",
     [{"name": Q, "arguments": {}, "message_stats": {"publish": 2}}]),
]


def test_columns_on_single_objects_and_lists(target: tuple[str, HttpApi]) -> None:
    _, api = target
    problems = []
    for path, wanted in SINGLE:
        status, _, body = api.get(path)
        if (status, body) != (200, wanted):
            problems.append(f"GET {path}: {status} {body!r}, RabbitMQ answers {wanted!r}")
    status, _, body = api.get("/cluster-name?columns=name")
    if status != 200 or set(body) != {"name"}:
        problems.append(f"GET /cluster-name?columns=name: {status} {body!r}")
    assert not problems, "\n".join(problems)


BINDING_LISTS = [f"/bindings/{VH}", f"/queues/{VH}/{Q}/bindings",
                 f"/exchanges/{VH}/amq.direct/bindings/source",
                 f"/bindings/{VH}/e/amq.direct/q/{Q}"]


def test_binding_lists_are_not_paged(target: tuple[str, HttpApi]) -> None:
    """Every binding list answers its whole plain list whatever the paging parameters."""
    _, api = target
    for path in BINDING_LISTS:
        whole = api.ok(path)
        assert isinstance(whole, list) and whole, path
        for query in ("page=1&page_size=1", "pagination=true", "page=99",
                      "pagination=true&page_size=1000", "page_size=1000",
                      "name=zzz", "name=zzz&use_regex=true"):
            assert api.ok(f"{path}?{query}") == whole, (path, query)
    assert len(api.ok(f"/bindings/{VH}")) == 2  # the default exchange's and amq.direct's
    assert api.ok(f"/bindings/{VH}?columns=destination&sort=routing_key&sort_reverse=true"
                  "&page=2&page_size=1") == [{"destination": Q}, {"destination": Q}]


def test_bad_paging_parameters_on_binding_lists(target: tuple[str, HttpApi]) -> None:
    """With ``page`` present RabbitMQ checks the parameters and crashes on a bad one (an
    empty 500); Leveret answers 400 as on every other list (a deliberate difference)."""
    broker, api = target
    for path in BINDING_LISTS:
        for query in ("page=1&page_size=1000", "page=0", "page=abc", "page=1&page_size=0"):
            status, _, body = api.get(f"{path}?{query}")
            if broker == "rabbitmq":
                assert (status, body) == (500, None), (path, query, status, body)
            else:
                assert status == 400, (path, query, status, body)
                assert body["error"] == "invalid_pagination_parameters", body
    status, _, body = api.get(f"/queues/{VH}?page=1&page_size=1000")  # a paged list: 400
    assert (status, body) == (400, {"error": "invalid_pagination_parameters", "reason":
                                    "Invalid pagination parameters: page number 1, page size "
                                    "1000"})


def _token(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


GUEST = _token("guest", "guest")


def test_auth_query_parameter_only_on_definitions(target: tuple[str, HttpApi]) -> None:
    broker, api = target
    for path in ("/overview", "/queues", "/whoami", "/users", f"/vhosts/{VH}"):
        status, headers, body = api.get(f"{path}?auth={GUEST}", auth=False)
        assert (status, body) == (401, None), (path, status, body)  # as no credentials
        assert headers.get("WWW-Authenticate") == 'Basic realm="RabbitMQ Management"'
    for path in ("/definitions", f"/definitions/{VH}"):
        status, headers, body = api.get(f"{path}?download=f.json&auth={GUEST}", auth=False)
        assert status == 200 and isinstance(body, dict) and "queues" in body, (path, status)
        disposition = headers.get("Content-Disposition", "")
        assert disposition.startswith("attachment; filename=") and "f.json" in disposition
        status, _, body = api.get(f"{path}?auth={GUEST}", auth=False)
        assert status == 200 and "queues" in body, path
    # ?auth= is read instead of the header, both ways round:
    status, headers, body = api.get(f"/definitions?auth={_token('guest', 'bad')}")
    assert (status, body) == (401, LOGIN_FAILED)
    assert headers.get("WWW-Authenticate") is not None
    wrong = HttpApi(api.base, "guest", "bad")
    assert wrong.get(f"/definitions?auth={GUEST}")[0] == 200
    status, _, body = api.get(f"/definitions?auth={_token(MGMT, PW)}", auth=False)
    assert (status, body) == (401, {"error": "not_authorised",
                                    "reason": "Not administrator user"})
    status, _, _ = api.post(f"/definitions/{VH}?auth={GUEST}", {"queues": []}, auth=False)
    assert status == 204
    status, _, body = api.get("/definitions?auth=notbase64!!", auth=False)
    # RabbitMQ crashes (an empty 500); Leveret answers as for such a header: an empty 400.
    assert (status, body) == ((500, None) if broker == "rabbitmq" else (400, None))
