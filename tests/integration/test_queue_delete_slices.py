"""Deleting a deep durable queue or stream, as users see it: ``queue.delete-ok`` with the
message count and a 404 after, at once; its stored messages leave the disk afterwards in
slices (``persistence/lmdb_drops.py``) while other publishers' confirms go on arriving,
and a ``kill -9`` part-way leaves nothing of it behind once the restarted broker is done.

The slice is lowered (``queue_delete_slice``) so that a few thousand messages take
hundreds of slices: progress is checked by state (the broker's log line that says the
queue is written off, the store's own counts), never by time.
"""

from __future__ import annotations

import threading
import time

import pika
import pytest

from leveret.persistence.lmdb_store import LmdbStore

PERSISTENT = pika.BasicProperties(delivery_mode=2)
SLICE = "10"  # entries per slice: a few thousand messages take hundreds of slices
DEEP = 3000
WRITTEN_OFF = "written off"  # LmdbStore's line once a deleted queue's last slice is in
WAIT = 120.0  # a hang guard, not a budget


def _broker(make_broker):
    # A small in-memory window too: most of the deep queue is a paged tail on disk only.
    return make_broker(None, LEVERET_QUEUE_DELETE_SLICE=SLICE,
                       LEVERET_QUEUE_MESSAGES_IN_MEMORY="500")


def _fill(conn, queue: str, count: int, arguments: dict | None = None) -> None:
    ch = conn.channel()
    ch.queue_declare(queue, durable=True, arguments=arguments)
    for i in range(count):
        ch.basic_publish("", queue, b"%06d" % i + b"x" * 200, PERSISTENT)
    ch.confirm_delivery()  # after the fill: its one confirmed publish waits for them all
    ch.basic_publish("", queue, b"last", PERSISTENT)
    ch.close()


def _log_has(b, offset: int, text: str) -> tuple[bool, int]:
    """Whether the broker's log says ``text`` after byte ``offset``; the new offset."""
    with open(b.log_path, "rb") as f:
        f.seek(offset)
        chunk = f.read()
    return text.encode() in chunk, offset + max(0, len(chunk) - len(text))


def _wait_for_log(b, offset: int, text: str) -> None:
    """Until the log says ``text`` (the broker's own state), or the hang guard."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline and b.proc is not None and b.proc.poll() is None:
        seen, offset = _log_has(b, offset, text)
        if seen:
            return
        time.sleep(0.05)
    pytest.fail(f"the broker never logged {text!r}:\n{b.log_text()[-3000:]}")


def test_confirms_keep_arriving_while_a_deep_queue_is_written_off(make_broker, qname):
    b = _broker(make_broker)
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    _fill(conn, qname, DEEP)
    start = b.log_path.stat().st_size

    # Another connection publishes with confirms, one at a time, and notes for each confirm
    # whether the deleted queue was already written off when it came.
    during = []  # confirm numbers that arrived before the write-off was logged
    confirmed = [0]
    stop = threading.Event()

    def publish() -> None:
        other = pika.BlockingConnection(pika.URLParameters(b.url))
        och = other.channel()
        och.queue_declare(f"{qname}.other", durable=True)
        och.confirm_delivery()
        offset, seen = start, False
        while not stop.is_set():
            och.basic_publish("", f"{qname}.other", b"other", PERSISTENT)  # waits for its confirm
            confirmed[0] += 1
            if not seen:
                seen, offset = _log_has(b, offset, WRITTEN_OFF)
                if not seen:
                    during.append(confirmed[0])
        other.close()

    publisher = threading.Thread(target=publish)
    publisher.start()
    try:
        while confirmed[0] < 5 and publisher.is_alive():
            time.sleep(0.01)
        deleted = ch.queue_delete(qname)
        at_delete = confirmed[0]
        assert deleted.method.message_count == DEEP + 1
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            conn.channel().queue_declare(qname, passive=True)
        assert refused.value.reply_code == 404
        again = conn.channel()
        assert again.queue_declare(qname, durable=True).method.message_count == 0  # at once
        _wait_for_log(b, start, WRITTEN_OFF)
    finally:
        stop.set()
        publisher.join(WAIT)
    # Confirms came between the delete-ok and the queue's last slice: the deletion did not
    # hold the other queue's commits (one such confirm may be a commit from just before).
    assert len([n for n in during if n > at_delete]) >= 2, (at_delete, during[-5:])
    assert again.queue_declare(qname, passive=True).method.message_count == 0
    conn.close()
    assert b.stop() == 0


@pytest.mark.parametrize("kind", ["classic", "stream"])
def test_a_kill_mid_deletion_leaves_nothing_of_the_queue(make_broker, qname, tmp_path, kind):
    b = _broker(make_broker)
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    _fill(conn, f"{qname}.other", 300)
    _fill(conn, qname, DEEP, {"x-queue-type": "stream"} if kind == "stream" else None)
    ch.queue_delete(qname)
    b.stop(kill=True)  # hundreds of synced slices to go: the kill lands among them
    marked = LmdbStore(tmp_path / "data" / "store", delete_slice=int(SLICE))
    try:
        assert marked.reclaiming, "the kill came after the last slice: nothing was tested"
    finally:
        marked.close()

    restart = b.log_path.stat().st_size
    b.start()
    _wait_for_log(b, restart, WRITTEN_OFF)  # the restarted broker finished the deletion
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        conn.channel().queue_declare(qname, passive=True)
    assert refused.value.reply_code == 404
    ch = conn.channel()
    assert ch.queue_declare(qname, durable=True).method.message_count == 0
    assert ch.queue_declare(f"{qname}.other", passive=True).method.message_count == 301
    bodies = []
    while (got := ch.basic_get(f"{qname}.other", auto_ack=False))[0] is not None:
        bodies.append(got[2])
    assert bodies == [b"%06d" % i + b"x" * 200 for i in range(300)] + [b"last"]
    conn.close()
    assert b.stop() == 0

    store = LmdbStore(tmp_path / "data" / "store")  # the store's own counts, broker stopped
    try:
        assert not store.reclaiming
        queues = store.load_definitions().queues
        assert sorted(q.name for q in queues) == sorted([qname, f"{qname}.other"])
        live = sum(store.queue_stats(q.qid).count for q in queues)
        assert live == 301  # the other queue's (unacked gets: requeued by the close)
        assert store._entry_count() == live  # no entry of the deleted queue is left
        assert store._message_count() == live  # nor any message record of it
    finally:
        store.close()

