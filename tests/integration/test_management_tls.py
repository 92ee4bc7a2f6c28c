"""HTTPS for the management API: the AMQPS certificate settings, rabbitmqadmin --ssl, mutual
TLS, and a taken port handled like the AMQP listener's.

Certificates are generated at run time by ``test_tls.py``'s ``certs`` fixture (a CA, a
server certificate for 127.0.0.1/localhost, a client certificate)."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pika
import pytest

from leveret.broker.broker import Broker
from leveret.config import Config
from leveret.management_ui.service import ManagementService
from tests.integration.test_tls import CLIENT_DN, Certs, certs, client_context, tls_params

__all__ = ["certs"]  # the fixture, used by name below

RABBITMQADMIN = shutil.which("rabbitmqadmin")


def start_https_broker(make_broker: Any, tmp_path: Path, certs: Certs, **env: str
                       ) -> tuple[Any, int]:
    b = make_broker(tmp_path / "data", "--tls-port", "0", "--management-tls-port", "0",
                    "--tls-certfile", str(certs.server[0]), "--tls-keyfile",
                    str(certs.server[1]), "--tls-cafile", str(certs.ca), **env)
    assert b.management_tls_port, b.log_text()
    return b, b.management_tls_port


def get(url: str, ctx: ssl.SSLContext | None) -> tuple[int, Any]:
    req = urllib.request.Request(url, headers={"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q="})
    try:
        with urllib.request.urlopen(req, timeout=60, context=ctx) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def admin(port: int, certs: Certs, *args: str, client: bool = False
          ) -> subprocess.CompletedProcess[str]:
    if RABBITMQADMIN is None:
        pytest.skip("rabbitmqadmin is not installed")
    tls = ["--ssl", "--ssl-ca-cert-file", str(certs.ca)]
    if client:
        tls += ["--ssl-cert-file", str(certs.client[0]), "--ssl-key-file", str(certs.client[1])]
    return subprocess.run([sys.executable, RABBITMQADMIN, "-H", "localhost", "-P", str(port),
                           *tls, *args], capture_output=True, text=True, timeout=120)


def test_https_api_with_rabbitmqadmin(make_broker, tmp_path, certs):
    b, port = start_https_broker(make_broker, tmp_path, certs)
    status, overview = get(f"https://localhost:{port}/api/overview", client_context(certs))
    assert status == 200
    listeners = {(x["protocol"], x["port"]) for x in overview["listeners"]}
    assert ("https", port) in listeners and ("http", b.management_port) in listeners
    # The plain listener stays; HTTPS is an extra one with the same API.
    assert get(f"{b.api_url}/api/overview", None)[0] == 200
    # A client that does not trust the CA fails the handshake.
    with pytest.raises(urllib.error.URLError) as info:
        get(f"https://localhost:{port}/api/overview", ssl.create_default_context())
    assert isinstance(info.value.reason, ssl.SSLCertVerificationError)

    r = admin(port, certs, "declare", "queue", "name=over-https", "durable=true")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "queue declared"
    r = admin(port, certs, "-f", "tsv", "-q", "list", "queues", "name", "durable")
    assert r.returncode == 0 and "over-https\tTrue" in r.stdout.splitlines()
    assert admin(port, certs, "delete", "queue", "name=over-https").returncode == 0
    assert get(f"{b.api_url}/api/queues/%2F/over-https", None)[0] == 404


def test_mutual_tls_asks_rabbitmqadmin_for_a_client_certificate(make_broker, tmp_path, certs):
    _, port = start_https_broker(make_broker, tmp_path, certs, LEVERET_TLS_VERIFY="peer",
                                 LEVERET_TLS_FAIL_IF_NO_PEER_CERT="true")
    # No client certificate: the handshake fails (rabbitmqadmin resets SIGPIPE to the
    # default, so it dies of it writing to the refused socket), and nothing is listed.
    without = admin(port, certs, "list", "vhosts")
    assert without.returncode != 0 and without.stdout == ""
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        get(f"https://localhost:{port}/api/vhosts", client_context(certs))
    status, vhosts = get(f"https://localhost:{port}/api/vhosts",
                         client_context(certs, certs.client))
    assert (status, [v["name"] for v in vhosts]) == (200, ["/"])
    with_cert = admin(port, certs, "-f", "tsv", "-q", "list", "vhosts", "name", client=True)
    assert (with_cert.returncode, with_cert.stdout) == (0, "/\n")


def test_https_port_in_use_is_one_line_exit_1(tmp_path, certs):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1", "--port", "0",
             "--management-host", "127.0.0.1", "--management-port", "0",
             "--prometheus-port", "0", "--tls-port", "0", "--management-tls-port", str(port),
             "--tls-certfile", str(certs.server[0]), "--tls-keyfile", str(certs.server[1]),
             "--data-dir", str(tmp_path / "data"), "--log-level", "warning"],
            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"leveret: error: cannot listen for HTTPS management API on 127.0.0.1:{port}: "
        f"port {port} is already in use"]


def test_a_taken_default_https_port_is_skipped_with_a_warning(tmp_path, certs, caplog):
    """As the other default HTTP ports: a RabbitMQ beside Leveret may hold 15671."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # Built directly, as the defaults are: nothing marks the port as asked for.
        config = Config(data_dir=tmp_path, management_port=0, prometheus_port=0,
                        management_host=("127.0.0.1",), tls_certfile=certs.server[0],
                        tls_keyfile=certs.server[1], management_tls_port=port)

        async def run() -> list[str]:
            service = ManagementService()
            broker = Broker(config)
            try:
                await service.start(broker, config)
                return [protocol for protocol, _, _ in broker.listeners]
            finally:
                await service.stop()

        with caplog.at_level(logging.WARNING):
            protocols = asyncio.run(run())
    assert protocols == ["http", "http/prometheus"]
    assert f"not serving HTTPS management API: port {port} is already in use" in caplog.text


def test_connections_report_their_tls_session(make_broker, tmp_path, certs):
    b, port = start_https_broker(make_broker, tmp_path, certs, LEVERET_TLS_VERIFY="peer")
    amqps = b.tls_port
    secure = pika.BlockingConnection(tls_params(amqps, client_context(certs, certs.client)))
    plain = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
    try:
        status, conns = get(f"https://localhost:{port}/api/connections", client_context(certs))
        assert status == 200
        by_port = {c["port"]: c for c in conns}
        tls_conn, tcp_conn = by_port[amqps], by_port[b.port]
        assert tls_conn["ssl"] is True and tls_conn["ssl_protocol"].startswith("tlsv1.")
        assert tls_conn["ssl_cipher"]
        assert tls_conn["peer_cert_subject"] == CLIENT_DN
        assert tls_conn["peer_cert_issuer"] == "CN=Leveret test CA"
        assert tcp_conn["ssl"] is False and tcp_conn["ssl_protocol"] is None
    finally:
        secure.close()
        plain.close()
