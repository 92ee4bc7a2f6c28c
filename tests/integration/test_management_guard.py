"""The management API's guard (``management_ui/guard.py``) over real HTTP: cross-site
writes refused, non-JSON bodies refused, malformed bodies answered with RabbitMQ's 400s
and one log line, and connections that are slow to send a request closed.

Where RabbitMQ 3.10 answers on 127.0.0.1:15672, the answers it shares with Leveret are
checked on it too (``target_http``): 415 on ``/api/definitions``, the body-size 400, the
``not_json`` of a deeply nested body. Timeouts are set short through the settings and the
tests wait for the close, bounded only by pytest's timeout.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.conftest import HttpApi
from tests.integration.test_management_tls import start_https_broker
from tests.integration.test_tls import Certs, certs

__all__ = ["certs"]  # the fixture, used by name below

pytestmark = pytest.mark.timeout(120)

GUEST = ("guest", "guest")
BODY_TOO_LARGE = {"error": "bad_request", "reason": "Exceeded HTTP request body size limit"}
NOT_JSON = {"error": "bad_request", "reason": "not_json"}
# Short bounds for the timeout tests: 1 s for headers and between requests, 1 s of body silence.
SHORT = {"LEVERET_MANAGEMENT_REQUEST_TIMEOUT": "1", "LEVERET_MANAGEMENT_IDLE_TIMEOUT": "1"}
# A request line sent a byte at a time never ends: far longer than the timeouts, far shorter
# than aiohttp's 8190-byte line limit (whose 400 would close it for another reason).
NEVER_ENDING_LINE = b"GET /api/" + b"a" * 4000


def _user() -> str:
    return f"guard-{uuid.uuid4().hex[:8]}"


def _put_user(base: str, user: str, data: bytes, headers: dict[str, str]) -> requests.Response:
    return requests.put(f"{base}/api/users/{user}", data=data, headers=headers, auth=GUEST,
                        timeout=30)


def _exists(base: str, user: str) -> bool:
    return requests.get(f"{base}/api/users/{user}", auth=GUEST, timeout=30).status_code == 200


@pytest.fixture(params=["leveret", "rabbitmq"])
def target_http(request: pytest.FixtureRequest) -> Iterator[str]:
    """The base URL of Leveret's management API, and of RabbitMQ's when one answers."""
    if request.param == "rabbitmq":
        request.getfixturevalue("rabbitmq_http")  # skips without a RabbitMQ
        yield "http://127.0.0.1:15672"
    else:
        yield request.getfixturevalue("broker").api_url


# -- content types --------------------------------------------------------------------------

DEFINITIONS = json.dumps({"vhosts": [{"name": "guard-ct"}]}).encode()


@pytest.mark.parametrize("content_type", [
    "text/plain", "application/x-www-form-urlencoded", None, "application/xml", "text/json"])
def test_definitions_refuse_a_body_that_is_not_json(target_http: str, content_type: str | None
                                                    ) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    response = requests.post(f"{target_http}/api/definitions", data=DEFINITIONS, auth=GUEST,
                             headers=headers, timeout=30)
    if content_type is None:  # requests sends none; check that it did not
        assert "Content-Type" not in response.request.headers
    assert response.status_code == 415
    assert requests.get(f"{target_http}/api/vhosts/guard-ct", auth=GUEST,
                        timeout=30).status_code == 404


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "APPLICATION/JSON"])
def test_definitions_take_json_with_parameters_in_any_case(target_http: str, content_type: str
                                                           ) -> None:
    response = requests.post(f"{target_http}/api/definitions", data=b'{"users": []}',
                             auth=GUEST, headers={"Content-Type": content_type}, timeout=30)
    assert response.status_code == 204


@pytest.mark.parametrize("content_type", [
    "text/plain", "application/x-www-form-urlencoded", None,
    "multipart/form-data; boundary=x"])
def test_every_write_refuses_a_body_that_is_not_json(broker: Any, content_type: str | None
                                                     ) -> None:
    """Where Leveret differs: RabbitMQ 3.10 takes any type on routes but definitions."""
    user = _user()
    headers = {"Content-Type": content_type} if content_type else {}
    response = _put_user(broker.api_url, user, b'{"password": "pw", "tags": ""}', headers)
    assert response.status_code == 415
    assert response.json()["error"] == "Unsupported Media Type"
    assert not _exists(broker.api_url, user)


def test_a_write_without_a_body_needs_no_content_type(broker: Any) -> None:
    name = _user()
    response = requests.put(f"{broker.api_url}/api/vhosts/{name}", auth=GUEST, timeout=30)
    assert "Content-Type" not in response.request.headers
    assert response.status_code == 201
    assert requests.delete(f"{broker.api_url}/api/vhosts/{name}", auth=GUEST,
                           timeout=30).status_code == 204


# -- Origin ---------------------------------------------------------------------------------

@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://127.0.0.1:1",
                                    "https://127.0.0.1:{port}"])
def test_a_write_from_another_origin_is_403(broker: Any, origin: str) -> None:
    user = _user()
    origin = origin.format(port=broker.management_port)
    response = _put_user(broker.api_url, user, b'{"password": "pw", "tags": "administrator"}',
                         {"Content-Type": "application/json", "Origin": origin})
    assert response.status_code == 403
    body = response.json()
    assert body["error"] == "forbidden" and origin in body["reason"]
    assert not _exists(broker.api_url, user)
    # Reading is not refused: a page elsewhere cannot read the answer anyway (no CORS).
    assert requests.get(f"{broker.api_url}/api/whoami", auth=GUEST, timeout=30,
                        headers={"Origin": origin}).status_code == 200


@pytest.mark.parametrize("origin", [None, "http://127.0.0.1:{port}", "HTTP://127.0.0.1:{port}"])
def test_a_write_from_the_listeners_own_origin_or_none_is_served(broker: Any,
                                                                 origin: str | None) -> None:
    user = _user()
    headers = {"Content-Type": "application/json"}
    if origin is not None:
        headers["Origin"] = origin.format(port=broker.management_port)
    response = _put_user(broker.api_url, user, b'{"password": "pw", "tags": ""}', headers)
    assert response.status_code == 201
    assert _exists(broker.api_url, user)


def test_allowed_origins_are_served(make_broker: Any) -> None:
    b = make_broker(None, LEVERET_MANAGEMENT_ALLOWED_ORIGINS="https://mq.example.com")
    headers = {"Content-Type": "application/json", "Origin": "https://mq.example.com"}
    assert _put_user(b.api_url, "proxied", b'{"password": "pw", "tags": ""}',
                     headers).status_code == 201
    headers["Origin"] = "https://other.example.com"
    assert _put_user(b.api_url, "elsewhere", b'{"password": "pw", "tags": ""}',
                     headers).status_code == 403


# -- malformed bodies -----------------------------------------------------------------------

def test_a_body_over_the_limit_is_400(target_http: str) -> None:
    big = b" " * (33 * 1024 * 1024)  # over both limits (RabbitMQ 20 MB, Leveret 32 MB)
    response = _put_user(target_http, _user(), big, {"Content-Type": "application/json"})
    assert (response.status_code, response.json()) == (400, BODY_TOO_LARGE)


def test_a_chunked_body_over_the_limit_is_400(broker: Any) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(33):
            yield b" " * (1024 * 1024)

    response = _put_user(broker.api_url, _user(), chunks(),  # type: ignore[arg-type]
                         {"Content-Type": "application/json"})
    assert response.request.headers.get("Transfer-Encoding") == "chunked"
    assert (response.status_code, response.json()) == (400, BODY_TOO_LARGE)


def test_deeply_nested_json_is_400_not_json(target_http: str) -> None:
    response = _put_user(target_http, _user(), b"[" * 3000 + b"]" * 3000,
                         {"Content-Type": "application/json"})
    assert (response.status_code, response.json()) == (400, NOT_JSON)


def test_a_client_error_is_one_log_line(broker: Any) -> None:
    before = len(broker.log_text().splitlines())
    nested = b'{"a":' * 3000 + b"1" + b"}" * 3000
    response = _put_user(broker.api_url, _user(), nested, {"Content-Type": "application/json"})
    assert (response.status_code, response.json()) == (400, NOT_JSON)
    added = broker.log_text().splitlines()[before:]
    mine = [line for line in added if "/api/users/guard-" in line]
    assert len(mine) == 1 and "not_json" in mine[0], added
    assert not any("Traceback" in line or "RecursionError" in line for line in added), added


@pytest.mark.parametrize(("body", "reason"), [
    (b"[]", "not_json"), (b"1", "not_json"), (b"{bad", "not_json"),
    (b"\xff\xfe{}", "not_json"),
    (b'"s"', "invalid payload: the request body JSON-decoded to a string. "
             "Is the input doubly-JSON-encoded?")])
def test_a_body_that_is_not_an_object_is_400(target_http: str, body: bytes, reason: str) -> None:
    response = requests.put(f"{target_http}/api/queues/%2F/guard-q", data=body, auth=GUEST,
                            headers={"Content-Type": "application/json"}, timeout=30)
    assert (response.status_code, response.json()) == (400, {"error": "bad_request",
                                                             "reason": reason})


@pytest.mark.parametrize("body", [b"[]", b"1", b'"s"', b"null", b"{bad", b"[" * 3000])
def test_definitions_that_are_not_an_object_are_failed_to_parse_json(
        target_http: str, body: bytes) -> None:
    response = requests.post(f"{target_http}/api/definitions", data=body, auth=GUEST,
                             headers={"Content-Type": "application/json"}, timeout=30)
    assert (response.status_code, response.json()) == (
        400, {"error": "bad_request", "reason": "failed_to_parse_json"})


# -- slow and idle connections --------------------------------------------------------------

def _closed_by_peer(sock: socket.socket, dribble: bytes = b"") -> bytes:
    """Sends ``dribble`` a byte at a time (a byte whenever the peer is quiet for 0.2 s)
    until the peer closes; what the peer sent before closing."""
    got = b""
    sock.settimeout(0.2)
    sent = 0
    while True:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            if sent < len(dribble):
                try:
                    sock.sendall(dribble[sent:sent + 1])
                except OSError:
                    return got
                sent += 1
            continue
        except ConnectionResetError:
            return got
        if not data:
            return got
        got += data


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30)


@pytest.fixture
def short_timeouts(make_broker: Any) -> Any:
    return make_broker(None, **SHORT)


def test_slow_request_lines_are_closed_while_others_are_served(short_timeouts: Any) -> None:
    b = short_timeouts
    api = HttpApi(b.api_url + "/api")
    slow = [_connect(b.management_port) for _ in range(20)]
    try:
        dribble = NEVER_ENDING_LINE
        for sock in slow:
            sock.sendall(dribble[:1])
        assert api.get("/overview")[0] == 200  # served while they hang
        with selectors.DefaultSelector() as selector:
            for sock in slow:
                sock.setblocking(False)
                selector.register(sock, selectors.EVENT_READ)
            sent = 1
            while selector.get_map():
                ready = selector.select(timeout=0.2)
                for key, _ in ready:
                    try:
                        assert key.fileobj.recv(4096) == b""  # closed, without an answer
                    except ConnectionResetError:  # closed as a byte arrived
                        pass
                    selector.unregister(key.fileobj)
                if not ready and sent < len(dribble):
                    for key in list(selector.get_map().values()):
                        with contextlib.suppress(OSError):
                            key.fileobj.send(dribble[sent:sent + 1])
                    sent += 1
    finally:
        for sock in slow:
            sock.close()
    assert api.get("/overview")[0] == 200


def test_a_silent_connection_is_closed(short_timeouts: Any) -> None:
    with _connect(short_timeouts.management_port) as silent:
        assert _closed_by_peer(silent) == b""
    with _connect(short_timeouts.prometheus_port) as silent:
        assert _closed_by_peer(silent) == b""


def test_a_silent_connection_is_closed_with_the_default_settings(target_http: str) -> None:
    """Both close it after cowboy's request_timeout (5 s), without an answer."""
    with _connect(int(target_http.rsplit(":", 1)[1])) as silent:
        assert _closed_by_peer(silent) == b""


