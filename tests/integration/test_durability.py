"""Durability through real clients: restart, kill -9, crash loops, backlogs.

The promise under test: a confirmed persistent message in a durable queue is
on disk before its confirm, and survives SIGTERM, SIGKILL and restart;
transient messages and non-durable queues do not survive, as in RabbitMQ.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
import urllib.request

import pika
import pytest

PERSISTENT = pika.BasicProperties(delivery_mode=2)
TRANSIENT = pika.BasicProperties(delivery_mode=1)


def connect(b) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(b.url))


# A hang guard for what must come (a publisher's exit after the kill), not a budget.
WAIT = 120.0


def committed(conn: pika.BlockingConnection, queue: str) -> None:
    """Return once everything the broker has done so far is on disk: a persistent publish
    to a durable queue is confirmed after its group commit, which holds every record
    appended before it (what a sleep of "a loop turn or two" used to hope for)."""
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare(f"{queue}.committed", durable=True)
    ch.basic_publish("", f"{queue}.committed", b"", PERSISTENT)
    ch.close()


def drain(ch, queue: str) -> list[tuple[bytes, bool]]:
    """Every message in ``queue`` as (body, redelivered), acked, via basic.get."""
    out = []
    while True:
        method, _, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            break
        out.append((body, method.redelivered))
    return out


def test_durable_topology_and_persistent_messages_survive_restart(make_broker, qname):
    b = make_broker()
    conn = connect(b)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare(f"{qname}.x", "topic", durable=True)
    ch.queue_declare(qname, durable=True)
    ch.queue_declare(f"{qname}.transient-queue", durable=False)
    ch.queue_bind(qname, f"{qname}.x", "a.#")
    ch.basic_publish(f"{qname}.x", "a.b", b"persistent-1", PERSISTENT)
    ch.basic_publish(f"{qname}.x", "a.c", b"transient-1", TRANSIENT)
    ch.basic_publish(f"{qname}.x", "a.d", b"persistent-2",
                     pika.BasicProperties(delivery_mode=2, content_type="text/plain",
                                          headers={"k": "v", "n": 7}))
    conn.close()
    assert b.stop() == 0
    b.start()

    conn = connect(b)
    ch = conn.channel()
    ch.exchange_declare(f"{qname}.x", "topic", passive=True)
    assert ch.queue_declare(qname, passive=True).method.message_count == 2
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.queue_declare(f"{qname}.transient-queue", passive=True)
    assert err.value.reply_code == 404
    ch = conn.channel()
    method, props, body = ch.basic_get(qname, auto_ack=True)
    assert body == b"persistent-1" and method.routing_key == "a.b"
    assert method.exchange == f"{qname}.x"
    method, props, body = ch.basic_get(qname, auto_ack=True)
    assert body == b"persistent-2"
    assert props.content_type == "text/plain" and props.headers == {"k": "v", "n": 7}
    assert props.delivery_mode == 2
    # The binding survived too.
    ch.confirm_delivery()
    ch.basic_publish(f"{qname}.x", "a.z", b"after-restart", PERSISTENT)
    assert drain(ch, qname) == [(b"after-restart", False)]
    conn.close()


def test_unacked_messages_come_back_redelivered_after_kill(make_broker, qname):
    b = make_broker()
    conn = connect(b)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare(qname, durable=True)
    for i in range(5):
        ch.basic_publish("", qname, b"m%d" % i, PERSISTENT)
    got = [ch.basic_get(qname, auto_ack=False) for _ in range(2)]  # m0, m1 unacked
    ch.basic_ack(got[0][0].delivery_tag)  # m0 acked
    committed(conn, qname)
    b.stop(kill=True)
    b.start()
    conn = connect(b)
    ch = conn.channel()
    assert drain(ch, qname) == [(b"m1", True), (b"m2", False), (b"m3", False), (b"m4", False)]
    conn.close()


def test_redelivered_flags_and_delivery_counts_survive_kill(make_broker, qname):
    """A FIFO queue records its first deliveries as one mark (persistence/batch.py,
    DeliveredBelow), a priority queue per entry, redeliveries by count: after kill -9 a
    consumer sees redelivered=true exactly on what was delivered before, and a delivery
    limit still counts the deliveries made before the crash."""
    b = make_broker()
    conn = connect(b)
    ch = conn.channel()
    ch.confirm_delivery()
    fifo, prio, limited = qname, f"{qname}.prio", f"{qname}.limited"
    ch.queue_declare(fifo, durable=True)
    ch.queue_declare(prio, durable=True, arguments={"x-max-priority": 5})
    ch.queue_declare(limited, durable=True, arguments={"x-delivery-limit": 2})
    for i in range(6):
        ch.basic_publish("", fifo, b"f%d" % i, PERSISTENT)
    ch.basic_publish("", prio, b"p0", pika.BasicProperties(delivery_mode=2, priority=1))
    ch.basic_publish("", limited, b"poison", PERSISTENT)
    # fifo: f0..f3 delivered; f1 acked; f2 requeued and delivered again (count 2); f4, f5 not.
    got = [ch.basic_get(fifo, auto_ack=False) for _ in range(4)]
    assert [body for _, _, body in got] == [b"f0", b"f1", b"f2", b"f3"]
    ch.basic_ack(got[1][0].delivery_tag)
    ch.basic_nack(got[2][0].delivery_tag, requeue=True)
    method, _, body = ch.basic_get(fifo, auto_ack=False)
    assert body == b"f2" and method.redelivered
    # prio: p0 delivered, unacked, then p1 (priority 5, ahead of it) and p2 published;
    # limited: delivered and requeued twice (2 of 2).
    method, _, body = ch.basic_get(prio, auto_ack=False)
    assert body == b"p0"
    for name, priority in ((b"p1", 5), (b"p2", 1)):
        ch.basic_publish("", prio, name, pika.BasicProperties(delivery_mode=2, priority=priority))
    for _ in range(2):
        method, _, body = ch.basic_get(limited, auto_ack=False)
        ch.basic_nack(method.delivery_tag, requeue=True)
    committed(conn, qname)
    b.stop(kill=True)
    b.start()
    conn = connect(b)
    ch = conn.channel()
    assert drain(ch, fifo) == [(b"f0", True), (b"f2", True), (b"f3", True), (b"f4", False),
                               (b"f5", False)]
    assert drain(ch, prio) == [(b"p1", False), (b"p0", True), (b"p2", False)]
    # The third delivery (count 3 > limit 2) is the last: requeued, it is dropped.
    method, _, body = ch.basic_get(limited, auto_ack=False)
    assert body == b"poison" and method.redelivered
    ch.basic_nack(method.delivery_tag, requeue=True)
    assert ch.queue_declare(limited, passive=True).method.message_count == 0
    conn.close()


def test_tx_commit_is_durable(make_broker, qname):
    b = make_broker()
    conn = connect(b)
    ch = conn.channel()
    ch.queue_declare(qname, durable=True)
    ch.tx_select()
    for i in range(3):
        ch.basic_publish("", qname, b"t%d" % i, PERSISTENT)
    ch.tx_commit()  # commit-ok only after the batch is on disk
    ch.basic_publish("", qname, b"rolled-back", PERSISTENT)
    ch.tx_rollback()
    b.stop(kill=True)
    b.start()
    conn = connect(b)
    assert [body for body, _ in drain(conn.channel(), qname)] == [b"t0", b"t1", b"t2"]
    conn.close()


def test_backlog_beyond_memory_window_is_paged_and_kept_in_order(make_broker, qname):
    """More messages than a lazy queue keeps in memory (queues/paging.py): they stream back
    in order, also after restart."""
    from leveret.queues.plain_store import PAGE_HIGH

    count = PAGE_HIGH + 5000
    b = make_broker()
    conn = connect(b)
    ch = conn.channel()
    ch.queue_declare(qname, durable=True, arguments={"x-queue-mode": "lazy"})
    body = b"x" * 100
    for i in range(count):  # unconfirmed: a clean stop writes them all (one commit each
        ch.basic_publish("", qname, b"%08d" % i + body, PERSISTENT)  # was 15,000 commits)
    assert ch.queue_declare(qname, passive=True).method.message_count == count
    # Consume the first part now, the rest after a restart.
    ch.basic_qos(prefetch_count=500)
    seen = 0
    for method, _, msg in ch.consume(qname, inactivity_timeout=WAIT):
        assert method is not None, f"stalled after {seen}"
        assert msg[:8] == b"%08d" % seen
        ch.basic_ack(method.delivery_tag)
        seen += 1
        if seen == 1000:
            break
    ch.cancel()
    conn.close()
    assert b.stop() == 0
    b.start()
    assert "recovered" in b.log_text()
    conn = connect(b)
    ch = conn.channel()
    assert ch.queue_declare(qname, passive=True).method.message_count == count - 1000
    ch.basic_qos(prefetch_count=1000)
    for method, _, msg in ch.consume(qname, inactivity_timeout=WAIT):
        assert method is not None, f"stalled after {seen}"
        assert msg[:8] == b"%08d" % seen
        ch.basic_ack(method.delivery_tag, multiple=True) if seen % 100 == 99 else None
        seen += 1
        if seen == count:
            ch.basic_ack(method.delivery_tag, multiple=True)
            break
    assert seen == count
    conn.close()


def _queue_info(b, queue: str) -> dict:
    with urllib.request.urlopen(urllib.request.Request(
            f"{b.api_url}/api/queues/%2F/{queue}",
            headers={"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q="})) as response:  # guest:guest
        return json.load(response)


@pytest.mark.parametrize("in_memory", [None, "0"])
def test_a_queue_pages_beyond_its_bound_or_with_none_keeps_its_backlog_in_memory(
        make_broker, qname, in_memory):
    """Paging (queues/paging.py): by default a durable queue keeps 10,000 ready messages in
    memory and pages the rest; with ``queue_messages_in_memory = 0`` (RabbitMQ 3.10's
    classic queues) it holds its whole backlog in memory (written to disk too) while the
    broker is under its paging threshold. Either way the backlog comes back complete and
    in order, after a restart too."""
    from leveret.queues.paging import DEFAULT_BOUND

    count = DEFAULT_BOUND + 2000
    env = {} if in_memory is None else {"LEVERET_QUEUE_MESSAGES_IN_MEMORY": in_memory}
    b = make_broker(None, **env)
    conn = connect(b)
    ch = conn.channel()
    ch.queue_declare(qname, durable=True)
    for i in range(count):  # unconfirmed, then one barrier: not a commit each
        ch.basic_publish("", qname, b"%08d" % i, PERSISTENT)
    committed(conn, qname)
    info = _queue_info(b, qname)
    paged = count - DEFAULT_BOUND if in_memory is None else 0
    assert (info["messages"], info["messages_paged_out"], info["messages_ram"]) == (
        count, paged, count - paged)
    assert info["messages_persistent"] == count
    got = [ch.basic_get(qname, auto_ack=True)[2] for _ in range(100)]
    assert got == [b"%08d" % i for i in range(100)]
    conn.close()
    b.stop()
    b.start()  # a restart: everything is on disk, read back as the head drains
    conn = connect(b)
    got = [body for body, _ in drain(conn.channel(), qname)]
    assert got == [b"%08d" % i for i in range(100, count)]
    conn.close()


def test_a_deep_priority_queue_pages_and_keeps_priority_order_across_a_kill(make_broker, qname):
    """A durable priority queue deeper than its memory window: every priority level pages
    to disk, and deliveries stay highest priority first, oldest first, before and after
    the broker is killed and restarted (its levels rebuilt from the store)."""
    from leveret.queues.plain_store import PAGE_HIGH

    count = PAGE_HIGH + 5000
    b = make_broker()
    conn = connect(b)
    ch = conn.channel()
    ch.queue_declare(qname, durable=True, arguments={"x-max-priority": 9})
    for i in range(count):  # unconfirmed, then one barrier: not a commit each
        props = pika.BasicProperties(delivery_mode=2, priority=i % 10)
        ch.basic_publish("", qname, b"%08d" % i, props)
    committed(conn, qname)
    ch.confirm_delivery()  # for the barrier after the acks below
    expected = [b"%08d" % i for i in sorted(range(count), key=lambda i: (-(i % 10), i))]
    assert _queue_info(b, qname)["messages_paged_out"] >= count - PAGE_HIGH
    ch.basic_qos(prefetch_count=500)
    seen = []
    for method, _, body in ch.consume(qname, inactivity_timeout=WAIT):
        assert method is not None, f"stalled after {len(seen)}"
        seen.append(body)
        ch.basic_ack(method.delivery_tag)
        if len(seen) == 2000:  # past the in-memory priority 9 messages, into its tail
            break
    assert seen == expected[:2000]
    # Acks are not confirmed: a kill may undo the last ones (at-least-once). A confirmed
    # persistent publish after them is a barrier: group commit writes in order, so its
    # confirm means the acks before it are on disk too.
    ch.queue_declare(qname + "-sync", durable=True)
    ch.basic_publish("", qname + "-sync", b"sync", pika.BasicProperties(delivery_mode=2))
    conn.close()
    b.stop(kill=True)
    b.start()
    conn = connect(b)
    ch = conn.channel()
    assert ch.queue_declare(qname, passive=True, arguments={"x-max-priority": 9}
                            ).method.message_count == count - 2000
    ch.basic_qos(prefetch_count=1000)
    for method, _, body in ch.consume(qname, inactivity_timeout=WAIT):
        assert method is not None, f"stalled after {len(seen)}"
        seen.append(body)
        if len(seen) % 100 == 0 or len(seen) == count:
            ch.basic_ack(method.delivery_tag, multiple=True)
        if len(seen) == count:
            break
    assert seen == expected
    conn.close()


CRASH_PUBLISHER = r"""
import sys, pika
url, queue = sys.argv[1], sys.argv[2]
conn = pika.BlockingConnection(pika.URLParameters(url))
ch = conn.channel()
ch.queue_declare(queue, durable=True)
ch.confirm_delivery()
props = pika.BasicProperties(delivery_mode=2)
i = int(sys.argv[3])
while True:
    ch.basic_publish("", queue, str(i).encode(), props)   # returns once confirmed
    print(i, flush=True)
    i += 1
