"""What hostile clients cost the broker in memory (RSS), each case against a fresh Leveret
it starts and kills.

    python bench/hostile_figures.py noread          # confirm + 4 KB mandatory unroutable, never read
    python bench/hostile_figures.py tune_refused    # refused tune-ok, then publishes (BODY=65536 env
                                                    # for frames over the initial frame_max)
    python bench/hostile_figures.py frame_error_0   # bad frame end, heartbeat 0 (or frame_error_60)
    python bench/hostile_figures.py unacked         # 200k x 100 B, prefetch-0 consumer, never acks

``--base`` runs the Leveret found on PYTHONPATH=$LEVERET_BASE_PATH instead (for before/after).
Figures are RSS (VmRSS) of the broker process.
"""

import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import time

from pamqp import body as pbody
from pamqp import commands as spec
from pamqp import frame as pframe
from pamqp import header as pheader

BASE = "--base" in sys.argv
PY = sys.executable


def start():
    d = tempfile.mkdtemp(prefix="h17m-")
    env = dict(os.environ)
    # Free HTTP ports (a RabbitMQ may hold 15672/15692); older Leverets ignore these.
    env.update(LEVERET_MANAGEMENT_PORT="0", LEVERET_PROMETHEUS_PORT="0",
               LEVERET_MANAGEMENT_HOST="127.0.0.1")
    if BASE:
        env["PYTHONPATH"] = os.environ["LEVERET_BASE_PATH"]
    log = open(f"{d}/log", "wb")
    p = subprocess.Popen(
        [
            PY,
            "-m",
            "leveret",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--data-dir",
            f"{d}/data",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd="/tmp",
    )
    for _ in range(200):
        m = re.search(rb"on 127\.0\.0\.1:(\d+)", open(f"{d}/log", "rb").read())
        if m:
            return p, int(m.group(1)), f"{d}/log"
        time.sleep(0.05)
    raise SystemExit("no start")


def rss(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024


def m(ch, method):
    return pframe.marshal(method, ch)


def recv_until(s, name, buf=b""):
    while True:
        while len(buf) >= 8:
            size = struct.unpack(">I", buf[3:7])[0]
            if len(buf) < size + 8:
                break
            raw, buf = buf[: size + 8], buf[size + 8 :]
            _, _ch, f = pframe.unmarshal(raw)
            if getattr(f, "name", "") == name:
                return f, buf
        d = s.recv(65536)
        if not d:
            raise EOFError
        buf += d


def connect(port, heartbeat=0, frame_max=131072, open_=True):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"AMQP\x00\x00\x09\x01")
    _, buf = recv_until(s, "Connection.Start")
    s.sendall(
        m(
            0,
            spec.Connection.StartOk(
                client_properties={
                    "capabilities": {
                        "authentication_failure_close": True,
                        "publisher_confirms": True,
                    }
                },
                mechanism="PLAIN",
                response="\0guest\0guest",
            ),
        )
    )
    _, buf = recv_until(s, "Connection.Tune", buf)
    s.sendall(
        m(0, spec.Connection.TuneOk(channel_max=2047, frame_max=frame_max, heartbeat=heartbeat))
    )
    if open_:
        s.sendall(m(0, spec.Connection.Open(virtual_host="/")))
        _, buf = recv_until(s, "Connection.OpenOk", buf)
        s.sendall(m(1, spec.Channel.Open()))
        _, buf = recv_until(s, "Channel.OpenOk", buf)
    return s, buf


def publish_frames(ch, rk, body, mandatory=False, props=None):
    return (
        m(ch, spec.Basic.Publish(exchange="", routing_key=rk, mandatory=mandatory))
        + m(ch, pheader.ContentHeader(0, len(body), props or spec.Basic.Properties()))
        + m(ch, pbody.ContentBody(body))
    )


def flood(s, data, seconds, pid, cap_mb=1500):
    s.setblocking(False)
    sent = 0
    t0 = time.time()
    peak = 0
    view = memoryview(data)
    while time.time() - t0 < seconds:
        try:
            sent += s.send(view[sent % len(data) :])
        except BlockingIOError:
            time.sleep(0.005)
        except OSError as e:
            return sent, peak, f"socket error after {time.time() - t0:.2f}s: {e!r}"
        r = rss(pid)
        peak = max(peak, r)
        if r > cap_mb:
            return sent, peak, "cap reached"
    return sent, peak, "time"


which = sys.argv[1]
p, port, log = start()
try:
    r0 = rss(p.pid)
    if which == "noread":
        s, _ = connect(port)
        s.sendall(m(1, spec.Confirm.Select()))
        chunk = publish_frames(1, "no-such-queue", b"x" * 4096, mandatory=True) * 16
        sent, peak, why = flood(s, chunk, 3.4, p.pid)
        print(
            f"noread: RSS {r0} -> {rss(p.pid)} MB (peak {peak}) in 3.4 s, client sent {sent >> 20} MB ({why})"
        )
    elif which == "tune_refused":
        s, _ = connect(port, frame_max=1024, open_=False)
        chunk = publish_frames(1, "q", b"x" * int(os.environ.get("BODY", 4096))) * 16
        t0 = time.time()
        sent, peak, why = flood(s, chunk, 4.0, p.pid)
        print(
            f"tune_refused: RSS {r0} -> {rss(p.pid)} MB (peak {peak}) in 4 s, client sent {sent >> 20} MB ({why})"
        )
    elif which.startswith("frame_error"):
        hb = int(which.split("_")[-1])
        s, _ = connect(port, heartbeat=hb)
        s.sendall(struct.pack(">BHI", 1, 1, 4) + b"abcd" + b"\x00")
        t0 = time.time()
        s.settimeout(0.5)
        got = b""
        while time.time() - t0 < 75:
            try:
                d = s.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                print(f"{which}: socket reset after {time.time() - t0:.2f}s")
                break
            if not d:
                print(f"{which}: socket closed after {time.time() - t0:.2f}s")
                break
            got += d
        else:
            print(f"{which}: still open after 75 s")
    elif which == "unacked":
        N = 200000
        s, buf = connect(port)
        s.sendall(m(1, spec.Queue.Declare(queue="unacked-q")))
        _, buf = recv_until(s, "Queue.DeclareOk", buf)
        body = b"x" * 100
        for _i in range(0, N, 1000):
            s.sendall(publish_frames(1, "unacked-q", body) * 1000)
        s.sendall(m(1, spec.Queue.Declare(queue="unacked-q", passive=True)))
        f, buf = recv_until(s, "Queue.DeclareOk", buf)
        time.sleep(1.5)
        r1 = rss(p.pid)
        s.sendall(m(1, spec.Basic.Qos(prefetch_count=0)))
        _, buf = recv_until(s, "Basic.QosOk", buf)
        s.sendall(m(1, spec.Basic.Consume(queue="unacked-q")))
        # read everything: N deliveries
        need = N
        total = 0
        s.settimeout(5)
        count = 0
        data = buf
        while count < N:
            d = s.recv(1 << 20)
            data += d
            # count deliver frames cheaply
            while len(data) >= 8:
                size = struct.unpack(">I", data[3:7])[0]
                if len(data) < size + 8:
                    break
                if data[0] == 1 and data[7:11] == b"\x00\x3c\x00\x3c":
                    count += 1
                data = data[size + 8 :]
        time.sleep(1.5)
        r2 = rss(p.pid)
        print(
            f"unacked: {f.message_count} ready msgs of 100 B: RSS {r0} -> {r1} MB (ready) -> {r2} MB (all {N} delivered, unacked)"
        )
        print(
            f"  ready: {(r1 - r0) * 1048576 / N:.0f} B/msg; delivered-unacked extra: {(r2 - r1) * 1048576 / N:.0f} B/msg; total {(r2 - r0) * 1048576 / N:.0f} B/msg"
        )
finally:
    p.kill()
    p.wait()
