"""Policies set with ``leveret ctl`` on a running broker (subprocess), seen through pika."""

from __future__ import annotations

import subprocess
import sys
import time

import pika
import pytest


def ctl(broker, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "leveret", "ctl", "--data-dir", str(broker.data_dir),
                           *argv], check=False, capture_output=True, text=True, timeout=120)


def channel(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    return conn, conn.channel()


def wait_ready(ch, queue: str, count: int, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        got = ch.queue_declare(queue, passive=True).method.message_count
        if got == count or time.monotonic() > deadline:
            return got
        ch.connection.process_data_events(time_limit=0.02)


def test_set_list_clear_and_persistence_across_restart(make_broker, tmp_path):
    b = make_broker()
    r = ctl(b, "set_policy", "limits", "^jobs\\.", '{"max-length": 10, "message-ttl": 60000}',
            "--priority", "5", "--apply-to", "queues")
    assert r.returncode == 0, r.stderr
    assert r.stdout == ('Setting policy "limits" for pattern "^jobs\\." to '
                        '"{"max-length": 10, "message-ttl": 60000}" with priority "5" for vhost "/" ...\n')
    assert ctl(b, "set_policy", "ae", "^ex\\.", '{"alternate-exchange": "alt"}',
               "--apply-to", "exchanges").returncode == 0
    table = ('Listing policies for vhost "/" ...\n'
             "vhost\tname\tpattern\tapply-to\tdefinition\tpriority\n"
             '/\tae\t^ex\\.\texchanges\t{"alternate-exchange":"alt"}\t0\n'
             '/\tlimits\t^jobs\\.\tqueues\t{"max-length":10,"message-ttl":60000}\t5\n')
    assert ctl(b, "list_policies").stdout == table
    b.stop()
    b.start()  # same data dir
    assert ctl(b, "list_policies").stdout == table
    r = ctl(b, "clear_policy", "ae")
    assert r.returncode == 0 and r.stdout == 'Clearing policy "ae" on vhost "/" ...\n'
    b.stop()
    b.start()
    assert "\tae\t" not in ctl(b, "list_policies").stdout
    assert "\tlimits\t" in ctl(b, "list_policies").stdout


def test_refusals_and_no_broker(make_broker, tmp_path):
    b = make_broker()
    r = ctl(b, "set_policy", "bad", ".*", '{"max-length": -1}')
    assert r.returncode == 65
    assert r.stderr == "Error:\nValidation failed\n\n-1 is not a valid maximum length\n\n"
    r = ctl(b, "clear_policy", "never")
    assert (r.returncode, r.stderr) == (65, "Error:\nParameter does not exist\n")
    b.stop()
    r = ctl(b, "list_policies")
    assert r.returncode == 69 and "cannot reach a running broker" in r.stderr
    assert "Traceback" not in r.stderr


def test_alternate_exchange_policy_applies_at_once_and_the_argument_wins(make_broker):
    b = make_broker()
    conn, ch = channel(b)
    try:
        ch.exchange_declare("alt", "fanout")
        ch.queue_declare("alt-q")
        ch.queue_bind("alt-q", "alt")
        ch.exchange_declare("own-alt", "fanout")
        ch.queue_declare("own-alt-q")
        ch.queue_bind("own-alt-q", "own-alt")
        ch.exchange_declare("ex.before", "direct")
        ch.exchange_declare("ex.own", "direct", arguments={"alternate-exchange": "own-alt"})
        ch.confirm_delivery()
        assert ctl(b, "set_policy", "ae", "^ex\\.", '{"alternate-exchange": "alt"}',
                   "--apply-to", "exchanges").returncode == 0
        ch.exchange_declare("ex.after", "topic")  # declared after the policy
        for ex in ("ex.before", "ex.after", "ex.own"):
            ch.basic_publish(ex, "unbound", ex.encode(), mandatory=True)  # routed via an AE
        assert wait_ready(ch, "alt-q", 2) == 2
        assert wait_ready(ch, "own-alt-q", 1) == 1
        assert ctl(b, "clear_policy", "ae").returncode == 0
        with pytest.raises(pika.exceptions.UnroutableError):
            ch.basic_publish("ex.before", "unbound", b"x", mandatory=True)
    finally:
        conn.close()


def test_policy_limits_reach_queue_settings(make_broker):
    """max-length by policy on an existing queue, the lower of policy and argument winning."""
    b = make_broker()
    conn, ch = channel(b)
    try:
        ch.queue_declare("jobs.a")
        ch.queue_declare("jobs.b", arguments={"x-max-length": 2})
        ch.queue_declare("other")
        assert ctl(b, "set_policy", "lim", "^jobs\\.", '{"max-length": 3}').returncode == 0
        for q in ("jobs.a", "jobs.b", "other"):
            for i in range(5):
                ch.basic_publish("", q, str(i).encode())
        assert wait_ready(ch, "jobs.a", 3) == 3
        assert wait_ready(ch, "jobs.b", 2) == 2
        assert wait_ready(ch, "other", 5) == 5
        # drop-head: the newest survive
        assert [ch.basic_get("jobs.a", auto_ack=True)[2] for _ in range(3)] == [b"2", b"3", b"4"]
    finally:
        conn.close()


def test_ctl_compact_shrinks_the_store_and_keeps_its_contents(broker, qname):
    conn, ch = channel(broker)
    ch.queue_declare(qname, durable=True)
    ch.confirm_delivery()
    for i in range(300):
        ch.basic_publish("", qname, b"%d" % i + b"x" * 8000, pika.BasicProperties(delivery_mode=2))
    ch.queue_purge(qname)
    ch.basic_publish("", qname, b"kept", pika.BasicProperties(delivery_mode=2))
    r = ctl(broker, "compact")
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()
    assert first == "Compacting the message store ..."
    before, after = (int(n) for n in second.replace(" bytes", "").split(" -> "))
    assert after < before
    assert ch.basic_get(qname, auto_ack=True)[2] == b"kept"
    ch.basic_publish("", qname, b"after", pika.BasicProperties(delivery_mode=2))
    assert ch.basic_get(qname, auto_ack=True)[2] == b"after"
    conn.close()
