"""AMQPS: the TLS listener, mutual TLS and the EXTERNAL mechanism, through pika and aio-pika.

Certificates are generated at run time with ``cryptography`` (never checked in):
a CA, a server certificate for 127.0.0.1/localhost, a client certificate
(CN=tls-client, O=Leveret tests), an expired client certificate, and a client
certificate from another CA. Failing clients (wrong CA, expired, plain TCP on the
TLS port, TLS on the plain port) must fail alone: a connection opened before
them keeps working.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

from leveret.broker import control  # noqa: E402

CLIENT_CN = "tls-client"
CLIENT_DN = "CN=tls-client,O=Leveret tests"


# -- certificates ---------------------------------------------------------------------

def _name(cn: str, org: str | None = None) -> Any:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _write(path: Path, cert: Any, key: Any) -> tuple[Path, Path]:
    path.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.with_suffix(".key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return path.with_suffix(".crt"), path.with_suffix(".key")


def _issue(subject: Any, issuer: Any, issuer_key: Any | None, *, ca: bool = False,
           san: list[Any] | None = None, expired: bool = False) -> tuple[Any, Any]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    start, end = ((now - datetime.timedelta(days=30), now - datetime.timedelta(days=1))
                  if expired else (now - datetime.timedelta(minutes=5),
                                   now + datetime.timedelta(days=1)))
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(issuer_key or key, hashes.SHA256()), key


@dataclass
class Certs:
    ca: Path
    server: tuple[Path, Path]
    client: tuple[Path, Path]
    expired: tuple[Path, Path]
    other_ca_client: tuple[Path, Path]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    import ipaddress

    d = tmp_path_factory.mktemp("certs")
    ca_name = _name("Leveret test CA")
    ca_cert, ca_key = _issue(ca_name, ca_name, None, ca=True)  # self-signed
    ca_path = d / "ca.crt"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    san = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    server = _write(d / "server", *_issue(_name("localhost"), ca_name, ca_key, san=san))
    client = _write(d / "client", *_issue(_name(CLIENT_CN, "Leveret tests"), ca_name, ca_key))
    expired = _write(d / "expired", *_issue(_name(CLIENT_CN, "Leveret tests"), ca_name, ca_key,
                                            expired=True))
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = _write(d / "other", *_issue(_name(CLIENT_CN, "Leveret tests"), _name("Other CA"),
                                        other_key))
    return Certs(ca_path, server, client, expired, other)


def client_context(certs: Certs, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


# -- brokers ------------------------------------------------------------------------------

def start_tls_broker(make_broker: Any, tmp_path: Path, certs: Certs, name: str,
                     **env: str) -> tuple[Any, int]:
    b = make_broker(tmp_path / name, "--tls-port", "0", "--tls-certfile", str(certs.server[0]),
                    "--tls-keyfile", str(certs.server[1]), "--tls-cafile", str(certs.ca),
                    **env)
    assert b.tls_port, b.log_text()  # from the ready file: every listener is up
    return b, b.tls_port


def admin(b: Any, command: str, **kw: Any) -> Any:
    return control.request(b.data_dir, {"command": command, **kw})


def tls_params(port: int, ctx: ssl.SSLContext, external: bool = False) -> pika.ConnectionParameters:
    creds: Any = (pika.credentials.ExternalCredentials() if external
                  else pika.PlainCredentials("guest", "guest"))
    return pika.ConnectionParameters("127.0.0.1", port, "/", creds, connection_attempts=1,
                                     ssl_options=pika.SSLOptions(ctx, "localhost"))


def mechanisms_offered(port: int, ctx: ssl.SSLContext) -> list[str]:
    """Read connection.start over TLS and return its mechanisms."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as s:
        s.sendall(b"AMQP\x00\x00\x09\x01")
        data = b""
        while len(data) < 7 or len(data) < 8 + struct.unpack(">I", data[3:7])[0]:
            data += s.recv(65536)
    from pamqp import frame

    _, _, start = frame.unmarshal(data)
    mechanisms = start.mechanisms
    return (mechanisms.decode() if isinstance(mechanisms, bytes) else mechanisms).split()


def roundtrip(conn: Any) -> bytes:
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"over tls")
    for _ in range(50):
        method, _, body = ch.basic_get(q, auto_ack=True)
        if method is not None:
            return body
        conn.process_data_events(0.02)
    raise AssertionError("message not delivered")


# -- tests ---------------------------------------------------------------------------------

