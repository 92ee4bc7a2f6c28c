"""Who may use the management API: HTTP basic credentials, RabbitMQ's tags, vhost access.

The one seam to the user model (``broker/accounts.py``): passwords
are checked by ``Accounts.authenticate`` against RabbitMQ's salted hashes, tags
are the user's, and vhost access is "has permissions there".

RabbitMQ's rules (``rabbit_mgmt_util:is_authorized*``), as RabbitMQ 3.10.8
answers them (observed with a user of each tag and no permissions in a vhost;
``tests/integration/test_management_access.py`` runs the cases on both brokers):

* Any of ``management``, ``policymaker``, ``monitoring``, ``administrator``
  logs in; each route then needs one of the tags in ``IMPLIED``
  (``monitoring`` and ``policymaker`` are implied by ``administrator``,
  ``management`` by any). ``loopback_users`` applies to HTTP logins as it
  does to AMQP.
* A route naming a vhost that exists also applies the route's
  ``VHOST_RULES`` entry (``ACCESS`` unless listed): administrators pass
  ``ACCESS`` and ``VISIBLE`` without permissions there; what such an
  administrator then does on an AMQP channel is refused by the channel
  (``rights.py``, ``rights.channel_vhost``).
* Connections and channels of another user (``may_see_connection``):
  monitoring users and administrators may read them, only administrators
  close them.
* Lists show what the user may see (``visible_vhosts``, ``may_see_connection``).

The answers (``router.py`` shapes them): a failed login is 401
``not_authorized`` (US spelling) ``Login failed`` with ``WWW-Authenticate``
(an empty 401 without credentials); every refusal after a login is 401
``not_authorised`` (British spelling) with the reason and no
``WWW-Authenticate``; a Basic header that does not decode to
``user:password`` is an empty 400 (``MalformedCredentials``).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, NamedTuple

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
NO_OBJECT_ACCESS = "User not authorised to access object"
NOT_AUTHORIZED = "not_authorized"  # the error of a failed login
NOT_AUTHORISED = "not_authorised"  # the error of every refusal after one

# The vhost rules (RabbitMQ's is_authorized_vhost, _vhost_visible, _policies):
ACCESS = "access"  # administrators, or users with permissions there
VISIBLE = "visible"  # those, and monitoring users
POLICY = "policy"  # administrators, or policymakers with permissions there (a missing vhost
# counts as allowed); any other user, whatever the route's tag: NO_OBJECT_ACCESS
OPEN = "open"  # no check: the handler lists what the user may see
VHOST_RULES: dict[str, str] = {  # route pattern -> rule, where not ACCESS
    "vhost-limits/{vhost}": VISIBLE,
    "policies/{vhost}/{name}": POLICY,
    "consumers/{vhost}": OPEN,
}


class Refusal(NamedTuple):
    """A login refused: the reason, and whether the credentials were wrong (then RabbitMQ
    answers ``not_authorized`` with ``WWW-Authenticate``) or the user may not log in."""

    reason: str
    failed: bool = False


FAILED = Refusal(LOGIN_FAILED, failed=True)


class MalformedCredentials(ValueError):
    """A Basic ``Authorization`` header that is not base64 of ``user:password``."""


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """``Authorization: Basic base64(user:password)`` -> (user, password); None for another
    scheme or none; MalformedCredentials when Basic does not decode to ``user:password``
    (RabbitMQ's 400). Undecodable UTF-8 is a login that fails, as on RabbitMQ."""
    scheme, _, token = (header or "").strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):  # ValueError: a character beyond ASCII
        raise MalformedCredentials(header) from None
    user, sep, password = raw.partition(b":")
    if not sep:
        raise MalformedCredentials(header)
    try:
        return user.decode(), password.decode()
    except UnicodeDecodeError:
        return None


def authenticate(broker: Any, user: str, password: str) -> tuple[str, list[str]] | None:
    """(name, tags) for valid credentials, else None."""
    found = broker.accounts.authenticate(user, password)
    if found is None:
        return None
    return found.name, list(found.tags)


def check_login(broker: Any, config: Any, header: str | None,
                peer: tuple[str, int] | None) -> tuple[str, list[str]] | Refusal:
    """The logged-in (name, tags), or why not; raises MalformedCredentials."""
    credentials = parse_basic(header)
    if credentials is None:
        return FAILED
    found = authenticate(broker, *credentials)
    if found is None:
        return FAILED
    if found[0] in config.loopback_users and not is_loopback(peer):
        return Refusal(LOOPBACK_ONLY)
    if not IMPLIED[MANAGEMENT] & set(found[1]):
        return Refusal(REFUSED_TEXT[MANAGEMENT])
    return found


def allowed(tags: list[str], need: str) -> bool:
    return bool(IMPLIED[need] & set(tags))


def may_use_vhost(broker: Any, user: str, vhost: str) -> bool:
    """Users with permissions in ``vhost`` (``rabbit_mgmt_util:user_matches_vhost``)."""
    return bool(broker.accounts.control.can_open(user, vhost))


def refusal(broker: Any, user: str, tags: list[str], need: str, rule: str,
            vhost: str | None) -> str | None:
    """RabbitMQ's reason for refusing a logged-in user a route needing the tag ``need``,
    with vhost rule ``rule`` and path vhost ``vhost``; None when allowed."""
    exists = vhost is not None and vhost in broker.vhosts
    if rule == POLICY:
        if allowed(tags, ADMINISTRATOR) or (allowed(tags, POLICYMAKER) and (
                not exists or may_use_vhost(broker, user, str(vhost)))):
            return None
        return NO_OBJECT_ACCESS
    if not allowed(tags, need):
        return REFUSED_TEXT[need]
    if not exists or rule == OPEN or allowed(tags, ADMINISTRATOR):
        return None
    if rule == VISIBLE and allowed(tags, MONITORING):
        return None
    return None if may_use_vhost(broker, user, str(vhost)) else NO_VHOST_ACCESS


def sees_vhost(broker: Any, user: str, tags: list[str], vhost: str,
               monitors_see_all: bool) -> bool:
    """Whether lists show this user the objects of ``vhost``: administrators see every
    vhost, and so do monitoring users when ``monitors_see_all`` (the vhosts and their
    limits, consumers, connections); others see those where they have permissions
    (RabbitMQ 3.10.8: queues, exchanges, bindings and policies even to monitoring users)."""
    if allowed(tags, ADMINISTRATOR) or (monitors_see_all and allowed(tags, MONITORING)):
        return True
    return may_use_vhost(broker, user, vhost)


def visible_vhosts(broker: Any, user: str, tags: list[str], monitors_see_all: bool) -> list[Any]:
    """The broker's vhost objects ``sees_vhost`` lets lists show this user."""
    return [vh for vh in broker.vhosts.values()
            if sees_vhost(broker, user, tags, vh.name, monitors_see_all)]


def may_see_connection(user: str, tags: list[str], owner: str | None,
                       close: bool = False) -> bool:
    """A connection (or its channels) of ``owner``: its own user; monitoring users and
    administrators may read another's, only administrators close it
    (``rabbit_mgmt_util:is_authorized_user``: else NO_OBJECT_ACCESS)."""
    if user == owner or allowed(tags, ADMINISTRATOR):
        return True
    return not close and allowed(tags, MONITORING)
