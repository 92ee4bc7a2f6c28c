"""Memory alarm: publishers are blocked (connection.blocked), consumers keep going."""

import threading

import pika


def test_memory_alarm_blocks_publishers_not_consumers(make_broker, qname):
    # A watermark far below any real RSS: the alarm is on from the first check.
    b = make_broker(None, LEVERET_MEMORY_HIGH_WATERMARK="0.0000001")
    params = pika.URLParameters(b.url)

    consumer_conn = pika.BlockingConnection(params)
    cch = consumer_conn.channel()
    cch.queue_declare(qname)

    publisher = pika.BlockingConnection(params)
    blocked = threading.Event()
    publisher.add_on_connection_blocked_callback(lambda *_: blocked.set())
    pch = publisher.channel()
    pch.basic_publish("", qname, b"first")  # marks the connection as a publisher
    deadline = 50
    while not blocked.is_set() and deadline:
        publisher.process_data_events(time_limit=0.1)
        deadline -= 1
    assert blocked.is_set(), "publisher never received connection.blocked"

    # The consumer's connection never published: it is not blocked and still gets messages.
    method, _, body = cch.basic_get(qname, auto_ack=True)
    assert body == b"first"
    cch.queue_declare(qname, passive=True)
    consumer_conn.close()
    assert "memory resource limit alarm set" in b.log_text()


def test_disk_alarm_blocks_publishers(make_broker, qname):
    # A free-disk limit no disk can meet: the disk alarm is on from the first check.
    b = make_broker(None, LEVERET_DISK_FREE_LIMIT=str(2**62))
    publisher = pika.BlockingConnection(pika.URLParameters(b.url))
    blocked = threading.Event()
    publisher.add_on_connection_blocked_callback(lambda *_: blocked.set())
    ch = publisher.channel()
    ch.queue_declare(qname, durable=True)
    ch.basic_publish("", qname, b"x", pika.BasicProperties(delivery_mode=2))
    for _ in range(50):
        if blocked.is_set():
            break
        publisher.process_data_events(time_limit=0.1)
    assert blocked.is_set(), "publisher never received connection.blocked"
    assert "disk resource limit alarm set" in b.log_text()
