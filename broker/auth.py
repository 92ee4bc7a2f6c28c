"""SASL mechanisms PLAIN and AMQPLAIN, and the loopback-only rule for guest.

As in RabbitMQ, a user listed in ``loopback_users`` (``guest`` by default)
may log in only from a loopback address; a refused login is reported to the
client as 403 ACCESS_REFUSED with the same text whatever the reason, and
logged with the real reason.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from typing import Any

from pamqp import decode

log = logging.getLogger(__name__)

MECHANISMS = ("PLAIN", "AMQPLAIN")


def parse_plain(response: bytes) -> tuple[str, str] | None:
    """``[authzid] NUL authcid NUL passwd`` (RFC 4616)."""
    parts = response.split(b"\x00")
    if len(parts) != 3:
        return None
    try:
        return parts[1].decode("utf-8"), parts[2].decode("utf-8")
    except UnicodeDecodeError:
        return None


def parse_amqplain(response: bytes) -> tuple[str, str] | None:
    """A field table holding LOGIN and PASSWORD, sent without (or with) its length prefix."""
    for candidate in (len(response).to_bytes(4, "big") + response, response):
        try:
            _, table = decode.field_table(candidate)
        except Exception:  # noqa: BLE001 - any decode failure means "try the other framing"
            continue
        login, password = table.get("LOGIN"), table.get("PASSWORD")
        if isinstance(login, bytes):
            login = login.decode("utf-8", "replace")
        if isinstance(password, bytes):
            password = password.decode("utf-8", "replace")
        if isinstance(login, str) and isinstance(password, str):
            return login, password
    return None


def is_loopback(peer: tuple[str, int] | None) -> bool:
    if peer is None:
        return True
    try:
        address = ipaddress.ip_address(peer[0].split("%")[0])
    except ValueError:
        return peer[0] in ("localhost", "")
    if address.version == 6 and address.ipv4_mapped is not None:  # type: ignore[union-attr]
        address = address.ipv4_mapped  # type: ignore[union-attr]
    return address.is_loopback


def authenticate(mechanism: str, response: Any, users: dict[str, str],
                 peer: tuple[str, int] | None, config: Any) -> str | None:
    """The authenticated user name, or None (and a log line saying why)."""
    if isinstance(response, str):
        response = response.encode("latin-1", "replace")
    if mechanism == "PLAIN":
        creds = parse_plain(response)
    elif mechanism == "AMQPLAIN":
        creds = parse_amqplain(response)
    else:
        log.warning("login refused: unsupported mechanism %r", mechanism)
        return None
    if creds is None:
        log.warning("login refused: malformed %s response", mechanism)
        return None
    user, password = creds
    expected = users.get(user)
    if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
        log.warning("login refused for user %r: invalid credentials", user)
        return None
    if user in config.loopback_users and not is_loopback(peer):
        log.warning("login refused for user %r: user can only log in via localhost", user)
        return None
    return user
