"""The first thing a user does: connect, declare, publish, consume."""

import pika


def test_publish_consume_roundtrip(broker, qname):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.queue_declare(qname)
    ch.basic_publish("", qname, b"hello", pika.BasicProperties(content_type="text/plain",
                                                                headers={"a": 1}))
    method, props, body = ch.basic_get(qname, auto_ack=True)
    assert body == b"hello"
    assert props.content_type == "text/plain"
    assert props.headers == {"a": 1}
    assert method.redelivered is False
    conn.close()


def test_the_log_names_every_listener(broker):
    """What a user reads to find the broker: one line per listener, on the ports the ready
    file gave the fixture, and a last line once everything is up."""
    log = broker.log_text()
    for line in (f"listening for AMQP 0-9-1 on 127.0.0.1:{broker.port}",
                 f"listening for HTTP management API on 127.0.0.1:{broker.management_port}",
                 f"listening for Prometheus metrics on 127.0.0.1:{broker.prometheus_port}",
                 "Leveret started (1 listener(s)); press Ctrl-C to stop"):
        assert line in log, log
