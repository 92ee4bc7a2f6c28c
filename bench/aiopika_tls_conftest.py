"""Run aio-pika's own TLS tests (tests/test_amqps.py) against Leveret instead of Docker.

aio-pika's suite starts a ``mosquito/aiormq-rabbitmq`` container; this file replaces that
fixture with a Leveret started with an AMQPS listener and a throw-away CA made by openssl.

    fetch the aio_pika-10.2.1.tar.gz sdist from PyPI, unpack it, then
    python -m venv v && v/bin/pip install aio-pika==10.2.1 aiomisc aiomisc-pytest shortuuid \
        timeout-decorator pytest
    # in aio_pika-10.2.1/tests/conftest.py: make pytest_configure return at once (no Docker),
    # then append this file's body below the marker line.
    LEVERET_PYTHON=/path/to/leveret/.venv/bin/python v/bin/python -m pytest tests/test_amqps.py -q

Result when this was written: 128 passed, 4 skipped (aio-pika's own unconditional skips).
"""
# ruff: noqa
import pytest
from tests.docker_client import ContainerInfo

# --- Leveret instead of the mosquito/aiormq-rabbitmq container -----------------------
import os as _os
import re as _re
import subprocess as _sp
import tempfile as _tf
import time as _time

LEVERET_PY = _os.environ.get("LEVERET_PYTHON", "/work/wt-access/.venv/bin/python")


def _make_certs(d):
    _sp.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-subj", "/CN=aio-pika test CA", "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.crt"],
            check=True, capture_output=True)
    _sp.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
             "-keyout", f"{d}/server.key", "-out", f"{d}/server.csr"], check=True,
            capture_output=True)
    with open(f"{d}/ext.cnf", "w") as fh:
        fh.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _sp.run(["openssl", "x509", "-req", "-in", f"{d}/server.csr", "-CA", f"{d}/ca.crt",
             "-CAkey", f"{d}/ca.key", "-CAcreateserial", "-days", "1", "-extfile",
             f"{d}/ext.cnf", "-out", f"{d}/server.crt"], check=True, capture_output=True)


@pytest.fixture(scope="session")
def rabbitmq_container():
    d = _tf.mkdtemp(prefix="aiopika-leveret-")
    _make_certs(d)
    log = open(f"{d}/broker.log", "wb")
    proc = _sp.Popen([LEVERET_PY, "-m", "leveret", "serve", "--host", "127.0.0.1", "--port", "0",
                      "--management-host", "127.0.0.1", "--management-port", "0",
                      "--prometheus-port", "0",
                      "--tls-port", "0", "--tls-certfile", f"{d}/server.crt", "--tls-keyfile",
                      f"{d}/server.key", "--data-dir", f"{d}/data"], stdout=log, stderr=_sp.STDOUT)
    ports = {}
    for _ in range(400):
        text = open(f"{d}/broker.log").read()
        m1 = _re.search(r"AMQP 0-9-1 on 127\.0\.0\.1:(\d+)", text)
        m2 = _re.search(r"over TLS on 127\.0\.0\.1:(\d+)", text)
        if m1 and m2:
            ports = {"5672/tcp": int(m1.group(1)), "5671/tcp": int(m2.group(1))}
            break
        _time.sleep(0.05)
    assert ports, open(f"{d}/broker.log").read()
    try:
        yield ContainerInfo(id="leveret", ports=ports, host="127.0.0.1")
    finally:
        proc.terminate()
        proc.wait(15)
