"""Memory alarm: publishers are blocked (connection.blocked), consumers keep going."""

import threading
import time

import pika

# A bound for states that must come, not a budget: every wait ends once its state holds.
WAIT = 120.0


def pump_until(conn: pika.BlockingConnection, done: threading.Event) -> bool:
    deadline = time.monotonic() + WAIT
    while not done.is_set() and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    return done.is_set()


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
    assert pump_until(publisher, blocked), "publisher never received connection.blocked"

    # The consumer's connection never published: it is not blocked and still gets messages.
    _method, _, body = cch.basic_get(qname, auto_ack=True)
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
    assert pump_until(publisher, blocked), "publisher never received connection.blocked"
    assert "disk resource limit alarm set" in b.log_text()


def test_small_disk_blocks_before_full_and_deleting_the_queue_resumes_publishing(
        make_broker, qname):
    """A 32 MB disk with a 12 MB free limit (faked with disk_capacity: the data dir counts
    as a disk of that size). A fast confirmed publisher is blocked as the store grows, long
    before the 5 s disk poll; deleting the queue frees pages inside the store, which count
    as free space, so publishing resumes without a restart; ``compact`` shrinks the file."""
    from leveret.broker import control

    capacity, limit = 32 << 20, 12 << 20
    b = make_broker(None, LEVERET_DISK_CAPACITY=str(capacity),
                    LEVERET_DISK_FREE_LIMIT=str(limit))
    body = b"x" * (64 << 10)
    state = {"confirmed": 0, "error": None}
    ready = threading.Event()
    stop = threading.Event()

    def publish() -> None:
        # (pika's BlockingConnection runs connection.blocked callbacks only between calls,
        # not while basic_publish waits for its confirm: the stall is what we observe.)
        try:
            conn = pika.BlockingConnection(pika.URLParameters(b.url))
            ch = conn.channel()
            ch.queue_declare(qname, durable=True)
            ch.confirm_delivery()
            ready.set()
            while not stop.is_set():
                ch.basic_publish("", qname, body, pika.BasicProperties(delivery_mode=2))
                state["confirmed"] += 1
            conn.close()
        except Exception as exc:  # reported by the main thread
            state["error"] = exc
            ready.set()

    def stalled(within: float) -> int | None:
        """The confirmed count once the alarm is set and the count then stops moving for a
        second (None: no alarm, or the count kept moving). A stall before the alarm (a busy
        machine) is not taken for the block; one after it can only undercount."""
        deadline = time.monotonic() + within
        while "disk resource limit alarm set" not in b.log_text():
            if time.monotonic() > deadline or state["error"] is not None:
                return None
            time.sleep(0.05)
        last, since = -1, time.monotonic()
        while time.monotonic() < deadline and state["error"] is None:
            now = state["confirmed"]
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since > 1.0:
                return now
            time.sleep(0.05)
        return None

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    assert ready.wait(WAIT)
    stuck = stalled(WAIT)
    assert state["error"] is None, state["error"]
    assert stuck is not None, f"publisher never blocked: {state}"
    assert "disk resource limit alarm set" in b.log_text()
    # Blocked as the store grew past capacity - limit (1 MB check step, some slack for the
    # LMDB file's own overhead), not seconds later at the next poll.
    written = stuck * len(body)
    assert written <= capacity - limit + (4 << 20), written

    # Another connection (not a publisher) deletes the queue: its pages are free again.
    admin = pika.BlockingConnection(pika.URLParameters(b.url))
    admin.channel().queue_delete(qname)
    deadline = time.monotonic() + WAIT
    while state["confirmed"] < stuck + 20 and time.monotonic() < deadline:
        admin.process_data_events(time_limit=0.05)
    assert state["confirmed"] >= stuck + 20, "publishing did not resume after the queue went"
    stop.set()
    thread.join(WAIT)
    admin.close()
    assert "disk resource limit alarm cleared" in b.log_text()

    # The file still has the freed pages; compaction gives them back to the filesystem.
    result = control.request(b.data_dir, {"command": "compact"}, timeout=60)
    assert result["after"] < result["before"] // 4, result
    assert (b.data_dir / "store" / "data.mdb").stat().st_size == result["after"]
