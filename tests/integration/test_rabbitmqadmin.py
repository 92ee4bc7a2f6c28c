"""RabbitMQ's own CLI, ``rabbitmqadmin`` 3.10, driving Leveret's management API unchanged.

/usr/bin/rabbitmqadmin ships with rabbitmq-server; without it these tests skip.
Each test names the commands it runs; every one must exit 0 and print what it would
print against RabbitMQ.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

RABBITMQADMIN = shutil.which("rabbitmqadmin") or (
    "/usr/bin/rabbitmqadmin" if Path("/usr/bin/rabbitmqadmin").exists() else None)
pytestmark = pytest.mark.skipif(RABBITMQADMIN is None, reason="rabbitmqadmin is not installed")


@pytest.fixture
def admin(broker):
    def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([RABBITMQADMIN, "-H", "127.0.0.1", "-P",
                                 str(broker.management_port), "-u", "guest", "-p", "guest",
                                 *args], capture_output=True, text=True, timeout=120)
        if ok:
            assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result
    return run


def tsv(result: subprocess.CompletedProcess[str]) -> list[list[str]]:
    return [line.split("\t") for line in result.stdout.splitlines()]


def test_declare_list_publish_get_delete(admin, qname):
    admin("declare", "queue", f"name={qname}", "durable=true", "arguments={\"x-max-length\":5}")
    admin("declare", "exchange", f"name={qname}-x", "type=topic", "durable=false")
    admin("declare", "binding", f"source={qname}-x", f"destination={qname}",
          "routing_key=a.*")
    rows = tsv(admin("-f", "tsv", "-q", "list", "queues", "name", "messages", "durable"))
    assert [qname, "0", "True"] in rows
    rows = tsv(admin("-f", "tsv", "-q", "list", "exchanges", "name", "type"))
    assert [f"{qname}-x", "topic"] in rows
    rows = tsv(admin("-f", "tsv", "-q", "list", "bindings", "source", "destination",
                     "routing_key"))
    assert [f"{qname}-x", qname, "a.*"] in rows
    out = admin("publish", f"exchange={qname}-x", "routing_key=a.b", "payload=hello")
    assert "Message published" in out.stdout
    out = admin("publish", "exchange=amq.default", "routing_key=nowhere", "payload=x")
    assert "Message published but NOT routed" in out.stdout
    got = json.loads(admin("-f", "raw_json", "get", f"queue={qname}",
                           "ackmode=ack_requeue_true").stdout)
    assert got[0]["payload"] == "hello" and got[0]["redelivered"] is False
    got = json.loads(admin("-f", "raw_json", "get", f"queue={qname}",
                           "ackmode=ack_requeue_false").stdout)
    assert got[0]["redelivered"] is True
    admin("purge", "queue", f"name={qname}")
    admin("delete", "binding", f"source={qname}-x", f"destination={qname}",
          "destination_type=queue", "properties_key=a.*")
    assert [f"{qname}-x", qname, "a.*"] not in tsv(
        admin("-f", "tsv", "-q", "list", "bindings", "source", "destination", "routing_key"))
    admin("delete", "exchange", f"name={qname}-x")
    admin("delete", "queue", f"name={qname}")
    assert qname not in admin("list", "queues").stdout


def test_errors_print_rabbitmqs_texts(admin, qname):
    admin("declare", "queue", f"name={qname}", "durable=true")
    result = admin("declare", "queue", f"name={qname}", "durable=false", ok=False)
    assert result.returncode != 0
    assert "inequivalent arg 'durable'" in result.stdout + result.stderr
    result = admin("delete", "queue", "name=no-such-" + qname, ok=False)
    assert result.returncode != 0 and "Not found" in result.stdout + result.stderr
    result = admin("-p", "wrong", "list", "queues", ok=False)
    assert result.returncode != 0 and "Access refused" in result.stdout + result.stderr
    admin("delete", "queue", f"name={qname}")


def test_show_overview_and_list_everything(admin):
    out = admin("show", "overview").stdout
    assert "3.10.8" in out
    for what in ("connections", "channels", "consumers", "exchanges", "queues", "bindings",
                 "users", "vhosts", "permissions", "nodes", "parameters", "policies",
                 "operator_policies", "vhost_limits"):
        admin("list", what)


def test_policy_declare_list_delete(admin, qname):
    admin("declare", "policy", f"name={qname}", f"pattern=^{qname}",
          "definition={\"max-length\":3}", "apply-to=queues")
    assert qname in admin("list", "policies").stdout
    admin("delete", "policy", f"name={qname}")
    assert qname not in admin("list", "policies").stdout


def test_export_import(admin, tmp_path, qname):
    admin("declare", "queue", f"name={qname}", "durable=true")
    path = tmp_path / "defs.json"
    assert "Exported definitions" in admin("export", str(path)).stdout
    defs = json.loads(path.read_text())
    assert any(q["name"] == qname for q in defs["queues"])
    admin("delete", "queue", f"name={qname}")
    assert "Uploaded definitions" in admin("import", str(path)).stdout
    assert qname in admin("list", "queues").stdout
    admin("delete", "queue", f"name={qname}")


def test_users_vhosts_permissions(admin, qname):
    vh, user = f"vh-{qname}", f"u-{qname}"
    admin("declare", "vhost", f"name={vh}")
    admin("declare", "user", f"name={user}", "password=pw", "tags=monitoring")
    admin("declare", "permission", f"vhost={vh}", f"user={user}", "configure=.*",
          "write=.*", "read=.*")
    assert [user, "monitoring"] in tsv(admin("-f", "tsv", "-q", "list", "users", "name", "tags"))
    assert [vh] in tsv(admin("-f", "tsv", "-q", "list", "vhosts", "name"))
    assert [user, vh, ".*"] in tsv(admin("-f", "tsv", "-q", "list", "permissions", "user",
                                         "vhost", "read"))
    admin("-V", vh, "declare", "queue", f"name={qname}")
    assert [vh, qname] in tsv(admin("-f", "tsv", "-q", "list", "queues", "vhost", "name"))
    admin("delete", "permission", f"vhost={vh}", f"user={user}")
    admin("delete", "user", f"name={user}")
    admin("delete", "vhost", f"name={vh}")
    assert vh not in admin("list", "vhosts").stdout
