"""The management HTTP API over real HTTP against a running broker: auth, error shapes,
read routes, list parameters and write routes (RabbitMQ 3.10.8's paths, statuses and
fields). Where a real RabbitMQ answers on 127.0.0.1:15672, field names are compared."""

from __future__ import annotations

import base64
import time
from typing import Any

import pika
import pytest

from tests.integration import test_management_permissions as mp
from tests.integration.conftest import WAIT, HttpApi

Q = "/queues/%2F/"
X = "/exchanges/%2F/"


def _conn(broker: Any, name: str = "mgmt-test") -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", broker.port, client_properties={"connection_name": name}))


# -- auth and error shapes -----------------------------------------------------------------

def test_no_credentials_is_401_empty_with_realm(api):
    status, headers, body = api.get("/overview", auth=False)
    assert status == 401 and body is None
    assert headers["WWW-Authenticate"] == 'Basic realm="RabbitMQ Management"'


def test_bad_credentials_is_401_login_failed(api):
    api.password = "wrong"
    status, headers, body = api.get("/overview")
    assert status == 401
    assert body == {"error": "not_authorized", "reason": "Login failed"}
    assert headers["WWW-Authenticate"] == 'Basic realm="RabbitMQ Management"'


def test_unknown_object_and_route_are_404(api):
    for path in (Q + "no-such-queue", "/queues/no-such-vhost", "/no/such/route"):
        status, _, body = api.get(path)
        assert (status, body) == (404, {"error": "Object Not Found", "reason": "Not Found"}), path


def test_wrong_method_is_405_with_json(api):
    status, headers, body = api.put("/overview")
    assert status == 405 and "GET" in headers["Allow"]
    assert body["error"] == "Method Not Allowed"


def test_not_json_is_400(api, qname):
    status, _, body = api.request("PUT", Q + qname, raw=b"xx")
    assert (status, body) == (400, {"error": "bad_request", "reason": "not_json"})


def test_auth_route_needs_no_login(api):
    status, _, body = api.get("/auth", auth=False)
    assert status == 200 and body["enable_uaa"] is False


# -- read routes ---------------------------------------------------------------------------

def test_overview_fields(api, broker):
    body = api.ok("/overview")
    for key in ("object_totals", "queue_totals", "message_stats", "churn_rates", "listeners",
                "exchange_types", "node", "cluster_name", "rabbitmq_version",
                "management_version", "product_name", "product_version", "contexts"):
        assert key in body, key
    assert body["rabbitmq_version"] == "3.10.8"
    assert {"publish_details", "deliver_get", "ack"} <= set(body["message_stats"])
    assert body["message_stats"]["publish_details"] == {"rate": body["message_stats"]
                                                        ["publish_details"]["rate"]}
    assert {"connection_created", "queue_declared_details"} <= set(body["churn_rates"])
    ports = {(lst["protocol"], lst["port"]) for lst in body["listeners"]}
    assert {("amqp", broker.port), ("http", broker.management_port),
            ("http/prometheus", broker.prometheus_port)} <= ports


def test_overview_chart_samples(api):
    body = api.ok("/overview?lengths_age=60&lengths_incr=5&msg_rates_age=60&msg_rates_incr=5")
    details = body["queue_totals"]["messages_details"]
    assert {"rate", "samples", "avg_rate", "avg"} <= set(details)
    assert "samples" in body["message_stats"]["publish_details"]


def test_whoami_extensions_nodes(api, broker):
    assert api.ok("/whoami?columns=name,tags") == {"name": "guest", "tags": ["administrator"]}
    assert api.ok("/extensions") == []
    nodes = api.ok("/nodes")
    assert len(nodes) == 1
    node = nodes[0]
    for key in ("mem_used", "mem_limit", "mem_alarm", "disk_free", "disk_free_limit",
                "disk_free_alarm", "fd_used", "fd_total", "sockets_used", "sockets_total",
                "uptime", "running", "name", "type"):
        assert key in node, key
    assert api.ok(f"/nodes/{node['name']}")["name"] == node["name"]
    assert api.get("/nodes/rabbit@nowhere")[0] == 404


def test_connections_channels_consumers(api, broker, qname):
    conn = _conn(broker, "mgmt-conn-test")
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_qos(prefetch_count=7)
        ch.queue_declare(qname)
        ch.basic_publish("", qname, b"x")
        ch.basic_consume(qname, lambda *a: None, consumer_tag="ctag-1")
        conn.process_data_events(0.2)
        conns = [c for c in api.ok("/connections") if c.get("user_provided_name") == "mgmt-conn-test"]
        assert len(conns) == 1
        c = conns[0]
        assert c["name"].endswith(f" -> 127.0.0.1:{broker.port}")
        assert c["protocol"] == "AMQP 0-9-1" and c["user"] == "guest" and c["channels"] == 1
        assert c["client_properties"]["connection_name"] == "mgmt-conn-test"
        name = c["name"]
        quoted = name.replace(" ", "%20").replace(">", "%3E")
        assert api.ok(f"/connections/{quoted}")["name"] == name
        assert [x["name"] for x in api.ok("/vhosts/%2F/connections")].count(name) == 1
        chans = api.ok(f"/connections/{quoted}/channels")
        assert [x["name"] for x in chans] == [f"{name} (1)"]
        chan = api.ok(f"/channels/{quoted}%20(1)")
        assert chan["confirm"] is True and chan["prefetch_count"] == 7
        assert chan["consumer_count"] == 1 and chan["message_stats"]["publish"] == 1
        assert chan["connection_details"]["name"] == name
        assert any(x["name"] == chan["name"] for x in api.ok("/channels"))
        assert any(x["name"] == chan["name"] for x in api.ok("/vhosts/%2F/channels"))
        consumers = [x for x in api.ok("/consumers/%2F") if x["queue"]["name"] == qname]
        assert len(consumers) == 1 and consumers[0]["consumer_tag"] == "ctag-1"
        assert consumers[0]["channel_details"]["name"] == chan["name"]
        assert consumers[0]["prefetch_count"] == 7 and consumers[0]["ack_required"] is True
        assert any(x["consumer_tag"] == "ctag-1" for x in api.ok("/consumers"))
        detail = api.ok(Q + qname)
        assert detail["consumers"] == 1 and detail["consumer_details"][0]["consumer_tag"] == "ctag-1"
        ch.queue_delete(qname)
    finally:
        conn.close()


