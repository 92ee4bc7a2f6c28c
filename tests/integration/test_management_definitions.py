"""Definitions export/import, health checks, aliveness, and the listeners' lifecycle."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import threading
import urllib.request
import uuid
from pathlib import Path

import pika
import pytest

from tests.integration.conftest import HttpApi


def private_api(make_broker, *args: str, **env: str) -> HttpApi:
    b = make_broker(None, *args, **env)
    return HttpApi(b.api_url + "/api")


def _objects(name: str, vhost_keys: bool = True) -> dict:
    vh = {"vhost": "/"} if vhost_keys else {}
    return {
        "queues": [{"name": name, **vh, "durable": True, "auto_delete": False,
                    "arguments": {"x-max-length": 10}}],
        "exchanges": [{"name": name + "-x", **vh, "type": "topic", "durable": True,
                       "auto_delete": False, "internal": False, "arguments": {}}],
        "bindings": [{"source": name + "-x", **vh, "destination": name,
                      "destination_type": "queue", "routing_key": "a.*", "arguments": {}}],
        "policies": [{"name": name + "-p", **vh, "pattern": f"^{name}$", "apply-to": "queues",
                      "definition": {"message-ttl": 60000}, "priority": 1}],
    }


def test_export_shapes(api, qname):
    api.put(f"/queues/%2F/{qname}", {"durable": True})
    full = api.ok("/definitions")
    for key in ("rabbit_version", "rabbitmq_version", "product_name", "product_version",
                "users", "vhosts", "permissions", "topic_permissions", "parameters",
                "global_parameters", "policies", "queues", "exchanges", "bindings"):
        assert key in full, key
    user = full["users"][0]
    assert user["hashing_algorithm"] == "rabbit_password_hashing_sha256"
    assert {"name", "password_hash", "tags", "limits"} <= set(user)
    assert not any(x["name"].startswith("amq.") or x["name"] == "" for x in full["exchanges"])
    per_vhost = api.ok("/definitions/%2F")
    assert set(per_vhost) == {"rabbit_version", "parameters", "policies", "queues",
                              "exchanges", "bindings"}
    assert {"name": qname, "durable": True, "auto_delete": False, "arguments": {}} in \
        per_vhost["queues"]
    status, headers, _ = api.get("/definitions?download=defs.json")
    assert status == 200 and "attachment" in headers["Content-Disposition"]
    api.delete(f"/queues/%2F/{qname}")


def test_import_applies_everything(make_broker):
    api = private_api(make_broker)
    name = f"imp-{uuid.uuid4().hex[:8]}"
    assert api.post("/definitions", {"rabbit_version": "3.10.8", "vhosts": [{"name": "/"}],
                                     **_objects(name)})[0] == 204
    assert api.ok(f"/queues/%2F/{name}")["policy"] == name + "-p"
    assert api.ok(f"/exchanges/%2F/{name}-x")["type"] == "topic"
    assert api.ok(f"/bindings/%2F/e/{name}-x/q/{name}")[0]["routing_key"] == "a.*"
    # Per vhost, without vhost keys; additive and idempotent.
    other = f"imp2-{uuid.uuid4().hex[:8]}"
    assert api.post("/definitions/%2F", _objects(other, vhost_keys=False))[0] == 204
    assert api.post("/definitions/%2F", _objects(other, vhost_keys=False))[0] == 204
    assert api.get(f"/queues/%2F/{other}")[0] == 200
    assert api.get(f"/queues/%2F/{name}")[0] == 200


LARGE_IMPORT = 30_000  # queues: an import long enough to hold a few AMQP round trips


def test_amqp_is_served_while_a_large_import_is_pending(make_broker):
    """The import gives the loop back between slices: while it is being applied, an AMQP
    client sees its first queue and not yet its last (a state, not a race: an import in
    one go holds the loop until every queue exists), and then a durable declare and
    delete go through before or after the import's answer, whichever the machine makes."""
    b = make_broker()
    name = f"big-{uuid.uuid4().hex[:8]}"
    defs = {"queues": [{"name": f"{name}-{i}", "vhost": "/", "durable": True}
                       for i in range(LARGE_IMPORT)]}
    answers: list[int] = []

    def post() -> None:
        request = urllib.request.Request(
            b.api_url + "/api/definitions", json.dumps(defs).encode(), method="POST",
            headers={"Content-Type": "application/json", "Authorization": "Basic "
                     + base64.b64encode(b"guest:guest").decode()})
        with urllib.request.urlopen(request, timeout=600) as resp:  # no budget: waits
            answers.append(resp.status)

    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
    importer = threading.Thread(target=post)
    importer.start()
    ch = conn.channel()
    while True:  # until the import has begun to apply (every look is an AMQP round trip)
        try:
            ch.queue_declare(f"{name}-0", passive=True)
            break
        except pika.exceptions.ChannelClosedByBroker as exc:
            assert exc.reply_code == 404 and not answers, (exc, answers)
            ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as last:
        conn.channel().queue_declare(f"{name}-{LARGE_IMPORT - 1}", passive=True)
    assert last.value.reply_code == 404  # AMQP was served in the middle of the import
    ch = conn.channel()
    ch.queue_declare(f"{name}-amqp", durable=True)
    ch.queue_delete(f"{name}-amqp")
    conn.close()
    importer.join()
    assert answers == [204]
    api = HttpApi(b.api_url + "/api")
    assert api.get(f"/queues/%2F/{name}-{LARGE_IMPORT - 1}")[0] == 200


