"""AMQPS: the TLS context of the second listener (``server.py``), from Config.

Theory of operation
-------------------
stdlib ``ssl`` only, TLS 1.2 and later. ``tls_verify = "peer"`` asks every
client for a certificate chaining to ``tls_cafile`` (RabbitMQ's
``verify_peer``); with ``tls_fail_if_no_peer_cert`` a client without one
fails the handshake, otherwise it may go on without (and then only PLAIN and
AMQPLAIN are offered). A client certificate that verified names the user for
the EXTERNAL mechanism (``broker/auth.py`` ``cert_user``). A failed handshake
(wrong CA, expired certificate, a plain-TCP client) ends that socket only,
before any ``Connection`` exists; the event loop reports such failures only
in debug mode, so they leave no trace in the broker log.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import TYPE_CHECKING, Any

from leveret.broker import auth

if TYPE_CHECKING:
    from leveret.config import Config


class TLSConfigError(Exception):
    """The certificate settings cannot be used (one line for the user)."""


def server_context(config: Config) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(config.tls_certfile),
                            str(config.tls_keyfile) if config.tls_keyfile else None)
        if config.tls_verify == "peer":
            if config.tls_cafile is None:
                raise TLSConfigError("tls_verify = peer needs tls_cafile")
            ctx.load_verify_locations(cafile=str(config.tls_cafile))
            ctx.verify_mode = (ssl.CERT_REQUIRED if config.tls_fail_if_no_peer_cert
                               else ssl.CERT_OPTIONAL)
        elif config.tls_cafile is not None:
            ctx.load_verify_locations(cafile=str(config.tls_cafile))
    except (OSError, ssl.SSLError) as exc:
        raise TLSConfigError(f"cannot load the TLS certificate settings: {exc}") from exc
    return ctx


def peer_cert_user(transport: asyncio.BaseTransport, config: Config) -> str | None:
    """The EXTERNAL user of a TLS transport whose client certificate verified, else None."""
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert()  # {} unless a certificate was presented and verified
    return auth.cert_user(cert, config.tls_cert_login_from) if cert else None


def session_info(transport: asyncio.BaseTransport) -> dict[str, Any] | None:
    """A TLS transport's protocol, cipher and client certificate, under RabbitMQ's
    connection field names (``ssl_protocol`` lower-cased, "tlsv1.3"; the cipher is
    OpenSSL's name for the suite, not compared with RabbitMQ's, whose TLS listener is
    not configured here); None for plain TCP."""
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    cipher = ssl_object.cipher() or ("", "", 0)
    version = ssl_object.version() or cipher[1]
    cert = ssl_object.getpeercert() or {}
    return {
        "ssl_protocol": version.lower() if version else None,
        "ssl_cipher": cipher[0] or None,
        "peer_cert_subject": _dn(cert.get("subject")) if cert else None,
        "peer_cert_issuer": _dn(cert.get("issuer")) if cert else None,
        "peer_cert_validity": (f"{cert.get('notBefore')} - {cert.get('notAfter')}"
                               if cert else None),
    }


def _dn(rdns: Any) -> str:
    """``getpeercert``'s name as "CN=...,O=..." (most specific first, as RabbitMQ)."""
    parts = [f"{_SHORT.get(k, k)}={v}" for rdn in reversed(rdns or ()) for k, v in rdn]
    return ",".join(parts)


_SHORT = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
          "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST"}
