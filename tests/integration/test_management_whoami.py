"""``GET /api/whoami`` tells every user their own rights (a Leveret field), and only theirs.

RabbitMQ answers ``name`` and ``tags``; reading permissions (``/api/permissions``,
``/api/users/{u}/permissions``) needs the administrator tag, so its console cannot know
what a user may do. Leveret adds ``permissions`` ({vhost, configure, write, read}, one per
vhost the user has rights in) and ``topic_permissions`` ({vhost, exchange, write, read}),
which the console judges its buttons by; the administrator routes stay closed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.integration.conftest import HttpApi

SUFFIX = uuid.uuid4().hex[:8]
ADMIN, LIMITED, NOWHERE = (f"who-{r}-{SUFFIX}" for r in ("admin", "limited", "nowhere"))
VH = f"who-vh-{SUFFIX}"


@pytest.fixture
def users(api: HttpApi) -> Iterator[None]:
    assert api.put(f"/vhosts/{VH}")[0] in (201, 204)
    for name, tags in ((ADMIN, "administrator"), (LIMITED, "management"),
                       (NOWHERE, "management")):
        assert api.put(f"/users/{name}", {"password": "pw", "tags": tags})[0] in (201, 204)
    every = {"configure": ".*", "write": ".*", "read": ".*"}
    assert api.put(f"/permissions/%2F/{ADMIN}", every)[0] in (201, 204)
    assert api.put(f"/permissions/{VH}/{ADMIN}", every)[0] in (201, 204)
    assert api.put(f"/permissions/{VH}/{LIMITED}",
                   {"configure": "", "write": "^$", "read": "^q$"})[0] in (201, 204)
    assert api.put(f"/topic-permissions/{VH}/{LIMITED}",
                   {"exchange": "amq.topic", "write": "^a", "read": ".*"})[0] in (201, 204)
    yield
    for name in (ADMIN, LIMITED, NOWHERE):
        api.delete(f"/users/{name}")
    api.delete(f"/vhosts/{VH}")


def as_user(api: HttpApi, name: str) -> HttpApi:
    return HttpApi(api.base, name, "pw")


def test_whoami_lists_the_users_own_permissions_and_nothing_else(api: HttpApi, users: None) -> None:
    admin = as_user(api, ADMIN).ok("/whoami")
    assert admin == {
        "name": ADMIN, "tags": ["administrator"], "topic_permissions": [],
        "permissions": sorted([
            {"vhost": "/", "configure": ".*", "write": ".*", "read": ".*"},
            {"vhost": VH, "configure": ".*", "write": ".*", "read": ".*"},
        ], key=lambda p: p["vhost"])}

    limited = as_user(api, LIMITED)
    assert limited.ok("/whoami") == {
        "name": LIMITED, "tags": ["management"],
        # As stored and as /api/permissions shows them ("" stays "", meaning nothing).
        "permissions": [{"vhost": VH, "configure": "", "write": "^$", "read": "^q$"}],
        "topic_permissions": [{"vhost": VH, "exchange": "amq.topic", "write": "^a",
                               "read": ".*"}]}
    # Knowing one's own rights opens no one else's: the administrator routes stay closed.
    for path in ("/permissions", f"/users/{ADMIN}/permissions", f"/users/{LIMITED}/permissions"):
        status, _, body = limited.get(path)
        assert (status, body["error"]) == (401, "not_authorised"), path

    assert as_user(api, NOWHERE).ok("/whoami") == {
        "name": NOWHERE, "tags": ["management"], "permissions": [], "topic_permissions": []}


def test_whoami_follows_a_permission_change(api: HttpApi, users: None) -> None:
    limited = as_user(api, LIMITED)
    assert api.put(f"/permissions/{VH}/{LIMITED}",
                   {"configure": "^q$", "write": "^q$", "read": "^q$"})[0] in (201, 204)
    assert limited.ok("/whoami")["permissions"] == [
        {"vhost": VH, "configure": "^q$", "write": "^q$", "read": "^q$"}]
    assert api.delete(f"/permissions/{VH}/{LIMITED}")[0] == 204
    assert limited.ok("/whoami?columns=permissions") == {"permissions": []}