def test_an_idle_keep_alive_connection_is_closed(short_timeouts: Any) -> None:
    with _connect(short_timeouts.management_port) as sock:
        sock.sendall(b"GET /api/overview HTTP/1.1\r\nHost: x\r\n"
                     b"Authorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\r\n")
        assert _closed_by_peer(sock).startswith(b"HTTP/1.1 200 OK\r\n")


def test_a_body_that_stops_arriving_is_408_and_closed(short_timeouts: Any) -> None:
    b = short_timeouts
    with _connect(b.management_port) as sock:
        sock.sendall(b"PUT /api/users/stalled HTTP/1.1\r\nHost: x\r\n"
                     b"Authorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
                     b'{"password": ')
        answer = _closed_by_peer(sock)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b'"error":"request_timeout"' in answer
    assert HttpApi(b.api_url + "/api").get("/users/stalled")[0] == 404


def test_https_closes_a_slow_request_too(make_broker: Any, tmp_path: Path, certs: Certs
                                         ) -> None:
    _, port = start_https_broker(make_broker, tmp_path, certs, **SHORT)
    context = ssl.create_default_context(cafile=str(certs.ca))
    with _connect(port) as raw, context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        assert _closed_by_peer(tls, NEVER_ENDING_LINE) == b""


@pytest.mark.parametrize("request_head", [
    b"GET /api/definitions?auth=%ff HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /api/overview HTTP/1.1\r\nHost: x\r\nAuthorization: Basic \xff\xfe\r\n\r\n"])
def test_credentials_beyond_ascii_are_an_empty_400(broker: Any, request_head: bytes) -> None:
    """Where Leveret differs: RabbitMQ 3.10.8 answers ``?auth=%ff`` with an empty 500."""
    with _connect(broker.management_port) as sock:
        sock.sendall(request_head)
        head = b""
        while b"\r\n\r\n" not in head:
            data = sock.recv(4096)
            assert data, head
            head += data
    assert head.startswith(b"HTTP/1.1 400 "), head
    assert b"\r\nContent-Length: 0\r\n" in head, head
