"""Who may use the management API: HTTP basic credentials and RabbitMQ's tags.

The one seam to the user model (``broker/accounts.py``, issue 11): passwords
are checked by ``Accounts.authenticate`` against RabbitMQ's salted hashes, tags
are the user's, and vhost access is "has permissions there", as RabbitMQ's
``rabbit_mgmt_util:is_authorized_vhost``.

RabbitMQ's rules (``rabbit_mgmt_util:is_authorized*``, v3.10.8 l.255-290):
any of ``management``, ``policymaker``, ``monitoring``, ``administrator``
logs in; each route then needs one of the tags in ``IMPLIED`` (``monitoring``
and ``policymaker`` are implied by ``administrator``; ``management`` by any).
``loopback_users`` applies to HTTP logins as it does to AMQP.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from leveret.broker.auth import is_loopback

MANAGEMENT = "management"
POLICYMAKER = "policymaker"
MONITORING = "monitoring"
ADMINISTRATOR = "administrator"

# Route requirement -> the user tags that satisfy it.
IMPLIED: dict[str, frozenset[str]] = {
    MANAGEMENT: frozenset({MANAGEMENT, POLICYMAKER, MONITORING, ADMINISTRATOR}),
    POLICYMAKER: frozenset({POLICYMAKER, ADMINISTRATOR}),
    MONITORING: frozenset({MONITORING, ADMINISTRATOR}),
    ADMINISTRATOR: frozenset({ADMINISTRATOR}),
}
# RabbitMQ's texts when a logged-in user lacks the tag a route needs.
REFUSED_TEXT = {
    MANAGEMENT: "Not management user",
    POLICYMAKER: "Not policymaker user",
    MONITORING: "Not monitor user",
    ADMINISTRATOR: "Not administrator user",
}
LOGIN_FAILED = "Login failed"
LOOPBACK_ONLY = "User can only log in via localhost"
NO_VHOST_ACCESS = "User not authorised to access virtual host"


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """``Authorization: Basic base64(user:password)`` -> (user, password)."""
    if not header or header[:6].lower() != "basic ":
        return None
    try:
        user, sep, password = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep else None


def authenticate(broker: Any, user: str, password: str) -> tuple[str, list[str]] | None:
    """(name, tags) for valid credentials, else None."""
    found = broker.accounts.authenticate(user, password)
    if found is None:
        return None
    return found.name, list(found.tags)


def check_login(broker: Any, config: Any, header: str | None,
                peer: tuple[str, int] | None) -> tuple[str, list[str]] | str:
    """The logged-in (name, tags), or the 401 reason."""
    credentials = parse_basic(header)
    if credentials is None:
        return LOGIN_FAILED
    found = authenticate(broker, *credentials)
    if found is None:
        return LOGIN_FAILED
    if found[0] in config.loopback_users and not is_loopback(peer):
        return LOOPBACK_ONLY
    if not IMPLIED[MANAGEMENT] & set(found[1]):
        return REFUSED_TEXT[MANAGEMENT]
    return found


def allowed(tags: list[str], need: str) -> bool:
    return bool(IMPLIED[need] & set(tags))


def may_use_vhost(broker: Any, user: str, vhost: str) -> bool:
    """Vhost-scoped routes (/queues/{vh}, /exchanges/{vh}...): users with permissions there."""
    return bool(broker.accounts.control.can_open(user, vhost))
