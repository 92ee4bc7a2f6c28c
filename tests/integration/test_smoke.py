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