def test_delete_connection_with_reason(api, broker):
    conn = _conn(broker, "mgmt-close-me")
    try:
        name = next(c["name"] for c in api.ok("/connections")
                    if c["user_provided_name"] == "mgmt-close-me")
        quoted = name.replace(" ", "%20").replace(">", "%3E")
        status, _, _ = api.delete(f"/connections/{quoted}", headers={"X-Reason": "go away"})
        assert status == 204
        with pytest.raises(pika.exceptions.ConnectionClosed) as info:
            for _ in range(50):
                conn.process_data_events(0.05)
        assert "go away" in str(info.value)
    finally:
        if conn.is_open:
            conn.close()
    assert api.get(f"/connections/{quoted}")[0] == 404


def test_exchanges_queues_bindings_reads(api, qname):
    assert api.put(X + qname, {"type": "topic"})[0] == 201
    assert api.put(Q + qname, {"arguments": {"x-max-length": 100}})[0] == 201
    assert api.post(f"/bindings/%2F/e/{qname}/q/{qname}", {"routing_key": "a.#"})[0] == 201
    x = api.ok(X + qname)
    assert {k: x[k] for k in ("name", "type", "durable", "auto_delete", "internal", "vhost")} == {
        "name": qname, "type": "topic", "durable": False, "auto_delete": False,
        "internal": False, "vhost": "/"}
    assert any(e["name"] == qname for e in api.ok("/exchanges"))
    assert any(e["name"] == "amq.topic" for e in api.ok("/exchanges/%2F"))
    binding = {"source": qname, "vhost": "/", "destination": qname, "destination_type": "queue",
               "routing_key": "a.#", "arguments": {}, "properties_key": "a.%23"}
    assert api.ok(f"{X}{qname}/bindings/source") == [binding]
    assert api.ok(f"{X}{qname}/bindings/destination") == []
    q = api.ok(Q + qname)
    assert q["arguments"] == {"x-max-length": 100} and q["type"] == "classic"
    assert q["state"] == "running" and q["messages"] == 0
    assert [b["source"] for b in api.ok(f"{Q}{qname}/bindings")] == ["", qname]
    assert binding in api.ok("/bindings")
    assert binding in api.ok("/bindings/%2F")
    assert api.ok(f"/bindings/%2F/e/{qname}/q/{qname}") == [binding]
    assert api.ok(f"/bindings/%2F/e/{qname}/q/{qname}/a.%23") == binding
    assert any(q["name"] == qname for q in api.ok("/queues/%2F"))
    assert api.ok(f"/queues/%2F?name={qname}&columns=name,arguments.x-max-length") == [
        {"name": qname, "arguments": {"x-max-length": 100}}]
    assert api.delete(Q + qname)[0] == 204
    assert api.delete(X + qname)[0] == 204


def test_vhosts_policies_users(api):
    vhosts = api.ok("/vhosts")
    assert [v["name"] for v in vhosts] == ["/"]
    v = api.ok("/vhosts/%2F")
    for key in ("name", "description", "tags", "default_queue_type", "metadata", "tracing",
                "cluster_state", "messages", "message_stats", "recv_oct", "send_oct"):
        assert key in v, key
    assert api.get("/vhosts/nope")[0] == 404
    assert api.ok("/users")[0]["name"] == "guest"
    assert api.ok("/users/guest")["tags"] == ["administrator"]
    assert api.ok("/permissions")[0]["configure"] == ".*"
    for path in ("/topic-permissions", "/parameters", "/vhost-limits", "/user-limits",
                 "/operator-policies", "/global-parameters"):
        assert api.ok(path) == [], path


# -- list parameters ---------------------------------------------------------------------------

def test_pagination_sort_columns_and_regex(api, qname):
    names = [f"{qname}-{i}" for i in range(5)]
    for i, name in enumerate(names):
        assert api.put(Q + name, {"durable": "false"})[0] == 201
        for _ in range(i):
            api.post("/exchanges/%2F/amq.default/publish",
                     {"routing_key": name, "payload": "x", "payload_encoding": "string",
                      "properties": {}})
    page = api.ok(f"/queues?page=2&page_size=2&name={qname}&pagination=true&columns=name")
    assert page == {"filtered_count": 5, "item_count": 2, "items": [{"name": names[2]},
                    {"name": names[3]}], "page": 2, "page_count": 3, "page_size": 2,
                    "total_count": page["total_count"]}
    assert page["total_count"] >= 5
    by_messages = api.ok(f"/queues?name={qname}&sort=messages&sort_reverse=true&columns=name")
    assert [q["name"] for q in by_messages] == names[::-1]
    regex = api.ok(f"/queues?name=^{qname}-[13]$&use_regex=true&columns=name")
    assert [q["name"] for q in regex] == [names[1], names[3]]
    lean = api.ok(f"/queues?name={qname}-4&disable_stats=true&enable_queue_totals=true")
    assert set(lean[0]) == {"name", "vhost", "type", "node", "state", "arguments",
                            "auto_delete", "durable", "exclusive", "messages",
                            "messages_ready", "messages_unacknowledged"}
    assert lean[0]["messages"] == 4
    status, _, body = api.get("/queues?page=1&page_size=600")
    assert (status, body["error"]) == (400, "invalid_pagination_parameters")
    status, _, body = api.get(f"/queues?page=99&page_size=10&name={qname}")
    assert (status, body["error"]) == (400, "page_out_of_range")
    for name in names:
        api.delete(Q + name)


# -- write routes --------------------------------------------------------------------------------