@pytest.mark.parametrize("mutate, reason", [
    (lambda d: d["queues"].append({"name": "q2", "vhost": "/", "arguments": {"x-max-length": "x"}}),
     "invalid arg 'x-max-length'"),
    (lambda d: d["exchanges"].append({"name": "e2", "vhost": "/", "type": "bogus"}),
     "unknown exchange type 'bogus'"),
    (lambda d: d["bindings"].append({"source": "nope", "vhost": "/", "destination": "q",
                                     "destination_type": "queue"}), "no exchange 'nope'"),
    (lambda d: d["policies"].append({"name": "p", "vhost": "/", "pattern": "x",
                                     "definition": {"max-length": "x"}}), "policy 'p'"),
    (lambda d: d["queues"].append({"name": "q3", "vhost": "no-vhost"}),
     "vhost 'no-vhost' does not exist"),
    (lambda d: d["queues"].append({**d["queues"][0], "durable": False}), "appears twice"),
    (lambda d: d["queues"].append({"name": "qq", "vhost": "/", "durable": False,
                                   "arguments": {"x-queue-type": "quorum"}}), "queue 'qq'"),
    (lambda d: d["queues"].append({"name": "amq.q", "vhost": "/"}), "reserved"),
])
def test_bad_import_changes_nothing(make_broker, mutate, reason):
    api = private_api(make_broker)
    name = f"bad-{uuid.uuid4().hex[:8]}"
    defs = _objects(name)
    mutate(defs)
    status, _, body = api.post("/definitions", defs)
    assert status == 400 and reason in body["reason"], body
    assert api.get(f"/queues/%2F/{name}")[0] == 404
    assert api.get(f"/exchanges/%2F/{name}-x")[0] == 404
    assert api.get(f"/policies/%2F/{name}-p")[0] == 404


def test_import_rejects_inequivalent_existing_queue(make_broker):
    api = private_api(make_broker)
    api.put("/queues/%2F/existing", {"durable": True})
    defs = {"queues": [{"name": "existing", "vhost": "/", "durable": False}],
            "exchanges": [{"name": "fresh-x", "vhost": "/", "type": "direct"}]}
    status, _, body = api.post("/definitions", defs)
    assert status == 400 and "inequivalent arg 'durable'" in body["reason"]
    assert api.get("/exchanges/%2F/fresh-x")[0] == 404


