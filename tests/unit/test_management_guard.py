"""The guard's predicates (``management_ui/guard.py``) on requests built in memory:
which Origins count as the listener's own, which Content-Types a write may carry."""

from __future__ import annotations

from unittest import mock

import pytest
from aiohttp import web
from aiohttp.streams import EMPTY_PAYLOAD
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict
from yarl import URL

from leveret.management_ui import guard

NONE: frozenset[tuple[str, str, int | None]] = frozenset()


def _request(method: str = "PUT", path: str = "/api/users/x", **headers: str) -> web.Request:
    merged = CIMultiDict({"Host": "127.0.0.1:15672"})
    merged.update({k.replace("_", "-"): v for k, v in headers.items()})
    with_body = merged.get("Content-Length", "0") != "0" or "Transfer-Encoding" in merged
    # A request with a body has a payload stream; aiohttp's empty one means none.
    return make_mocked_request(method, path, headers=merged,
                               payload=mock.Mock() if with_body else EMPTY_PAYLOAD)


@pytest.mark.parametrize(("origin", "allowed"), [
    (None, True),  # rabbitmqadmin, curl
    ("http://127.0.0.1:15672", True),
    ("HTTP://127.0.0.1:15672", True),
    ("http://127.0.0.1:15672/", True),
    ("http://127.0.0.1:15673", False),
    ("https://127.0.0.1:15672", False),  # another scheme is another origin
    ("http://localhost:15672", False),  # another host name, though the same address
    ("http://127.0.0.1", False),
    ("null", False),  # a sandboxed frame, a file:// page
    ("", False),
    ("http://[::1", False),  # not a URL
])
def test_origin_allowed(origin: str | None, allowed: bool) -> None:
    headers = {} if origin is None else {"Origin": origin}
    assert guard.origin_allowed(_request(**headers), NONE) is allowed


def test_configured_origins_are_allowed_too() -> None:
    proxy = frozenset({guard._origin_key(URL("https://mq.example.com"))})
    assert guard.origin_allowed(_request(Origin="https://mq.example.com"), proxy)
    assert guard.origin_allowed(_request(Origin="https://MQ.example.com:443"), proxy)
    assert not guard.origin_allowed(_request(Origin="http://mq.example.com"), proxy)


@pytest.mark.parametrize(("path", "headers", "accepted"), [
    ("/api/users/x", {"Content_Type": "application/json"}, True),
    ("/api/users/x", {"Content_Type": "Application/JSON; charset=utf-8"}, True),
    ("/api/users/x", {"Content_Type": "text/plain", "Content_Length": "0"}, False),
    ("/api/users/x", {"Content_Type": "application/x-www-form-urlencoded"}, False),
    ("/api/users/x", {"Content_Type": "multipart/form-data; boundary=b"}, False),
    ("/api/users/x", {"Content_Length": "2"}, False),  # a body without a type
    ("/api/users/x", {"Transfer_Encoding": "chunked"}, False),
    ("/api/users/x", {}, True),  # no body, no type: PUT /api/vhosts/v as curl sends it
    ("/api/definitions", {"Content_Type": "multipart/form-data; boundary=b"}, True),
    ("/api/definitions/%2F", {"Content_Type": "multipart/form-data; boundary=b"}, True),
    ("/api/definitions", {"Content_Type": "text/plain"}, False),
])
def test_content_type_accepted(path: str, headers: dict[str, str], accepted: bool) -> None:
    assert guard.content_type_accepted(_request("POST", path, **headers)) is accepted
