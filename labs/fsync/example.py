"""How long does a confirm take, and how many confirms share one disk sync?

    python example.py        # 1,000 persistent messages with windows of 1, 10, 100, 1000

Set AMQP_URL to use a broker other than amqp://guest:guest@localhost:5672/%2F.
"""

import os
import time

import pika

URL = os.environ.get("AMQP_URL", "amqp://guest:guest@localhost:5672/%2F")
PERSISTENT = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)


def publish_with_window(url, queue, count, window):
    """Keep up to `window` persistent messages unconfirmed; return how many were confirmed."""
    unconfirmed = set()  # delivery tags
    state = {"sent": 0, "confirmed": 0}

    def publish_more(channel):
        while len(unconfirmed) < window and state["sent"] < count:
            channel.basic_publish("", queue, b"x" * 100, PERSISTENT)
            state["sent"] += 1
            unconfirmed.add(state["sent"])  # delivery tags count from 1
        if not unconfirmed:
            channel.connection.close()

    def on_confirm(channel, frame):
        tag = frame.method.delivery_tag
        done = {t for t in unconfirmed if t <= tag} if frame.method.multiple else {tag}
        unconfirmed.difference_update(done)
        state["confirmed"] += len(done)
        publish_more(channel)

    def on_channel(channel):
        channel.confirm_delivery(lambda frame: on_confirm(channel, frame),
                                 callback=lambda _ok: publish_more(channel))

    connection = pika.SelectConnection(
        pika.URLParameters(url),
        on_open_callback=lambda conn: conn.channel(on_open_callback=on_channel),
        on_open_error_callback=lambda conn, err: conn.ioloop.stop(),
        on_close_callback=lambda conn, reason: conn.ioloop.stop())
    connection.ioloop.start()
    return state["confirmed"]


if __name__ == "__main__":
    with pika.BlockingConnection(pika.URLParameters(URL)) as conn:
        conn.channel().queue_declare("lab.fsync", durable=True)
    for window in (1, 10, 100, 1000):
        start = time.perf_counter()
        publish_with_window(URL, "lab.fsync", 1000, window)
        per_message = (time.perf_counter() - start) / 1000
        print(f"window {window:>4}: {per_message * 1e6:7.0f} us per message, "
              f"a confirm takes about {window * per_message * 1e3:.1f} ms")