def test_put_queue_statuses_and_errors(api, qname):
    assert api.put(Q + qname, {"durable": "true", "vhost": "/", "name": qname})[0] == 201
    assert api.put(Q + qname, {"durable": True})[0] == 204
    status, _, body = api.put(Q + qname, {"durable": "false"})
    assert (status, body) == (400, {"error": "bad_request", "reason":
        f"inequivalent arg 'durable' for queue '{qname}' in vhost '/': "
        "received 'false' but current is 'true'"})
    status, _, body = api.put(Q + qname + "-2", {"arguments": {"x-max-length": "x"}})
    assert status == 400 and body["reason"].startswith("invalid arg 'x-max-length' for queue")
    assert api.put(Q + "amq.nope")[0] == 401
    assert api.put("/queues/no-vhost/q")[0] == 404
    assert api.delete(Q + qname)[0] == 204
    assert api.delete(Q + qname)[0] == 404


def test_delete_queue_if_empty_if_unused_and_purge(api, broker, qname):
    api.put(Q + qname)
    api.post("/exchanges/%2F/amq.default/publish", {"routing_key": qname, "payload": "x",
                                                    "payload_encoding": "string",
                                                    "properties": {}})
    status, _, body = api.delete(Q + qname + "?if-empty=true")
    assert (status, body) == (400, {"error": "bad_request",
                                    "reason": f"queue '{qname}' in vhost '/' not empty"})
    assert api.delete(f"{Q}{qname}/contents")[0] == 204
    assert api.ok(Q + qname)["messages"] == 0
    conn = _conn(broker)
    try:
        conn.channel().basic_consume(qname, lambda *a: None)
        status, _, body = api.delete(Q + qname + "?if-unused=true")
        assert (status, body["reason"]) == (400, f"queue '{qname}' in vhost '/' in use")
    finally:
        conn.close()
    assert api.delete(Q + qname + "?if-empty=true&if-unused=true")[0] == 204


def test_exchange_put_delete(api, qname):
    assert api.put(X + qname, {"type": "fanout", "durable": "true"})[0] == 201
    assert api.put(X + qname, {"type": "fanout", "durable": "true"})[0] == 204
    status, _, body = api.put(X + qname, {"type": "direct", "durable": True})
    assert status == 400 and "inequivalent arg 'type'" in body["reason"]
    status, _, body = api.put(X + qname + "-b", {"type": "bogus"})
    assert (status, body["reason"]) == (400, "unknown exchange type 'bogus'")
    api.put(Q + qname)
    api.post(f"/bindings/%2F/e/{qname}/q/{qname}", {"routing_key": ""})
    status, _, body = api.delete(X + qname + "?if-unused=true")
    assert status == 400 and body["reason"].endswith("in use")
    assert api.delete(X + qname)[0] == 204
    assert api.delete(X + qname)[0] == 404
    api.delete(Q + qname)


def test_bindings_post_location_and_delete_by_properties_key(api, qname):
    api.put(X + qname, {"type": "direct"})
    api.put(Q + qname)
    api.put(X + qname + "-dest", {"type": "fanout"})
    status, headers, _ = api.post(f"/bindings/%2F/e/{qname}/q/{qname}", {"routing_key": "k"})
    assert status == 201 and headers["Location"] == f"{qname}/k"
    status, headers, _ = api.post(f"/bindings/%2F/e/{qname}/q/{qname}",
                                  {"routing_key": "k2", "arguments": {"a": 1}})
    props = headers["Location"].split("/", 1)[1]
    assert status == 201 and props.startswith("k2~")
    assert api.post(f"/bindings/%2F/e/{qname}/e/{qname}-dest", {"routing_key": "e"})[0] == 201
    assert [b["destination"] for b in api.ok(f"{X}{qname}-dest/bindings/destination")] == [
        f"{qname}-dest"]
    assert api.ok(f"/bindings/%2F/e/{qname}/q/{qname}/{props}")["arguments"] == {"a": 1}
    assert api.delete(f"/bindings/%2F/e/{qname}/q/{qname}/{props}")[0] == 204
    assert api.delete(f"/bindings/%2F/e/{qname}/q/{qname}/k")[0] == 204
    assert api.delete(f"/bindings/%2F/e/{qname}/q/{qname}/k")[0] == 404
    assert api.ok(f"/bindings/%2F/e/{qname}/q/{qname}") == []
    assert api.post(f"/bindings/%2F/e/{qname}/q/no-such-queue", {})[0] == 404
    api.delete(Q + qname)
    api.delete(X + qname)
    api.delete(X + qname + "-dest")


