"""The installed ``leveret ctl`` list_* / status / purge / delete / close / definitions
commands against a running broker: rabbitmqctl's output, and the same facts the HTTP API
gives (both read ``broker/inventory.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pika
import pytest

LEVERET = Path(sys.executable).parent / "leveret"


def ctl(broker: Any, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert LEVERET.exists(), "the leveret script is not installed in this environment"
    return subprocess.run([str(LEVERET), "ctl", "--data-dir", str(broker.data_dir), *args],
                          capture_output=True, text=True, timeout=60, input=stdin)


def connect(broker: Any, vhost: str, name: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", broker.port, vhost, client_properties={"connection_name": name}))


@pytest.fixture
def vhost(broker: Any) -> Any:
    name = f"ctl-{uuid.uuid4().hex[:8]}"
    assert ctl(broker, "add_vhost", name).returncode == 0
    assert ctl(broker, "set_permissions", "-p", name, "guest", ".*", ".*", ".*").returncode == 0
    yield name
    ctl(broker, "delete_vhost", name)


def wait_for(predicate: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_lists_print_rabbitmqctl_tables_with_the_api_facts(broker, api, vhost):
    conn = connect(broker, vhost, "ctl-lists")
    try:
        ch = conn.channel()
        ch.exchange_declare("x", "topic")
        ch.queue_declare("q", arguments={"x-max-length": 5})
        ch.queue_bind("q", "x", "a.#")
        for body in (b"1", b"2", b"3"):
            ch.basic_publish("x", "a.b", body)
        ch.basic_qos(prefetch_count=1)
        ch.basic_consume("q", lambda *a: None, consumer_tag="ctag1")
        wait_for(lambda: api.ok(f"/queues/{quote(vhost, safe='')}/q")["messages_unacknowledged"]
                 == 1 or conn.process_data_events(0.05))
        v = quote(vhost, safe="")

        r = ctl(broker, "list_queues", "-p", vhost)
        assert (r.returncode, r.stderr) == (0, "")
        assert r.stdout == f"Listing queues for vhost {vhost} ...\nname\tmessages\nq\t3\n"
        r = ctl(broker, "list_queues", "-p", vhost, "name", "messages_ready",
                "messages_unacknowledged", "arguments", "durable", "consumers", "policy")
        assert r.stdout.splitlines()[1:] == [
            "name\tmessages_ready\tmessages_unacknowledged\targuments\tdurable\tconsumers\tpolicy",
            'q\t2\t1\t[{"x-max-length",5}]\tfalse\t1\t']
        rows = json.loads(ctl(broker, "list_queues", "-p", vhost, "name,messages_ready",
                              "consumers", "arguments", "--json").stdout)
        http = api.ok(f"/queues/{v}/q")
        assert rows == [{"name": "q", "messages_ready": http["messages_ready"],
                         "consumers": http["consumers"], "arguments": http["arguments"]}]
        # Body bytes (1 each, one unacked; a transient queue: nothing persistent), the five
        # columns rabbitmqctl 3.10 has (not message_bytes_paged_out).
        r = ctl(broker, "list_queues", "-p", vhost, "-s", "name", "message_bytes",
                "message_bytes_ready", "message_bytes_unacknowledged", "message_bytes_ram",
                "message_bytes_persistent")
        assert r.stdout == "q\t3\t2\t1\t3\t0\n"

        r = ctl(broker, "list_exchanges", "-p", vhost, "name", "type", "durable")
        assert r.stdout.splitlines()[:4] == [
            f"Listing exchanges for vhost {vhost} ...", "name\ttype\tdurable",
            "\tdirect\ttrue", "amq.direct\tdirect\ttrue"]
        assert "x\ttopic\tfalse" in r.stdout.splitlines()

        assert ctl(broker, "list_bindings", "-p", vhost).stdout == (
            f"Listing bindings for vhost {vhost}...\n"
            "source_name\tsource_kind\tdestination_name\tdestination_kind\trouting_key\targuments\n"
            "\texchange\tq\tqueue\tq\t[]\n"
            "x\texchange\tq\tqueue\ta.#\t[]\n")

        (http_conn,) = [c for c in api.ok("/connections") if c["vhost"] == vhost]
        rows = json.loads(ctl(broker, "list_connections", "name", "user", "vhost", "channels",
                              "peer_port", "--json").stdout)
        assert {"name": http_conn["name"], "user": "guest", "vhost": vhost, "channels": 1,
                "peer_port": http_conn["peer_port"]} in rows
        (http_ch,) = api.ok(f"/connections/{quote(http_conn['name'], safe='')}/channels")
        rows = json.loads(ctl(broker, "list_channels", "name", "connection", "prefetch_count",
                              "consumer_count", "messages_unacknowledged", "--json").stdout)
        assert {"name": http_ch["name"], "connection": http_conn["name"], "prefetch_count": 1,
                "consumer_count": 1, "messages_unacknowledged": 1} in rows

        assert ctl(broker, "list_consumers", "-p", vhost).stdout == (
            f"Listing consumers in vhost {vhost} ...\n"
            "queue_name\tchannel_pid\tconsumer_tag\tack_required\tprefetch_count\tactive\t"
            f"arguments\nq\t{http_ch['name']}\tctag1\ttrue\t1\ttrue\t[]\n")
        r = ctl(broker, "list_consumers", "-p", vhost, "--no-table-headers", "-q")
        assert r.stdout == f"q\t{http_ch['name']}\tctag1\ttrue\t1\ttrue\t[]\n"
    finally:
        conn.close()

    bad = ctl(broker, "list_queues", "-p", vhost, "name", "bogus")
    assert (bad.returncode, bad.stderr) == (64, "Error:\nInfo key(s) bogus are not supported\n")
    bad = ctl(broker, "list_queues", "-p", vhost, "message_bytes_paged_out")
    assert bad.returncode == 64 and "message_bytes_paged_out are not supported" in bad.stderr
    # rabbitmqctl lists nothing for a vhost that does not exist, and exits 0.
    none = ctl(broker, "list_queues", "-p", "no-such-vhost")
    assert (none.returncode, none.stdout) == (0, "Listing queues for vhost no-such-vhost ...\n")
    # rabbitmqctl's other flags: -s drops banner and header; one node is all online/local.
    assert ctl(broker, "list_queues", "-p", vhost, "-s", "--online", "--local").stdout == "q\t3\n"
    assert ctl(broker, "list_queues", "-p", vhost, "-s", "--offline").stdout == ""


def test_purge_delete_and_close(broker, api, vhost):
    v = quote(vhost, safe="")
    first, second = connect(broker, vhost, "ctl-a"), connect(broker, vhost, "ctl-b")
    ch = first.channel()
    ch.queue_declare("full", durable=True)
    ch.queue_declare("other")
    for _ in range(4):
        ch.basic_publish("", "full", b"m")
    wait_for(lambda: api.ok(f"/queues/{v}/full")["messages"] == 4)

    r = ctl(broker, "delete_queue", "-p", vhost, "full", "--if-empty")
    assert (r.returncode, r.stdout, r.stderr) == (
        64, f"Deleting queue 'full' on vhost '{vhost}' if queue is empty ...\n",
        "Error:\nQueue is not empty\n")
    r = ctl(broker, "purge_queue", "-p", vhost, "full")
    assert (r.returncode, r.stdout) == (0, f"Purging queue 'full' in vhost '{vhost}' ...\n")
    assert api.ok(f"/queues/{v}/full")["messages"] == 0
    missing = ctl(broker, "purge_queue", "-p", vhost, "nope")
    assert (missing.returncode, missing.stderr) == (69, "Error:\nnot_found\n")
    ch.basic_publish("", "other", b"m")
    wait_for(lambda: api.ok(f"/queues/{v}/other")["messages"] == 1)
    r = ctl(broker, "delete_queue", "-p", vhost, "other")
    assert (r.returncode, r.stdout.splitlines()[-1]) == (
        0, "Queue was successfully deleted with 1 ready messages")
    assert api.get(f"/queues/{v}/other")[0] == 404
    assert ctl(broker, "delete_queue", "-p", vhost, "other").stderr == "Error:\nQueue not found\n"

    (a,) = [c["name"] for c in api.ok(f"/vhosts/{v}/connections")
            if c["user_provided_name"] == "ctl-a"]
    r = ctl(broker, "close_connection", a, "go away")
    assert (r.returncode, r.stdout) == (0, f"Closing connection {a}, reason: go away...\n")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        first.process_data_events(2.0)
        first.channel()
    assert (info.value.reply_code, info.value.reply_text) == (320, "CONNECTION_FORCED - go away")
    assert ctl(broker, "close_connection", a, "again").returncode == 69

    third = connect(broker, vhost, "ctl-c")
    r = ctl(broker, "close_all_connections", "-p", vhost, "maintenance")
    assert r.stdout == (f"Closing all connections in vhost {vhost}, reason: maintenance...\n"
                        "Closed 2 connections\n")
    for conn in (second, third):
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker):
            conn.process_data_events(2.0)
            conn.channel()
    wait_for(lambda: not api.ok(f"/vhosts/{v}/connections"))


def test_status(broker):
    status = json.loads(ctl(broker, "status", "--json").stdout)
    node = status["listeners"][0]["node"]
    assert node.startswith("leveret@") and status["is_under_maintenance"] is False
    assert {"interface": "127.0.0.1", "node": node, "port": broker.port, "protocol": "amqp",
            "purpose": "AMQP 0-9-1"} in status["listeners"]
    assert status["rabbitmq_version"] == "3.10.8" and status["alarms"] == []
    assert status["data_directory"] == str(broker.data_dir)
    assert status["pid"] == broker.proc.pid and status["uptime"] >= 0
    assert status["totals"]["virtual_host_count"] >= 1
    text = ctl(broker, "status").stdout
    assert text.startswith(f"Status of node {node} ...\nRuntime\n")
    assert (f"Interface: 127.0.0.1, port: {broker.port}, protocol: amqp, purpose: AMQP 0-9-1"
            in text)
    assert f"Node data directory: {broker.data_dir}" in text


def test_definitions_export_and_checked_import(broker, api, vhost, tmp_path):
    target = tmp_path / "defs.json"
    r = ctl(broker, "export_definitions", str(target))
    assert (r.returncode, r.stdout) == (
        0, f'Exporting definitions in JSON to a file at "{target}" ...\n')
    exported = json.loads(target.read_text())
    assert exported == api.ok("/definitions")
    assert json.loads(ctl(broker, "export_definitions", "-").stdout) == exported

    good = {"queues": [{"name": "imported", "vhost": vhost, "durable": True,
                        "auto_delete": False, "arguments": {"x-max-length": 7}}],
            "exchanges": [{"name": "imp-x", "vhost": vhost, "type": "fanout", "durable": True,
                           "auto_delete": False, "internal": False, "arguments": {}}],
            "bindings": [{"source": "imp-x", "vhost": vhost, "destination": "imported",
                          "destination_type": "queue", "routing_key": "", "arguments": {}}]}
    bad = {**good, "bindings": [{**good["bindings"][0], "destination": "missing"}]}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    r = ctl(broker, "import_definitions", str(tmp_path / "bad.json"))
    assert r.returncode == 65
    assert r.stderr == (f"Error:\nValidation failed: binding 'imp-x' -> 'missing': no queue "
                        f"'missing' in vhost '{vhost}'; nothing was imported\n")
    assert ctl(broker, "list_queues", "-p", vhost).stdout.splitlines()[1:] == []
    r = ctl(broker, "import_definitions", stdin="{not json")
    assert r.returncode == 65 and r.stderr.startswith(
        "Error:\nFailed to deserialise input (format: JSON)")

    (tmp_path / "good.json").write_text(json.dumps(good))
    r = ctl(broker, "import_definitions", str(tmp_path / "good.json"))
    assert (r.returncode, r.stdout) == (
        0, f'Importing definitions in JSON from a file at "{tmp_path / "good.json"}" ...\n'
           "Successfully imported definitions\n")
    assert ctl(broker, "list_queues", "-p", vhost, "name", "durable", "arguments").stdout == (
        f"Listing queues for vhost {vhost} ...\nname\tdurable\targuments\n"
        'imported\ttrue\t[{"x-max-length",7}]\n')
    assert "imp-x\texchange\timported\tqueue\t\t[]" in ctl(broker, "list_bindings", "-p",
                                                           vhost).stdout
