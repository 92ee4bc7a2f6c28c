"""Tag checks per route, vhost access, the loopback rule and the 401 shapes, over real HTTP
against the management application on a broker model whose users (``Accounts``) carry each
tag (tests/integration/test_management_access.py compares the same with RabbitMQ)."""

from __future__ import annotations

import base64
from types import SimpleNamespace

import pytest
from aiohttp.test_utils import TestClient, TestServer

from leveret.broker.broker import Broker
from leveret.config import Config
from leveret.management_ui import api, auth
from leveret.management_ui.service import State

TAGS = {"admin": ["administrator"], "mon": ["monitoring"], "pol": ["policymaker"],
        "mgmt": ["management"], "plain": []}


def header(user: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:pw".encode()).decode()}


@pytest.fixture
async def client(tmp_path):
    config = Config(data_dir=tmp_path)
    broker = Broker(config)
    broker.accounts.recover([])  # a fresh node: guest and "/"
    for name, tags in TAGS.items():
        if name != "guest":
            broker.accounts.add_user(name, password="pw", tags=tags)
            broker.accounts.set_permissions(name, "/", ".*", ".*", ".*")
    broker.accounts.add_user("nowhere", password="pw", tags=["management"])
    broker.accounts.add_user("adm-nowhere", password="pw", tags=["administrator"])
    broker.accounts.add_user("mon-nowhere", password="pw", tags=["monitoring"])
    state = State(broker, config)
    c = TestClient(TestServer(api.build_app(state)))
    await c.start_server()
    yield c
    await c.close()


@pytest.mark.parametrize("user, path, method, expected", [
    ("plain", "/api/overview", "GET", (401, "Not management user")),
    ("mgmt", "/api/overview", "GET", (200, None)),
    ("mgmt", "/api/whoami", "GET", (200, None)),
    ("mgmt", "/api/nodes", "GET", (401, "Not monitor user")),
    ("mon", "/api/nodes", "GET", (200, None)),
    ("admin", "/api/nodes", "GET", (200, None)),
    ("mgmt", "/api/users", "GET", (401, "Not administrator user")),
    ("mon", "/api/definitions", "GET", (401, "Not administrator user")),
    ("admin", "/api/definitions", "GET", (200, None)),
    ("mgmt", "/api/vhosts/%2F", "GET", (401, "Not administrator user")),
    ("mgmt", "/api/policies/%2F/p", "PUT", (401, auth.NO_OBJECT_ACCESS)),
    ("mon", "/api/policies/%2F/p", "GET", (401, auth.NO_OBJECT_ACCESS)),
    ("pol", "/api/policies/%2F/p", "PUT", (201, None)),
    ("mgmt", "/api/queues", "GET", (200, None)),
])
async def test_tags_gate_routes(client, user, path, method, expected):
    """A refusal after the login: 401 ``not_authorised`` (British spelling), no
    WWW-Authenticate (RabbitMQ 3.10.8)."""
    body = {"pattern": "^x", "definition": {"max-length": 1}} if method == "PUT" else None
    resp = await client.request(method, path, headers=header(user), json=body)
    status, reason = expected
    assert resp.status == status
    if reason is not None:
        assert await resp.json() == {"error": "not_authorised", "reason": reason}
        assert "WWW-Authenticate" not in resp.headers


async def test_failed_login_is_not_authorized_with_a_challenge(client):
    for headers in ({"Authorization": "Basic " + base64.b64encode(b"mgmt:nope").decode()},
                    {"Authorization": "Bearer x"}):
        resp = await client.get("/api/overview", headers=headers)
        assert resp.status == 401
        assert await resp.json() == {"error": "not_authorized", "reason": "Login failed"}
        assert resp.headers["WWW-Authenticate"] == 'Basic realm="RabbitMQ Management"'
    resp = await client.get("/api/overview")
    assert (resp.status, await resp.read()) == (401, b"")
    assert resp.headers["WWW-Authenticate"] == 'Basic realm="RabbitMQ Management"'
    resp = await client.get("/api/overview", headers={"Authorization": "Basic !!!"})
    assert (resp.status, await resp.read()) == (400, b"")
    assert "WWW-Authenticate" not in resp.headers


async def test_vhost_access_needs_permissions(client):
    resp = await client.get("/api/queues/%2F", headers=header("nowhere"))
    assert resp.status == 401
    assert await resp.json() == {"error": "not_authorised", "reason": auth.NO_VHOST_ACCESS}
    assert "WWW-Authenticate" not in resp.headers
    resp = await client.get("/api/overview", headers=header("nowhere"))
    assert resp.status == 200
    resp = await client.get("/api/consumers/%2F", headers=header("nowhere"))
    assert (resp.status, await resp.json()) == (200, [])  # shown none, not refused


async def test_administrators_read_any_vhost(client):
    """RabbitMQ's is_authorized_vhost lets administrators in without permissions; their
    AMQP channel there is refused (``Access refused.``)."""
    resp = await client.get("/api/queues/%2F", headers=header("adm-nowhere"))  # no permissions
    assert resp.status == 200
    resp = await client.post("/api/queues/%2F/q/get", headers=header("adm-nowhere"),
                             json={"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"})
    assert (resp.status, await resp.json()) == (
        401, {"error": "not_authorised", "reason": "Access refused."})
    resp = await client.get("/api/vhost-limits/%2F", headers=header("mon-nowhere"))
    assert resp.status == 200  # monitoring users see every vhost's limits


async def test_whoami_reports_tags(client):
    resp = await client.get("/api/whoami?columns=name,tags", headers=header("mon"))
    assert await resp.json() == {"name": "mon", "tags": ["monitoring"]}


async def test_query_auth_for_downloads(client):
    token = base64.b64encode(b"admin:pw").decode()
    resp = await client.get(f"/api/definitions?auth={token}&download=x.json")
    assert resp.status == 200
    assert resp.headers["Content-Disposition"] == 'attachment; filename="x.json"'


def test_loopback_users_apply_to_http(tmp_path):
    broker = Broker(Config(data_dir=tmp_path))
    broker.accounts.recover([])
    config = SimpleNamespace(loopback_users=("guest",))
    basic = "Basic " + base64.b64encode(b"guest:guest").decode()
    assert auth.check_login(broker, config, basic, ("10.1.2.3", 5000)) == auth.Refusal(
        auth.LOOPBACK_ONLY)  # not_authorised, no challenge (as RabbitMQ)
    assert auth.check_login(broker, config, basic, ("127.0.0.1", 5000)) == (
        "guest", ["administrator"])
    wrong = "Basic " + base64.b64encode(b"guest:nope").decode()
    assert auth.check_login(broker, config, wrong, None) == auth.FAILED
    assert auth.check_login(broker, config, None, None) == auth.FAILED
    assert auth.Refusal(auth.LOGIN_FAILED, failed=True) == auth.FAILED