def test_publish_and_get_ack_modes(api, qname):
    api.put(Q + qname)
    publish = "/exchanges/%2F/amq.default/publish"
    assert api.post(publish, {"routing_key": qname, "payload": "héllo",
                              "payload_encoding": "string",
                              "properties": {"headers": {"h": "v"}, "delivery_mode": 2,
                                             "content_type": "text/plain"}})[2] == {"routed": True}
    assert api.post(publish, {"routing_key": qname, "payload": base64.b64encode(b"\xff\x00").decode(),
                              "payload_encoding": "base64", "properties": {}})[2] == {"routed": True}
    assert api.post(publish, {"routing_key": "nowhere-" + qname, "payload": "x",
                              "payload_encoding": "string", "properties": {}})[2] == {"routed": False}
    status, _, body = api.post(f"{Q}{qname}/get", {"count": 1, "encoding": "auto"})
    assert (status, body) == (400, {"error": "bad_request", "reason": "[{key_missing,ackmode}]"})
    get = f"{Q}{qname}/get"
    first = api.post(get, {"count": "2", "ackmode": "ack_requeue_true", "encoding": "auto",
                           "truncate": 3})[2]
    assert [m["redelivered"] for m in first] == [False, False]
    m = first[0]
    assert m["payload"] == "hé" and m["payload_bytes"] == 6 and m["payload_encoding"] == "string"
    assert m["properties"] == {"headers": {"h": "v"}, "delivery_mode": 2,
                               "content_type": "text/plain"}
    assert first[1]["payload_encoding"] == "base64" and first[1]["payload"] == "/wA="
    assert set(m) == {"payload_bytes", "redelivered", "exchange", "routing_key", "message_count",
                      "properties", "payload", "payload_encoding"}
    again = api.post(get, {"count": 1, "ackmode": "reject_requeue_true", "encoding": "base64"})[2]
    assert again[0]["redelivered"] is True and again[0]["payload_encoding"] == "base64"
    assert again[0]["message_count"] == 1
    gone = api.post(get, {"count": 5, "ackmode": "ack_requeue_false", "encoding": "auto"})[2]
    assert len(gone) == 2
    assert api.post(get, {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"})[2] == []
    status, _, body = api.post(get, {"count": 1, "ackmode": "bogus", "encoding": "auto"})
    assert status == 400
    assert api.post("/exchanges/%2F/no-such-x/publish", {"routing_key": "", "payload": "",
                    "payload_encoding": "string", "properties": {}})[::2] == (400, {
        "error": "bad_request", "reason": "404 NOT_FOUND - no exchange 'no-such-x' in vhost '/'"})
    api.delete(Q + qname)


def test_get_reject_requeue_false_dead_letters(api, qname):
    api.put(Q + qname + "-dlq")
    api.put(Q + qname, {"arguments": {"x-dead-letter-exchange": "",
                                      "x-dead-letter-routing-key": qname + "-dlq"}})
    api.post("/exchanges/%2F/amq.default/publish", {"routing_key": qname, "payload": "x",
                                                    "payload_encoding": "string",
                                                    "properties": {}})
    api.post(f"{Q}{qname}/get", {"count": 1, "ackmode": "reject_requeue_false",
                                 "encoding": "auto"})
    assert api.ok(Q + qname)["messages"] == 0
    assert api.ok(Q + qname + "-dlq")["messages"] == 1
    api.delete(Q + qname)
    api.delete(Q + qname + "-dlq")


def test_policies_put_get_delete(api, qname):
    path = f"/policies/%2F/{qname}"
    assert api.put(path, {"pattern": f"^{qname}", "definition": {"max-length": 1}})[0] == 201
    assert api.ok(path) == {"vhost": "/", "name": qname, "pattern": f"^{qname}",
                            "apply-to": "all", "definition": {"max-length": 1}, "priority": 0}
    assert api.put(path, {"pattern": f"^{qname}", "definition": {"max-length": 2}})[0] == 204
    assert any(p["name"] == qname for p in api.ok("/policies"))
    assert any(p["name"] == qname for p in api.ok("/policies/%2F"))
    api.put(Q + qname)
    assert api.ok(Q + qname)["policy"] == qname
    status, _, body = api.put(path, {"pattern": "x", "definition": {"max-length": "x"}})
    assert status == 400 and body["reason"].startswith("Validation failed")
    assert api.delete(path)[0] == 204
    assert api.delete(path)[0] == 404
    api.delete(Q + qname)


def test_overview_rates_come_from_the_sampler(api, qname):
    """Two samples 5 s apart: publishing in between shows a rate; nothing is per message."""
    api.put(Q + qname)
    before = api.ok("/overview")["object_totals"]["queues"]
    assert before >= 1
    deadline = time.monotonic() + WAIT
    rate = 0.0
    while time.monotonic() < deadline and rate <= 0:
        api.post("/exchanges/%2F/amq.default/publish", {"routing_key": qname, "payload": "x",
                                                        "payload_encoding": "string",
                                                        "properties": {}})
        rate = api.ok("/overview")["message_stats"]["publish_details"]["rate"]
        time.sleep(0.5)
    assert rate > 0
    api.delete(Q + qname)


# -- field names against a real RabbitMQ --------------------------------------------------------

def test_field_names_match_rabbitmq(api, rabbitmq_http, qname):
    """Leveret's objects carry every field RabbitMQ 3.10 has, minus Erlang-only ones and
    the per-queue message_stats not kept yet (they would cost per message). The queues'
    message_bytes* values are compared in test_queue_bytes.py."""
    erlang_only = {"garbage_collection", "reductions", "reductions_details",
                   "backing_queue_status", "recoverable_slaves", "statistics_db_event_queue",
                   "erlang_full_version", "release_series_support_status", "idle_since",
                   "message_stats"}
    for target in (api, rabbitmq_http):
        target.put(Q + qname)
    try:
        for path in ("/overview", Q + qname, "/exchanges/%2F/amq.direct", "/vhosts/%2F",
                     "/whoami"):
            ours = set(api.ok(path))
            theirs = set(rabbitmq_http.ok(path))
            assert theirs - ours - erlang_only == set(), path
        ours = set(api.ok("/nodes")[0])
        theirs = set(rabbitmq_http.ok("/nodes")[0])
        missing = {k for k in theirs - ours if not k.endswith("_details")}
        assert missing <= {"gc_num", "gc_bytes_reclaimed", "context_switches", "io_read_count",
                           "io_read_bytes", "io_read_avg_time", "io_write_count",
                           "io_write_bytes", "io_write_avg_time", "io_sync_count",
                           "io_sync_avg_time", "io_seek_count", "io_seek_avg_time",
                           "io_reopen_count", "mnesia_ram_tx_count", "mnesia_disk_tx_count",
                           "msg_store_read_count", "msg_store_write_count",
                           "queue_index_write_count", "queue_index_read_count",
                           "connection_created", "connection_closed", "channel_created",
                           "channel_closed", "queue_declared", "queue_created",
                           "queue_deleted", "ra_open_file_metrics", "metrics_gc_queue_length",
                           "mem_calculation_strategy"}, missing
    finally:
        for target in (api, rabbitmq_http):
            target.delete(Q + qname)


def test_exclusive_queue_is_locked_over_http(target, request, qname):
    """Another connection's exclusive queue: get, purge, declare, delete, bind and unbind
    are refused (400) over HTTP, listing its bindings is not. Runs against RabbitMQ too
    (``target``), which is where the answers were recorded."""
    api = request.getfixturevalue("rabbitmq_http" if target.name == "rabbitmq" else "api")
    locked = (f"cannot obtain exclusive access to locked queue '{qname}' in vhost '/'. It could "
              "be originally declared on another connection or the exclusive property value "
              "does not match that of the original declaration.")
    conn = target.connect()
    try:
        ch = conn.channel()
        ch.queue_declare(qname, exclusive=True)
        ch.queue_bind(qname, "amq.direct", "k")
        ch.basic_publish("", qname, b"x")
        status, _, body = api.post(f"{Q}{qname}/get", {"count": 1, "ackmode": "ack_requeue_true",
                                                       "encoding": "auto"})
        assert (status, body["reason"]) == (400, f"405 RESOURCE_LOCKED - {locked}")
        between = f"/bindings/%2F/e/amq.direct/q/{qname}"
        for status, _, body in (api.delete(f"{Q}{qname}/contents"), api.put(Q + qname),
                                api.delete(Q + qname), api.post(between, {"routing_key": "k2"}),
                                api.delete(between + "/k")):
            assert (status, body) == (400, {"error": "bad_request", "reason": locked})
        assert api.ok(Q + qname)["exclusive"] is True
        assert [b["routing_key"] for b in api.ok(between)] == ["k"]
    finally:
        conn.close()


def test_cluster_name_and_permission_views(api):
    assert api.ok("/cluster-name")["name"] == api.ok("/overview")["cluster_name"]
    assert api.ok("/vhosts/%2F/permissions") == [
        {"user": "guest", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}]
    assert api.ok("/users/guest/permissions") == api.ok("/vhosts/%2F/permissions")
    assert api.get("/users/nobody/permissions")[0] == 404
    assert api.ok("/feature-flags") == []


def test_connection_channel_consumer_fields_match_rabbitmq(api, broker, rabbitmq_http, qname):
    """Connections, channels and consumers seen from both brokers with the same client."""
    ignore = {"garbage_collection", "reductions", "reductions_details", "idle_since"}
    views = {}
    conns = []
    try:
        for target, port in ((api, broker.port), (rabbitmq_http, 5672)):
            conn = pika.BlockingConnection(pika.ConnectionParameters(
                "127.0.0.1", port, client_properties={"connection_name": qname}))
            conns.append(conn)
            ch = conn.channel()
            ch.queue_declare(qname, exclusive=True)
            ch.basic_consume(qname, lambda *a: None)
            conn.process_data_events(0.1)
            deadline = time.monotonic() + WAIT
            while True:  # RabbitMQ's lists lag behind its stats emission
                c = [x for x in target.ok("/connections") if x.get("user_provided_name") == qname]
                chans = [x for x in target.ok("/channels") if c and
                         x["connection_details"]["name"] == c[0]["name"]]
                cons = [x for x in target.ok("/consumers") if x["queue"]["name"] == qname]
                if (c and chans and cons) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            views[target] = (c[0], chans[0], cons[0])
        for ours, theirs in zip(views[api], views[rabbitmq_http]):
            assert set(theirs) - set(ours) - ignore == set()
            for nested in ("channel_details", "connection_details", "queue"):
                if nested in theirs:
                    assert set(theirs[nested]) == set(ours[nested]), nested
    finally:
        for conn in conns:
            conn.close()


@pytest.mark.parametrize("method, path, body", [
    ("PUT", "/queues/%2F/{q}", {"arguments": []}),
    ("PUT", "/queues/%2F/{q}", {"arguments": {"x-max-length": -1}}),
    ("PUT", "/queues/%2F/{q}", {"durable": None, "auto_delete": [1]}),
    ("PUT", "/queues/%2F/{q}", ["not", "an", "object"]),
    ("PUT", "/exchanges/%2F/{q}", {"type": 5, "arguments": "x"}),
    ("PUT", "/exchanges/%2F/{q}", {"type": "headers", "arguments": {"x-match": "neither"}}),
    ("POST", "/bindings/%2F/e/amq.direct/q/{q}", {"routing_key": 5, "arguments": []}),
    ("POST", "/bindings/%2F/e/amq.headers/q/{q}", {"arguments": {"x-match": "bogus"}}),
    ("POST", "/bindings/%2F/e/amq.direct/z/{q}", {}),
    ("POST", "/exchanges/%2F/amq.default/publish", {"routing_key": "{q}", "payload": 5,
                                                    "payload_encoding": "base64",
                                                    "properties": {}}),
    ("POST", "/exchanges/%2F/amq.default/publish", {"routing_key": "{q}", "payload": "x",
                                                    "payload_encoding": "string",
                                                    "properties": {"headers": []}}),
    ("POST", "/exchanges/%2F/amq.default/publish", {"routing_key": "{q}", "payload": "x",
                                                    "payload_encoding": "string",
                                                    "properties": {"priority": "high"}}),
    ("POST", "/exchanges/%2F/amq.default/publish", {"routing_key": "{q}", "payload": "x",
                                                    "payload_encoding": "string",
                                                    "properties": {"delivery_mode": 99999}}),
    ("POST", "/exchanges/%2F/amq.default/publish", {"routing_key": "{q}", "payload": "x",
                                                    "payload_encoding": "string",
                                                    "properties": "x"}),
    ("POST", "/queues/%2F/{q}/get", {"count": "x", "ackmode": "ack_requeue_true",
                                     "encoding": "auto"}),
    ("POST", "/queues/%2F/{q}/get", {"count": 1, "ackmode": "ack_requeue_true",
                                     "encoding": "auto", "truncate": "x"}),
    ("PUT", "/policies/%2F/{q}", {"pattern": 5, "definition": []}),
    ("PUT", "/policies/%2F/{q}", {"pattern": "(", "definition": {}}),
    ("POST", "/definitions", {"queues": "x"}),
    ("POST", "/definitions", {"queues": [{"name": 5}]}),
    ("POST", "/definitions", {"bindings": [{"source": "amq.direct", "destination": "{q}",
                                            "vhost": "/", "arguments": []}]}),
    ("GET", "/queues?page=1&page_size=x", None),
    ("GET", "/queues?name=(&use_regex=true", None),
    ("GET", "/overview?lengths_age=x&msg_rates_incr=-1", None),
    ("GET", "/health/checks/port-listener/x", None),
    ("GET", "/health/checks/certificate-expiration/x/eons", None),
])
def test_malformed_input_is_never_a_500(api, qname, method, path, body):
    api.put(Q + qname)
    path = path.replace("{q}", qname)
    if isinstance(body, dict):
        body = {k: (v.replace("{q}", qname) if isinstance(v, str) else v)
                for k, v in body.items()}
    status, _, reply = api.request(method, path, body)
    assert status < 500, (status, reply)  # lenient (2xx) or refused (4xx), never a crash
    if status >= 400:
        assert isinstance(reply, dict) and "error" in reply and "reason" in reply, reply
    api.delete(Q + qname)


def test_users_vhosts_permissions_limits_crud(api, broker, qname):
    vh, user = f"vh-{qname}", f"u-{qname}"
    assert api.put(f"/vhosts/{vh}", {"description": "d", "tags": "a,b"})[0] == 201
    assert api.put(f"/vhosts/{vh}", {"description": "e"})[0] == 204
    v = api.ok(f"/vhosts/{vh}")
    assert (v["description"], v["metadata"]["description"]) == ("e", "e")
    assert api.put(f"/users/{user}", {"password": "pw"})[2] == {
        "error": "bad_request", "reason": "[{key_missing,tags}]"}
    assert api.put(f"/users/{user}", {"password": "pw", "tags": "monitoring"})[0] == 201
    u = api.ok(f"/users/{user}")
    assert u["tags"] == ["monitoring"] and u["hashing_algorithm"] == "rabbit_password_hashing_sha256"
    assert api.put(f"/users/{user}", {"password_hash": u["password_hash"],
                                      "tags": ["management"]})[0] == 204
    perm = {"configure": "^x", "write": ".*", "read": ".*"}
    assert api.put(f"/permissions/{vh}/{user}", perm)[0] == 201
    assert api.put(f"/permissions/{vh}/{user}", perm)[0] == 204
    assert api.ok(f"/permissions/{vh}/{user}") == {"user": user, "vhost": vh, **perm}
    assert api.ok(f"/vhosts/{vh}/permissions") == [  # the creator got full permissions
        {"user": "guest", "vhost": vh, "configure": ".*", "write": ".*", "read": ".*"},
        {"user": user, "vhost": vh, **perm}]
    assert api.ok(f"/users/{user}/permissions") == [{"user": user, "vhost": vh, **perm}]
    status, _, body = api.put(f"/permissions/{vh}/{user}", {**perm, "read": "("})
    assert status == 400 and body["error"] == "bad_request"
    topic = {"exchange": "amq.topic", "write": "^a", "read": ".*"}
    assert api.put(f"/topic-permissions/{vh}/{user}", topic)[0] == 201
    assert api.ok(f"/topic-permissions/{vh}/{user}") == [{"user": user, "vhost": vh, **topic}]
    assert api.delete(f"/topic-permissions/{vh}/{user}/amq.topic")[0] == 204
    assert api.ok(f"/topic-permissions/{vh}/{user}") == []
    assert api.put(f"/vhost-limits/{vh}/max-queues", {"value": 5})[0] == 204
    assert api.ok(f"/vhost-limits/{vh}") == [{"vhost": vh, "value": {"max-queues": 5}}]
    assert api.put(f"/vhost-limits/{vh}/max-queues", {"value": "x"})[0] == 400
    assert api.delete(f"/vhost-limits/{vh}/max-queues")[0] == 204
    # The new user logs in with its password and tags; it sees its vhost, not "/".
    as_user = type(api)(api.base, user, "pw")
    assert as_user.ok("/whoami?columns=name,tags") == {"name": user, "tags": ["management"]}
    assert as_user.ok(f"/queues/{vh}") == []
    assert as_user.get("/queues/%2F")[2]["reason"] == "User not authorised to access virtual host"
    assert as_user.get("/users")[0] == 401
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", broker.port, vh, pika.PlainCredentials(user, "pw")))
    conn.close()
    assert api.delete(f"/permissions/{vh}/{user}")[0] == 204
    assert api.delete(f"/permissions/{vh}/{user}")[0] == 404
    assert api.delete(f"/users/{user}")[0] == 204
    assert api.delete(f"/users/{user}")[0] == 404
    assert api.delete(f"/vhosts/{vh}")[0] == 204
    assert api.get(f"/vhosts/{vh}")[0] == 404


# -- publish, get and bind on missing objects, and publish's checks: as RabbitMQ 3.10.8 --------
# Each (status, body) was recorded from RabbitMQ 3.10.8 (management_ui/basic.py has the order
# of the checks). The table runs with test_management_permissions.py's fixture and runner:
# against a private Leveret always, and against RabbitMQ when its API answers on
# 127.0.0.1:15672 (skipped otherwise); the user is mp.U (tagged management), with every
# permission on "/", and what the cases create on RabbitMQ is deleted afterwards.

guest = mp.guest  # the fixture: guest on a private Leveret, and on RabbitMQ when it answers
NOVH = f"mp-novh-{mp.SUFFIX}"  # a vhost that does not exist
MP_PUB = f"/exchanges/%2F/{mp.X}/publish"  # mp.X is bound to mp.Q with "k"
MP_DEF = "/exchanges/%2F/amq.default/publish"
MP_GET = f"/queues/%2F/{mp.Q}/get"
INTERNAL = f"{mp.NEW}-x"  # deleted by the fixture
NO_CHANNEL = {"error": "not_authorised", "reason": "Access refused."}


def _bad(reason: Any) -> dict[str, Any]:
    return {"error": "bad_request", "reason": reason}


def _body(properties: dict[str, Any] | None = None, routing_key: str = "nowhere",
          **kw: Any) -> dict[str, Any]:
    return {**mp.publish_body(routing_key), "properties": properties or {}, **kw}


def _to_q(properties: dict[str, Any]) -> dict[str, Any]:
    return _body(properties, mp.Q)


def _case(name: str, method: str, path: str, body: Any, status: int, reply: Any,
          **kw: Any) -> mp.Case:
    return mp.Case(name, mp.ALL, method, path, body, status, reply, **kw)


def _user_id(value: str) -> dict[str, str]:
    return _bad(f"406 PRECONDITION_FAILED - user_id property set to '{value}' but "
                f"authenticated user was '{mp.U}'")


def _no(kind: str, name: str) -> dict[str, str]:
    return {"error": "not_found", "reason": f"no {kind} '{name}' in vhost '/'"}


MISSING_X = _bad(f"404 NOT_FOUND - no exchange '{mp.MISSING}' in vhost '/'")
REFUSED_INTERNAL = _bad(f"403 ACCESS_REFUSED - cannot publish to internal exchange "
                        f"'{INTERNAL}' in vhost '/'")
UNSUPPORTED = _bad("Unsupported encoding. Please use auto or base64.")
BAD_GET = {"count": 1, "ackmode": "ack_requeue_true", "encoding": "zz"}

RABBITMQ_ANSWERS = [
    # -- publish: the body, the vhost, properties and payload, then the channel's checks ---------
    _case("publish, missing exchange", "POST", f"/exchanges/%2F/{mp.MISSING}/publish",
          _body(), 400, MISSING_X),
    _case("publish, missing exchange before user_id", "POST",
          f"/exchanges/%2F/{mp.MISSING}/publish", _body({"user_id": "other"}), 400, MISSING_X),
    _case("publish, missing vhost", "POST", f"/exchanges/{NOVH}/x/publish", _body(), 401,
          NO_CHANNEL),
    _case("publish, key missing before the vhost", "POST", f"/exchanges/{NOVH}/x/publish",
          {"routing_key": "k", "payload": "m", "properties": {}}, 400,
          _bad("[{key_missing,payload_encoding}]")),
    _case("publish, payload not a string, before the vhost", "POST",
          f"/exchanges/{NOVH}/x/publish", _body(payload=5), 400, _bad("payload_not_string")),
    _case("publish, the vhost before properties", "POST", f"/exchanges/{NOVH}/x/publish",
          _body({"priority": "x"}), 401, NO_CHANNEL),
    _case("publish, not_int", "POST", MP_PUB, _body({"priority": "x"}), 400,
          _bad(["not_int", "priority"])),
    _case("publish, not_int for a numeric string", "POST", MP_PUB, _body({"delivery_mode": "2"}),
          400, _bad(["not_int", "delivery_mode"])),
    _case("publish, not_string, in wire order", "POST", MP_PUB,
          _body({"priority": "x", "content_type": 5}), 400, _bad(["not_string", "content_type"])),
    _case("publish, null in headers", "POST", MP_PUB, _body({"headers": {"a": [None]}}), 400,
          _bad("null_not_allowed")),
    _case("publish, unknown property ignored", "POST", MP_DEF, _to_q({"bogus": 1}), 200,
          {"routed": True}),
    _case("publish, unsupported encoding", "POST", MP_PUB, _body(payload_encoding="zz"), 400,
          _bad(["unsupported_encoding", "zz"])),
    _case("publish, properties before the payload", "POST", MP_PUB,
          _body({"priority": "x"}, payload_encoding="zz"), 400, _bad(["not_int", "priority"])),
    _case("publish, not base64", "POST", MP_PUB, _body(payload="eA", payload_encoding="base64"),
          400, _bad(["not_base64", "eA"])),
    _case("publish, base64 with a line break", "POST", MP_PUB,
          _body(payload="eA==\n", payload_encoding="base64"), 200, {"routed": False}),
    _case("publish, payload checked before the exchange", "POST",
          f"/exchanges/%2F/{mp.MISSING}/publish", _body(payload_encoding="zz"), 400,
          _bad(["unsupported_encoding", "zz"])),
    _case("publish, internal exchange", "POST", f"/exchanges/%2F/{INTERNAL}/publish", _body(),
          400, REFUSED_INTERNAL, setup=[
              ("PUT", f"/exchanges/%2F/{INTERNAL}", {"type": "direct", "internal": True})]),
    _case("publish, internal before user_id", "POST", f"/exchanges/%2F/{INTERNAL}/publish",
          _body({"user_id": "other"}), 400, REFUSED_INTERNAL),
    _case("publish, user_id", "POST", MP_DEF, _to_q({"user_id": "other"}), 400,
          _user_id("other")),
    _case("publish, empty user_id", "POST", MP_DEF, _to_q({"user_id": ""}), 400, _user_id("")),
    _case("publish, user_id before expiration", "POST", MP_DEF,
          _to_q({"user_id": "other", "expiration": "abc"}), 400, _user_id("other")),
    _case("publish, user_id of the user", "POST", MP_DEF, _to_q({"user_id": mp.U}), 200,
          {"routed": True}),
    _case("publish, expiration", "POST", MP_DEF, _to_q({"expiration": "abc"}), 400,
          _bad("406 PRECONDITION_FAILED - invalid expiration 'abc': no_integer")),
    _case("publish, negative expiration", "POST", MP_DEF, _to_q({"expiration": "-1"}), 400,
          _bad("406 PRECONDITION_FAILED - invalid expiration '-1': {value_negative,-1}")),
    _case("publish, CC routes", "POST", MP_DEF, _body({"headers": {"CC": [mp.Q]}}), 200,
          {"routed": True}),
    _case("publish, BCC routes", "POST", MP_DEF, _body({"headers": {"BCC": [mp.Q]}}), 200,
          {"routed": True}),
    _case("publish, CC not an array", "POST", MP_DEF, _body({"headers": {"CC": mp.Q}}), 400,
          _bad('406 PRECONDITION_FAILED - invalid message: '
               '{unacceptable_type_in_header,"CC",longstr}')),
    _case("publish, direct reply-to", "POST", MP_DEF,
          _to_q({"reply_to": "amq.rabbitmq.reply-to"}), 400,
          _bad("406 PRECONDITION_FAILED - fast reply consumer does not exist")),
    # -- get -------------------------------------------------------------------------------------
    _case("get, missing queue", "POST", f"/queues/%2F/{mp.MISSING}/get", mp.GET_BODY, 404,
          {"error": "not_found", "reason": f"NOT_FOUND - no queue '{mp.MISSING}' in vhost '/'"}),
    _case("get, missing vhost", "POST", f"/queues/{NOVH}/q/get", mp.GET_BODY, 401, NO_CHANNEL),
    _case("get, key missing before the vhost", "POST", f"/queues/{NOVH}/q/get",
          {"count": 1, "encoding": "auto"}, 400, _bad("[{key_missing,ackmode}]")),
    _case("get, the vhost before the encoding", "POST", f"/queues/{NOVH}/q/get", BAD_GET, 401,
          NO_CHANNEL),
    _case("get, unsupported encoding", "POST", MP_GET, BAD_GET, 400, UNSUPPORTED),
    _case("get, the encoding before the lookup", "POST", f"/queues/%2F/{mp.MISSING}/get",
          BAD_GET, 400, UNSUPPORTED),
    # -- bind: 404 not_found naming the missing end, the source first --------------------------
    _case("bind, missing source", "POST", f"/bindings/%2F/e/{mp.MISSING}/q/{mp.Q}",
          {"routing_key": "k9"}, 404, _no("exchange", mp.MISSING)),
    _case("bind, missing queue", "POST", f"/bindings/%2F/e/{mp.X}/q/{mp.MISSING}",
          {"routing_key": "k9"}, 404, _no("queue", mp.MISSING)),
    _case("bind, both missing: the source", "POST",
          f"/bindings/%2F/e/{mp.MISSING}/q/{mp.MISSING}-q", {}, 404, _no("exchange", mp.MISSING)),
    _case("exchange bind, missing source", "POST", f"/bindings/%2F/e/{mp.MISSING}/e/{mp.T}", {},
          404, _no("exchange", mp.MISSING)),
    _case("exchange bind, missing destination", "POST",
          f"/bindings/%2F/e/{mp.X}/e/{mp.MISSING}", {}, 404, _no("exchange", mp.MISSING)),
    _case("exchange bind, both missing: the source", "POST",
          f"/bindings/%2F/e/{mp.MISSING}/e/{mp.MISSING}-e", {}, 404, _no("exchange", mp.MISSING)),
    _case("bind, missing vhost", "POST", f"/bindings/{NOVH}/e/x/q/q", {}, 404,
          {"error": "not_found", "reason": "vhost_not_found"}),
    _case("bind, the default exchange", "POST", f"/bindings/%2F/e/amq.default/q/{mp.Q}", {}, 401,
          mp.ACCESS_REFUSED),
    _case("bindings between, missing source: none", "GET",
          f"/bindings/%2F/e/{mp.MISSING}/q/{mp.Q}", None, 200, []),
    _case("bindings between, missing queue: none", "GET",
          f"/bindings/%2F/e/{mp.X}/q/{mp.MISSING}", None, 200, []),
    _case("bindings between, missing exchange: none", "GET",
          f"/bindings/%2F/e/{mp.X}/e/{mp.MISSING}", None, 200, []),
    _case("bindings between, missing vhost: none", "GET", f"/bindings/{NOVH}/e/x/q/q", None, 200,
          []),
    _case("binding, missing source", "GET", f"/bindings/%2F/e/{mp.MISSING}/q/{mp.Q}/k", None, 404,
          mp.NOT_FOUND),
    # -- an exchange's or a queue's bindings: not looked up -------------------------------------
    _case("source bindings, missing exchange: none", "GET",
          f"/exchanges/%2F/{mp.MISSING}/bindings/source", None, 200, []),
    _case("destination bindings, missing exchange: none", "GET",
          f"/exchanges/%2F/{mp.MISSING}/bindings/destination", None, 200, []),
    _case("source bindings, missing vhost: none", "GET", f"/exchanges/{NOVH}/x/bindings/source",
          None, 200, []),
    _case("queue bindings, missing queue: the default exchange's", "GET",
          f"/queues/%2F/{mp.MISSING}/bindings", None, 200, [{
              "source": "", "vhost": "/", "destination": mp.MISSING,
              "destination_type": "queue", "routing_key": mp.MISSING, "arguments": {},
              "properties_key": mp.MISSING}]),
    _case("queue bindings, missing vhost: none", "GET", f"/queues/{NOVH}/q/bindings", None, 200,
          []),
    _case("unbind, missing source", "DELETE", f"/bindings/%2F/e/{mp.MISSING}/q/{mp.Q}/k", None,
          404, mp.NOT_FOUND),
    _case("unbind, missing queue", "DELETE", f"/bindings/%2F/e/{mp.X}/q/{mp.MISSING}/k", None,
          404, mp.NOT_FOUND),
    # -- last: the user becomes an impersonator, who may publish any user_id --------------------
    _case("publish, user_id by an impersonator", "POST", MP_DEF, _to_q({"user_id": "other"}),
          200, {"routed": True}, setup=[
              ("PUT", f"/users/{mp.U}", {"password": mp.PW, "tags": "management,impersonator"})]),
]


def test_publish_get_bind_answer_as_rabbitmq(guest: HttpApi) -> None:
    """Every case in order; all differences from RabbitMQ's recorded answers at once."""
    problems = [p for case in RABBITMQ_ANSWERS for p in mp._run(guest, case)]
    assert not problems, "\n".join(problems)


def test_http_publish_checks_leave_messages_as_rabbitmq(guest: HttpApi) -> None:
    """What the accepted publishes deliver: CC and BCC reach the queue (BCC removed from
    the headers), an impersonator's user_id is kept."""
    user = HttpApi(guest.base, mp.U, mp.PW)
    assert guest.put(f"/permissions/%2F/{mp.U}", dict(zip(
        ("configure", "write", "read"), mp.ALL, strict=True)))[0] in (201, 204)
    assert guest.post(MP_GET, {"count": 10, "ackmode": "ack_requeue_false",
                               "encoding": "auto"})[0] == 200  # the fixture's message
    assert user.post(MP_DEF, _body({"headers": {"CC": [mp.Q], "x": 1}}))[2] == {"routed": True}
    assert user.post(MP_DEF, _body({"headers": {"BCC": [mp.Q], "x": 2}}))[2] == {"routed": True}
    assert guest.put(f"/users/{mp.U}", {"password": mp.PW,
                                        "tags": "management,impersonator"})[0] == 204
    assert user.post(MP_DEF, _to_q({"user_id": "other"}))[2] == {"routed": True}
    got = guest.post(MP_GET, {"count": 10, "ackmode": "ack_requeue_false", "encoding": "auto"})[2]
    assert [(m["routing_key"], m["properties"]) for m in got] == [
        ("nowhere", {"headers": {"CC": [mp.Q], "x": 1}}),
        ("nowhere", {"headers": {"x": 2}}),
        (mp.Q, {"user_id": "other"})]