def test_mutual_tls_external_with_common_name_and_clean_failures(
        make_broker: Any, tmp_path: Path, certs: Certs) -> None:
    b, tls_port = start_tls_broker(make_broker, tmp_path, certs, "cn", LEVERET_TLS_VERIFY="peer",
                                   LEVERET_TLS_CERT_LOGIN_FROM="common_name")
    admin(b, "add_user", user=CLIENT_CN)  # no password: EXTERNAL only
    admin(b, "set_permissions", user=CLIENT_CN, vhost="/", configure=".*", write=".*", read=".*")

    # PLAIN over TLS without a client certificate: allowed (fail_if_no_peer_cert is off).
    bystander = pika.BlockingConnection(tls_params(tls_port, client_context(certs)))
    assert roundtrip(bystander) == b"over tls"
    assert mechanisms_offered(tls_port, client_context(certs)) == ["PLAIN", "AMQPLAIN"]
    assert mechanisms_offered(tls_port, client_context(certs, certs.client)) == [
        "PLAIN", "AMQPLAIN", "EXTERNAL"]

    with pika.BlockingConnection(tls_params(tls_port, client_context(certs, certs.client),
                                            external=True)) as conn:
        assert roundtrip(conn) == b"over tls"
        listed = admin(b, "list_connections", columns=["user", "auth_mechanism", "ssl"])
        assert {"user": CLIENT_CN, "auth_mechanism": "EXTERNAL", "ssl": True} in listed
        assert {"user": "guest", "auth_mechanism": "PLAIN", "ssl": True} in listed
    assert f"user '{CLIENT_CN}'" in b.log_text()

    # Without a certificate EXTERNAL is not offered: pika gives up before logging in.
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(tls_params(tls_port, client_context(certs), external=True))

    # Wrong CA and expired certificates fail the handshake; so do the protocol mix-ups.
    for bad in (certs.other_ca_client, certs.expired):
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika.BlockingConnection(tls_params(tls_port, client_context(certs, bad),
                                               external=True))
    with pytest.raises(pika.exceptions.AMQPConnectionError):  # plain TCP on the TLS port
        pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", tls_port, socket_timeout=3, connection_attempts=1,
            blocked_connection_timeout=3, stack_timeout=5))
    # TLS on the plain port: Leveret answers the ClientHello with AMQP's protocol header.
    with pytest.raises((pika.exceptions.AMQPConnectionError, ssl.SSLError)):
        pika.BlockingConnection(tls_params(b.port, client_context(certs)))

    assert roundtrip(bystander) == b"over tls"  # unaffected by all of the above
    bystander.close()
    log = b.log_text()
    assert "Traceback" not in log


def test_fail_if_no_peer_cert_and_distinguished_name(make_broker: Any, tmp_path: Path,
                                                     certs: Certs) -> None:
    b, tls_port = start_tls_broker(make_broker, tmp_path, certs, "dn", LEVERET_TLS_VERIFY="peer",
                                   LEVERET_TLS_FAIL_IF_NO_PEER_CERT="true")
    admin(b, "add_user", user=CLIENT_DN)
    admin(b, "set_permissions", user=CLIENT_DN, vhost="/", configure=".*", write=".*", read=".*")
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(tls_params(tls_port, client_context(certs)))
    with pika.BlockingConnection(tls_params(tls_port, client_context(certs, certs.client),
                                            external=True)) as conn:
        assert roundtrip(conn) == b"over tls"
    assert f"user '{CLIENT_DN}'" in b.log_text()
    # A certificate naming a user that does not exist: refused.
    admin(b, "delete_user", user=CLIENT_DN)
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(tls_params(tls_port, client_context(certs, certs.client),
                                           external=True))


async def test_aio_pika_tls_plain_and_external(make_broker: Any, tmp_path: Path,
                                               certs: Certs) -> None:
    aio_pika = pytest.importorskip("aio_pika")
    b, tls_port = start_tls_broker(make_broker, tmp_path, certs, "aio", LEVERET_TLS_VERIFY="peer",
                                   LEVERET_TLS_CERT_LOGIN_FROM="common_name")
    admin(b, "add_user", user=CLIENT_CN)
    admin(b, "set_permissions", user=CLIENT_CN, vhost="/", configure=".*", write=".*", read=".*")
    urls = [
        f"amqps://guest:guest@localhost:{tls_port}/?cafile={certs.ca}",
        f"amqps://localhost:{tls_port}/?auth=external&cafile={certs.ca}"
        f"&certfile={certs.client[0]}&keyfile={certs.client[1]}",
    ]
    for url in urls:
        conn = await aio_pika.connect(url)
        try:
            ch = await conn.channel()
            q = await ch.declare_queue(exclusive=True)
            await ch.default_exchange.publish(aio_pika.Message(b"aio tls"), routing_key=q.name)
            message = await q.get(timeout=60)
            assert message.body == b"aio tls"
            await message.ack()
        finally:
            await conn.close()
    conn = await aio_pika.connect(f"amqps://guest:guest@localhost:{tls_port}/",
                                  ssl_context=client_context(certs))
    await conn.close()


def test_management_certificate_expiration_and_amqps_listener(make_broker: Any, tmp_path: Path,
                                                             certs: Certs) -> None:
    """The management API's certificate-expiration check reads the AMQPS certificate (valid
    for one day here) and the listener checks see the AMQPS port."""
    import base64
    import json
    import urllib.error
    import urllib.request

    b, tls_port = start_tls_broker(make_broker, tmp_path, certs, "mgmt")

    def get(path: str) -> tuple[int, Any]:
        req = urllib.request.Request(f"{b.api_url}/api{path}", headers={
            "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    assert get("/health/checks/certificate-expiration/0/days") == (200, {"status": "ok"})
    status, body = get("/health/checks/certificate-expiration/1/months")
    assert status == 503 and body["reason"] == "Certificates expiring"
    assert body["expired"][0]["port"] == tls_port
    assert body["expired"][0]["certfile"] == str(certs.server[0])
    assert get(f"/health/checks/port-listener/{tls_port}") == (
        200, {"status": "ok", "port": tls_port})
    assert get("/health/checks/protocol-listener/amqps")[0] == 200
