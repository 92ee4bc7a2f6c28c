"""Tag checks per route, vhost access and the loopback rule, over real HTTP against the
management application on a broker model whose users (``Accounts``) carry each tag."""

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
    ("mgmt", "/api/policies/%2F/p", "PUT", (401, "Not policymaker user")),
    ("pol", "/api/policies/%2F/p", "PUT", (201, None)),
    ("mgmt", "/api/queues", "GET", (200, None)),
])
async def test_tags_gate_routes(client, user, path, method, expected):
    body = {"pattern": "^x", "definition": {"max-length": 1}} if method == "PUT" else None
    resp = await client.request(method, path, headers=header(user), json=body)
    status, reason = expected
    assert resp.status == status
    if reason is not None:
        assert await resp.json() == {"error": "not_authorized", "reason": reason}
        assert resp.headers["WWW-Authenticate"] == 'Basic realm="RabbitMQ Management"'


async def test_vhost_access_needs_permissions(client):
    resp = await client.get("/api/queues/%2F", headers=header("nowhere"))
    assert resp.status == 401
    assert (await resp.json())["reason"] == auth.NO_VHOST_ACCESS
    resp = await client.get("/api/overview", headers=header("nowhere"))
    assert resp.status == 200


async def test_whoami_reports_tags(client):
    resp = await client.get("/api/whoami", headers=header("mon"))
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
    assert auth.check_login(broker, config, basic, ("10.1.2.3", 5000)) == auth.LOOPBACK_ONLY
    assert auth.check_login(broker, config, basic, ("127.0.0.1", 5000)) == (
        "guest", ["administrator"])
    wrong = "Basic " + base64.b64encode(b"guest:nope").decode()
    assert auth.check_login(broker, config, wrong, None) == auth.LOGIN_FAILED
    assert auth.check_login(broker, config, None, None) == auth.LOGIN_FAILED