def test_definitions_round_trip_rabbitmq_leveret_rabbitmq(make_broker, rabbitmq_http):
    """Objects made in RabbitMQ, exported there, imported into Leveret, exported from
    Leveret and imported back into RabbitMQ under new names."""
    name = f"rt-{uuid.uuid4().hex[:8]}"
    back = f"rtb-{uuid.uuid4().hex[:8]}"
    try:
        assert rabbitmq_http.post("/definitions/%2F",
                                  _objects(name, vhost_keys=False))[0] in (201, 204)
        exported = rabbitmq_http.ok("/definitions")  # the full format, users and all
        mine = {k: [i for i in exported[k] if name in str(i.get("name", i.get("source")))]
                for k in ("queues", "exchanges", "bindings", "policies")}
        assert all(len(v) == 1 for v in mine.values()), mine
        leveret = private_api(make_broker)
        # Only "/" is carried over, so only its permissions: other tests leave vhosts (and
        # their permissions) in the shared RabbitMQ, which Leveret rightly refuses without them.
        status, _, body = leveret.post("/definitions", {
            "rabbit_version": exported["rabbit_version"], "users": exported["users"],
            "permissions": [p for p in exported["permissions"] if p["vhost"] == "/"],
            "vhosts": [{"name": "/"}], **mine})
        assert status == 204, body
        assert leveret.ok(f"/queues/%2F/{name}")["arguments"] == {"x-max-length": 10}
        out = leveret.ok("/definitions/%2F")
        renamed = {k: [{**i, **{f: i[f].replace(name, back) for f in
                                ("name", "source", "destination", "pattern") if f in i}}
                       for i in out[k] if name in str(i.get("name", i.get("source")))]
                   for k in ("queues", "exchanges", "bindings", "policies")}
        assert rabbitmq_http.post("/definitions/%2F",
                                  {"rabbit_version": out["rabbit_version"], **renamed})[0] in (
            201, 204)
        q = rabbitmq_http.ok(f"/queues/%2F/{back}")
        assert q["arguments"] == {"x-max-length": 10} and q["durable"] is True
        assert rabbitmq_http.ok(f"/bindings/%2F/e/{back}-x/q/{back}")[0]["routing_key"] == "a.*"
    finally:
        for n in (name, back):
            rabbitmq_http.delete(f"/queues/%2F/{n}")
            rabbitmq_http.delete(f"/exchanges/%2F/{n}-x")
            rabbitmq_http.delete(f"/policies/%2F/{n}-p")


# -- health checks ------------------------------------------------------------------------

def test_health_checks_ok(api, broker):
    checks = "/health/checks/"
    assert api.ok(checks + "alarms") == {"status": "ok"}
    assert api.ok(checks + "local-alarms") == {"status": "ok"}
    assert api.ok(checks + "virtual-hosts") == {"status": "ok"}
    assert api.ok(checks + "node-is-quorum-critical") == {"status": "ok",
                                                          "reason": "single node cluster"}
    assert api.ok(checks + "node-is-mirror-sync-critical")["status"] == "ok"
    assert api.ok(checks + "certificate-expiration/1/months") == {"status": "ok"}
    assert api.ok(f"{checks}port-listener/{broker.port}") == {"status": "ok",
                                                               "port": broker.port}
    assert api.ok(checks + "protocol-listener/amqp") == {"status": "ok", "protocol": "amqp"}
    assert api.ok(checks + "protocol-listener/http")["status"] == "ok"
    assert api.ok("/aliveness-test/%2F") == {"status": "ok"}
    assert api.get("/aliveness-test/no-vhost")[0] == 404


def test_health_checks_fail_with_503(api, broker, make_broker):
    status, _, body = api.get("/health/checks/port-listener/1")
    assert status == 503
    assert body == {"status": "failed", "reason": "No active listener", "missing": 1,
                    "ports": sorted([broker.port, broker.management_port,
                                     broker.prometheus_port])}
    status, _, body = api.get("/health/checks/protocol-listener/stomp")
    assert status == 503 and body["missing"] == "stomp" and "amqp" in body["protocols"]
    # A tiny memory watermark raises the memory alarm at once.
    alarmed = private_api(make_broker, LEVERET_MEMORY_HIGH_WATERMARK="0.00001")
    for path in ("/health/checks/alarms", "/health/checks/local-alarms"):
        for _ in range(600):  # until the first memory check (a hang guard of 60 s)
            status, _, body = alarmed.get(path)
            if status == 503:
                break
            import time
            time.sleep(0.1)
        assert status == 503, body
        assert body["status"] == "failed" and body["alarms"][0]["resource"] == "memory"
    assert alarmed.ok("/nodes")[0]["mem_alarm"] is True


# -- listeners: ports in use, clean stop -----------------------------------------------------

def _serve(tmp_path: Path, *args: str,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LEVERET_")},
           **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1", "--port", "0",
         "--management-host", "127.0.0.1", "--data-dir", str(tmp_path), "--log-level",
         "warning", *args], env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("flag", ["--management-port", "--prometheus-port"])
