"""``?name=...&use_regex=true`` on every list, compared with RabbitMQ 3.10.8.

A pattern that makes a backtracking engine take exponential time (``^(a+)+$`` against
a long run of ``a`` that does not end the name) is answered at once, as RabbitMQ's PCRE
answers it; matching is caseless, as RabbitMQ's; a pattern that does not compile is
RabbitMQ's 400. Paged (``page=1``): RabbitMQ 3.10.8 filters by name only then.

Runs against a private Leveret always, and against RabbitMQ when its API answers on
127.0.0.1:15672 (skipped otherwise); what it creates there is deleted afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from tests.integration import test_management_permissions as mp
from tests.integration.conftest import HttpApi

SUFFIX = uuid.uuid4().hex[:6]
VH = f"nf-{SUFFIX}"
LONG = "a" * 40 + "!"  # ^(a+)+$ fails on it only after trying every split of the a's
SHORT = "aaaa"
EVIL = "^(a+)+$"
INVALID = {"error": "bad_request", "reason": "Pagination parameters are invalid"}


@pytest.fixture(params=["leveret", "rabbitmq"])
def target(request: pytest.FixtureRequest) -> Iterator[HttpApi]:
    """guest's API with VH holding the queues LONG and SHORT."""
    if request.param == "rabbitmq":
        found = mp._rabbitmq_api()
        if found is None:
            pytest.skip("no RabbitMQ management API on 127.0.0.1:15672")
        api = found
    else:
        api = HttpApi(request.getfixturevalue("make_broker")().api_url + "/api")
    try:
        mp._ok(api.put(f"/vhosts/{VH}", {}), 201, 204)
        for name in (LONG, SHORT):
            mp._ok(api.put(f"/queues/{VH}/{name}", {}), 201, 204)
        yield api
    finally:
        api.delete(f"/vhosts/{VH}")


def _names(api: HttpApi, path: str, pattern: str) -> list[str] | tuple[int, object]:
    status, _, body = api.get(f"{path}?name={quote(pattern, safe='')}&use_regex=true"
                              "&page=1&columns=name")
    if status != 200:
        return status, body
    return sorted(item["name"] for item in body["items"])


def test_catastrophic_pattern_is_answered(target: HttpApi) -> None:
    assert _names(target, f"/queues/{VH}", EVIL) == [SHORT]
    assert _names(target, f"/exchanges/{VH}", EVIL) == []
    assert _names(target, "/vhosts", f"^{VH}$|{EVIL}") == [VH]


def test_matching_is_caseless(target: HttpApi) -> None:
    assert _names(target, f"/queues/{VH}", "A+!$") == [LONG]
    assert _names(target, "/vhosts", VH.upper()) == [VH]


@pytest.mark.parametrize("path", ["/queues", "/exchanges", "/vhosts"])
@pytest.mark.parametrize("pattern", ["(a", "[a-"])
def test_invalid_pattern_is_a_400(target: HttpApi, path: str, pattern: str) -> None:
    assert _names(target, path, pattern) == (400, INVALID)


LISTS = ["/queues", "/exchanges", "/vhosts", "/users", "/connections", "/channels",
         "/consumers", "/policies", "/permissions"]


def test_every_list_filters_in_linear_time(api: HttpApi) -> None:
    """Leveret filters every list by name (RabbitMQ 3.10.8 some, when paged); each gets
    the same matcher: the catastrophic pattern is answered, a bad one is a 400."""
    for path in LISTS:
        for pattern, answer in ((EVIL + "|" + LONG, (200, [])), ("(a", (400, INVALID))):
            status, _, body = api.get(f"{path}?name={quote(pattern, safe='')}&use_regex=true")
            assert (status, body) == answer, path
    mp._ok(api.put(f"/queues/%2F/{LONG}", {}), 201, 204)
    try:
        assert _names(api, "/queues", EVIL) == []
    finally:
        api.delete(f"/queues/%2F/{LONG}")


def test_backtracking_features_are_refused_by_leveret(api: HttpApi) -> None:
    """Where Leveret differs (``model/name_pattern.py``): RabbitMQ runs lookaround and
    backreferences; RE2 has neither, and Leveret answers them as an invalid pattern."""
    for pattern in ("(?=a)", "(a)\\1"):
        assert _names(api, "/queues", pattern) == (400, INVALID)
