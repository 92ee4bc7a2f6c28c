"""The replication link admits only nodes that know the cluster secret, and runs over TLS
when the nodes have a certificate (``tls_certfile``)."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import time
from pathlib import Path

import harness
import pika
import pytest

from leveret.cluster import wire

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402


def _frames(sock: socket.socket, reader: wire.Reader) -> list[tuple[int, bytes]]:
    while True:
        data = sock.recv(65536)
        if not data:
            return []
        frames = reader.feed(data)
        if frames:
            return frames


def _connect_when_listening(port: int) -> socket.socket:
    """The leader's replication listener opens just after etcd names it leader."""
    deadline = time.monotonic() + harness.START_TIMEOUT
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), 10)
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_a_follower_without_the_secret_is_refused(cluster: harness.Cluster) -> None:
    cluster.start(1)
    node = cluster.nodes[cluster.wait_leader()]
    with _connect_when_listening(node.replication_port) as sock:
        sock.settimeout(30)
        reader = wire.Reader()
        [(kind, nonce)] = _frames(sock, reader)
        assert kind == wire.CHALLENGE
        sock.sendall(wire.json_frame(wire.HELLO, {
            "node": "intruder", "proof": wire.proof(b"guessed", nonce, "intruder"),
            "last_seq": 0, "lineage": []}))
        assert _frames(sock, reader) == [(wire.REJECT, b"bad credentials")]
        assert sock.recv(100) == b""  # and closed
    assert "refused: bad credentials" in node.log_text()
    assert "intruder" not in cluster.etcd.in_sync(cluster.name)


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate it signed for 127.0.0.1: (ca, cert, key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cluster test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = directory / "ca.crt", directory / "node.crt", directory / "node.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


def test_replication_runs_over_tls_with_a_certificate(cluster: harness.Cluster,
                                                       tmp_path: Path) -> None:
    ca, cert, key = _certificates(tmp_path)
    cluster.start(2, ["--tls-certfile", str(cert), "--tls-keyfile", str(key),
                      "--tls-cafile", str(ca), "--tls-port", "0"])
    leader = cluster.nodes[cluster.wait_leader()]
    cluster.wait_in_sync(2)  # the follower caught up, over TLS
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", leader.port, connection_attempts=3))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("secure", durable=True)
    channel.basic_publish("", "secure", b"x", pika.BasicProperties(delivery_mode=2))
    connection.close()  # confirmed: the follower acked it over the link
    with socket.create_connection(("127.0.0.1", leader.replication_port), 10) as sock:
        sock.settimeout(30)
        sock.sendall(wire.json_frame(wire.HELLO, {"node": "plain"}))
        reply = sock.recv(100)
    assert not reply.startswith(wire.frame(wire.CHALLENGE, bytes(32))[:5])  # no plain challenge