"""


# More cycles for a longer soak: LEVERET_CRASH_CYCLES=50 pytest -k sigkill -s
CRASH_CYCLES = int(os.environ.get("LEVERET_CRASH_CYCLES", "5"))


def test_confirmed_messages_survive_sigkill_at_random_moments(make_broker, qname, tmp_path):
    """Publish with confirms in a loop, SIGKILL the broker at a random moment, restart, check.

    Every confirmed message must be in the queue exactly once; an unconfirmed one may or
    may not be there (at-least-once: duplicates only of unconfirmed messages).
    """
    cycles = CRASH_CYCLES
    rng = random.Random()
    b = make_broker()
    confirmed: set[int] = set()
    next_id = 0
    script = tmp_path / "publisher.py"
    script.write_text(CRASH_PUBLISHER)
    for cycle in range(cycles):
        proc = subprocess.Popen([sys.executable, str(script), b.url, qname, str(next_id)],
                                stdout=subprocess.PIPE, text=True)
        lines: list[str] = []
        reader = threading.Thread(target=lines.extend, args=(proc.stdout,), daemon=True)
        reader.start()
        # Kill at a random moment once confirms are flowing (a loaded machine may take
        # seconds just to start the publisher; killing before that tests nothing).
        deadline = time.monotonic() + WAIT
        while not lines and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.05, 1.0))
        b.stop(kill=True)
        proc.wait(WAIT)
        reader.join(WAIT)
        acked = [int(line) for line in lines if line.strip()]
        assert acked, f"cycle {cycle}: nothing was confirmed before the kill"
        confirmed.update(acked)
        next_id = max(acked) + 1000  # ids of unconfirmed messages are never reused
        b.start()
    conn = connect(b)
    ch = conn.channel()
    bodies = [int(body) for body, _ in drain(ch, qname)]
    conn.close()
    counts: dict[int, int] = {}
    for body in bodies:
        counts[body] = counts.get(body, 0) + 1
    lost = confirmed - counts.keys()
    duplicated_confirmed = {m for m in confirmed if counts.get(m, 0) > 1}
    assert not lost, f"{len(lost)} confirmed message(s) lost, e.g. {sorted(lost)[:10]}"
    assert not duplicated_confirmed, sorted(duplicated_confirmed)[:10]
    print(f"crash test: {cycles} kill cycles, {len(confirmed)} confirmed, lost 0, "
          f"{len(bodies) - len(confirmed)} unconfirmed also stored")


def test_corrupt_data_dir_is_a_clear_startup_error(tmp_path):
    data = tmp_path / "data"
    (data / "store").mkdir(parents=True)
    (data / "store" / "data.mdb").write_bytes(b"this is not an lmdb file" * 100)
    proc = subprocess.run([sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1",
                           "--port", "0", "--data-dir", str(data)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(lines) == 1, proc.stderr
    assert str(data / "store") in lines[0]
    assert "Traceback" not in proc.stderr


def test_data_dir_in_use_by_another_broker(make_broker, tmp_path):
    b = make_broker()
    proc = subprocess.run([sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1",
                           "--port", "0", "--data-dir", str(b.data_dir)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "in use by another Leveret process" in proc.stderr
    assert "Traceback" not in proc.stderr


# -- definitions are durable before their "-ok" -------------------------------------------------
# Each scenario: ``setup`` (made durable before the operation), ``operation`` (returns once its
# -ok / control reply arrived; the broker is SIGKILLed right after), ``check`` (after restart:
# what the -ok confirmed is there, or gone).

def _routed(ch, exchange: str, key: str) -> bool:
    """Whether a mandatory persistent publish to ``exchange`` reaches a queue."""
    try:
        ch.basic_publish(exchange, key, b"probe", PERSISTENT, mandatory=True)
    except pika.exceptions.UnroutableError:
        return False
    return True


def _exists(conn, kind: str, name: str) -> bool:
    ch = conn.channel()
    try:
        if kind == "queue":
            ch.queue_declare(name, passive=True)
        else:
            ch.exchange_declare(name, passive=True)
    except pika.exceptions.ChannelClosedByBroker as exc:
        assert exc.reply_code == 404
        return False
    ch.close()
    return True


def _fill(ch, queue: str, count: int = 200) -> None:
    ch.confirm_delivery()
    for i in range(count):
        ch.basic_publish("", queue, b"m%d" % i, PERSISTENT)


class _Ops:
    """One scenario per kind of "-ok"; ``n`` is a name unique to the round."""

    @staticmethod
    def exchange_declare(ch, n, b, step):
        if step == "op":
            ch.exchange_declare(n, "direct", durable=True)
        elif step == "check":
            assert _exists(ch.connection, "exchange", n), "declared exchange lost"

    @staticmethod
    def queue_declare(ch, n, b, step):
        if step == "op":
            ch.queue_declare(n, durable=True)
        elif step == "check":
            assert _exists(ch.connection, "queue", n), "declared queue lost"

    @staticmethod
    def queue_bind(ch, n, b, step):
        if step == "setup":
            ch.exchange_declare(n, "direct", durable=True)
            ch.queue_declare(n, durable=True)
        elif step == "op":
            ch.queue_bind(n, n, "k")
        else:
            ch.confirm_delivery()
            assert _routed(ch, n, "k"), "queue binding lost"

    @staticmethod
    def exchange_bind(ch, n, b, step):
        if step == "setup":
            ch.exchange_declare(n, "direct", durable=True)
            ch.exchange_declare(n + ".dst", "fanout", durable=True)
            ch.queue_declare(n, durable=True)
            ch.queue_bind(n, n + ".dst", "")
        elif step == "op":
            ch.exchange_bind(n + ".dst", n, "k")
        else:
            ch.confirm_delivery()
            assert _routed(ch, n, "k"), "exchange binding lost"

    @staticmethod
    def queue_unbind(ch, n, b, step):
        if step == "setup":
            _Ops.queue_bind(ch, n, b, "setup")
            ch.queue_bind(n, n, "k")
        elif step == "op":
            ch.queue_unbind(n, n, "k")
        else:
            ch.confirm_delivery()
            assert not _routed(ch, n, "k"), "unbound queue binding came back"

    @staticmethod
    def exchange_unbind(ch, n, b, step):
        if step == "setup":
            _Ops.exchange_bind(ch, n, b, "setup")
            ch.exchange_bind(n + ".dst", n, "k")
        elif step == "op":
            ch.exchange_unbind(n + ".dst", n, "k")
        else:
            ch.confirm_delivery()
            assert not _routed(ch, n, "k"), "unbound exchange binding came back"

    @staticmethod
    def queue_purge(ch, n, b, step):
        if step == "setup":
            ch.queue_declare(n, durable=True)
            _fill(ch, n)
        elif step == "op":
            ch.queue_purge(n)
        else:
            count = ch.queue_declare(n, passive=True).method.message_count
            assert count == 0, f"{count} purged messages came back"

    @staticmethod
    def queue_delete(ch, n, b, step):
        if step == "setup":
            ch.queue_declare(n, durable=True)
            _fill(ch, n)
        elif step == "op":
            ch.queue_delete(n)
        else:
            assert not _exists(ch.connection, "queue", n), "deleted queue came back"

    @staticmethod
    def exchange_delete(ch, n, b, step):
        if step == "setup":
            ch.exchange_declare(n, "topic", durable=True)
        elif step == "op":
            ch.exchange_delete(n)
        else:
            assert not _exists(ch.connection, "exchange", n), "deleted exchange came back"

    @staticmethod
    def set_policy(ch, n, b, step):
        from leveret.broker import control

        if step == "op":
            control.request(b.data_dir, {"command": "set_policy", "name": n, "pattern": "^" + n,
                                         "definition": {"max-length": 7}})
        elif step == "check":
            policies = control.request(b.data_dir, {"command": "list_policies"})
            assert n in [p["name"] for p in policies], "policy set with 'ok' lost"

    @staticmethod
    def clear_policy(ch, n, b, step):
        from leveret.broker import control

        if step == "setup":
            _Ops.set_policy(ch, n, b, "op")
        elif step == "op":
            control.request(b.data_dir, {"command": "clear_policy", "name": n})
        else:
            policies = control.request(b.data_dir, {"command": "list_policies"})
            assert n not in [p["name"] for p in policies], "cleared policy came back"


DEFINITION_OKS = [name for name in vars(_Ops) if not name.startswith("_")]
# Rounds per kind of -ok; more for a soak: LEVERET_OK_CRASH_ROUNDS=20 pytest -k after_ok
OK_CRASH_ROUNDS = int(os.environ.get("LEVERET_OK_CRASH_ROUNDS", "3"))


@pytest.mark.parametrize("kind", DEFINITION_OKS)
def test_definition_ok_survives_sigkill_right_after(make_broker, qname, kind):
    """SIGKILL at a random moment 0-3 ms after an "-ok" (or a control reply): after a
    restart, what the reply confirmed holds (declared/bound is there; deleted, unbound,
    purged, cleared is gone)."""
    scenario = getattr(_Ops, kind)
    rng = random.Random()
    b = make_broker()
    for round_ in range(OK_CRASH_ROUNDS):
        name = f"{qname}-{round_}"
        conn = connect(b)
        ch = conn.channel()
        scenario(ch, name, b, "setup")
        committed(conn, name)
        ch = conn.channel()
        scenario(ch, name, b, "op")
        time.sleep(rng.uniform(0, 0.003))
        b.stop(kill=True)
        b.start()
        conn = connect(b)
        scenario(conn.channel(), name, b, "check")
        conn.close()