def test_http_port_in_use_is_one_line_exit_1(tmp_path, flag):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        other = "--prometheus-port" if flag == "--management-port" else "--management-port"
        result = _serve(tmp_path, flag, str(port), other, "0")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("leveret: error: cannot listen for ")
    assert f"port {port} is already in use" in lines[0]


def test_clean_stop_closes_http(make_broker):
    b = make_broker()
    api = HttpApi(b.api_url + "/api")
    assert api.ok("/overview")
    assert b.stop() == 0
    assert "broker stopped" in b.log_text() and "Traceback" not in b.log_text()
    with pytest.raises(OSError):
        api.get("/overview")


def test_load_definitions_at_start(make_broker, tmp_path):
    name = f"boot-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "defs.json"
    path.write_text(__import__("json").dumps({"vhosts": [{"name": "/"}], **_objects(name)}))
    api = private_api(make_broker, LEVERET_LOAD_DEFINITIONS=str(path))
    assert api.ok(f"/queues/%2F/{name}")["policy"] == name + "-p"
    assert api.ok(f"/bindings/%2F/e/{name}-x/q/{name}")[0]["routing_key"] == "a.*"


def test_bad_definitions_file_stops_start_with_one_line(tmp_path):
    path = tmp_path / "defs.json"
    path.write_text('{"exchanges": [{"name": "x", "vhost": "/", "type": "bogus"}]}')
    result = _serve(tmp_path / "data", "--management-port", "0", "--prometheus-port", "0",
                    env={"LEVERET_LOAD_DEFINITIONS": str(path)})
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0] == (f"leveret: error: cannot load definitions from {path}: exchange 'x': "
                        "unknown exchange type 'bogus'")


def test_openapi_document_lists_every_route(api):
    from leveret.management_ui.api import ROUTES

    status, _, doc = api.get("/openapi.json", auth=False)
    assert status == 200 and doc["openapi"].startswith("3.")
    for method, pattern, _, _ in ROUTES:
        assert method.lower() in doc["paths"][f"/api/{pattern}"], (method, pattern)


def test_import_creates_vhosts_users_permissions(make_broker):
    api = private_api(make_broker)
    vh, user = f"vh-{uuid.uuid4().hex[:6]}", f"u-{uuid.uuid4().hex[:6]}"
    import base64
    import hashlib
    salt = b"\x01\x02\x03\x04"
    pw_hash = base64.b64encode(salt + hashlib.sha256(salt + b"secret").digest()).decode()
    defs = {"rabbit_version": "3.10.8",
            "users": [{"name": user, "password_hash": pw_hash,
                       "hashing_algorithm": "rabbit_password_hashing_sha256",
                       "tags": "management", "limits": {}}],
            "vhosts": [{"name": vh, "metadata": {"description": "imported", "tags": []}}],
            "permissions": [{"user": user, "vhost": vh, "configure": ".*", "write": ".*",
                             "read": ".*"}],
            "topic_permissions": [{"user": user, "vhost": vh, "exchange": "amq.topic",
                                   "write": ".*", "read": ".*"}],
            "queues": [{"name": "q", "vhost": vh, "durable": True, "auto_delete": False,
                        "arguments": {}}],
            "bindings": [{"source": "amq.direct", "vhost": vh, "destination": "q",
                          "destination_type": "queue", "routing_key": "k", "arguments": {}}]}
    bad = {**defs, "permissions": [{**defs["permissions"][0], "user": "nobody"}]}
    status, _, body = api.post("/definitions", bad)
    assert status == 400 and "no user 'nobody'" in body["reason"]
    assert api.get(f"/vhosts/{vh}")[0] == 404 and api.get(f"/users/{user}")[0] == 404
    assert api.post("/definitions", defs)[0] == 204
    assert api.ok(f"/vhosts/{vh}")["description"] == "imported"
    as_user = HttpApi(api.base, user, "secret")
    assert as_user.ok("/whoami?columns=name,tags") == {"name": user, "tags": ["management"]}
    assert [q["name"] for q in as_user.ok(f"/queues/{vh}")] == ["q"]
    exported = api.ok("/definitions")
    assert {"name": user, "password_hash": pw_hash,
            "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ["management"],
            "limits": {}} in exported["users"]
    assert {"user": user, "vhost": vh, "exchange": "amq.topic", "write": ".*",
            "read": ".*"} in exported["topic_permissions"]
