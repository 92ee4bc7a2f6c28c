"""SASL mechanisms PLAIN, AMQPLAIN and EXTERNAL, and the loopback-only rule for guest.

As in RabbitMQ, a user listed in ``loopback_users`` (``guest`` by default)
may log in only from a loopback address; a refused login is reported to the
client as 403 ACCESS_REFUSED with the same text whatever the reason, and
logged with the real reason. Passwords are checked against the stored
salted hash (``users.py``); a user without one cannot use PLAIN/AMQPLAIN.
EXTERNAL (``rabbitmq_auth_mechanism_ssl``) takes the user name from a
verified TLS client certificate (``cert_user``); it is offered only on a TLS
connection whose client presented a certificate that verified.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any, Protocol

from pamqp import decode

log = logging.getLogger(__name__)

MECHANISMS = ("PLAIN", "AMQPLAIN")
EXTERNAL = "EXTERNAL"


class Credentials(Protocol):
    """What authentication needs from the user registry (``accounts.Accounts``)."""

    users: dict[str, Any]

    def authenticate(self, name: str, password: str) -> Any: ...


def mechanisms(peer_cert_user: str | None) -> tuple[str, ...]:
    """What connection.start offers: EXTERNAL only with a verified client certificate."""
    return (*MECHANISMS, EXTERNAL) if peer_cert_user else MECHANISMS


def cert_user(cert: dict[str, Any] | None, login_from: str = "distinguished_name") -> str | None:
    """The user name in a verified peer certificate (``ssl.getpeercert()``), as RabbitMQ's
    ``ssl_cert_login_from``: the subject's common name, or its distinguished name in
    RFC 4514 form, most specific first (``CN=client,O=Acme,C=GB``)."""
    if not cert or "subject" not in cert:
        return None
    rdns = [rdn for rdn in cert["subject"]]
    if login_from == "common_name":
        for rdn in rdns:
            for key, value in rdn:
                if key == "commonName":
                    return str(value)
        return None
    short = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
             "countryName": "C", "stateOrProvinceName": "ST", "localityName": "L",
             "domainComponent": "DC", "emailAddress": "emailAddress", "userId": "UID"}
    parts = ["+".join(f"{short.get(k, k)}={_escape_dn(str(v))}" for k, v in rdn)
             for rdn in reversed(rdns)]
    return ",".join(parts) or None


def _escape_dn(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    return out[:-1] + "\\ " if out.endswith(" ") else out


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


def authenticate(mechanism: str, response: Any, accounts: Credentials,
                 peer: tuple[str, int] | None, config: Any,
                 peer_cert_user: str | None = None) -> str | None:
    """The authenticated user name, or None (and a log line saying why)."""
    if isinstance(response, str):
        response = response.encode("latin-1", "replace")
    if mechanism == EXTERNAL and peer_cert_user:
        if peer_cert_user not in accounts.users:
            log.warning("login refused: user %r (from the client certificate) does not exist",
                        peer_cert_user)
            return None
        return _loopback_ok(peer_cert_user, peer, config)
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
    if accounts.authenticate(user, password) is None:
        log.warning("login refused for user %r: invalid credentials", user)
        return None
    return _loopback_ok(user, peer, config)


def _loopback_ok(user: str, peer: tuple[str, int] | None, config: Any) -> str | None:
    if user in config.loopback_users and not is_loopback(peer):
        log.warning("login refused for user %r: user can only log in via localhost", user)
        return None
    return user
