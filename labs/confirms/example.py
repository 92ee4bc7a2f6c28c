"""Publishing with and without publisher confirms, three ways.

    python example.py                # times one-at-a-time confirms vs a window of 100

Set AMQP_URL to use a broker other than amqp://guest:guest@localhost:5672/%2F.
"""

import os
import time

import pika

URL = os.environ.get("AMQP_URL", "amqp://guest:guest@localhost:5672/%2F")
PERSISTENT = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)


def publish_without_confirms(channel, queue, numbers):
    """Fire and forget: basic_publish returns once the bytes are in the socket."""
    for n in numbers:
        channel.basic_publish("", queue, str(n).encode(), PERSISTENT)


def publish_one_at_a_time(channel, queue, numbers):
    """Each basic_publish waits for the broker's basic.ack (or raises on basic.nack)."""
    channel.confirm_delivery()
    for n in numbers:
        channel.basic_publish("", queue, str(n).encode(), PERSISTENT)


def publish_with_window(url, queue, numbers, window, on_confirm=None):
    """Keep up to `window` messages unconfirmed; return (numbers confirmed, count sent).

    BlockingConnection can only wait per message, so this uses pika's callback API.
    """
    numbers = list(numbers)
    confirmed = set()
    unconfirmed = {}  # delivery tag -> message number
    sent = 0

    def on_open(connection):
        connection.channel(on_open_callback=on_channel)

    def on_channel(channel):
        channel.confirm_delivery(lambda frame: on_ack(channel, frame),
                                 callback=lambda _ok: publish_more(channel))

    def publish_more(channel):
        nonlocal sent
        while len(unconfirmed) < window and sent < len(numbers):
            channel.basic_publish("", queue, str(numbers[sent]).encode(), PERSISTENT)
            sent += 1
            unconfirmed[sent] = numbers[sent - 1]  # delivery tags count from 1
        if not unconfirmed:
            channel.connection.close()

    def on_ack(channel, frame):
        tag, acked = frame.method.delivery_tag, isinstance(frame.method, pika.spec.Basic.Ack)
        tags = [t for t in unconfirmed if t <= tag] if frame.method.multiple else [tag]
        for t in tags:
            n = unconfirmed.pop(t)
            if acked:
                confirmed.add(n)
        if on_confirm:
            on_confirm(len(confirmed))
        publish_more(channel)

    connection = pika.SelectConnection(
        pika.URLParameters(url), on_open_callback=on_open,
        on_open_error_callback=lambda conn, err: conn.ioloop.stop(),
        on_close_callback=lambda conn, reason: conn.ioloop.stop())
    connection.ioloop.start()
    return confirmed, sent


if __name__ == "__main__":
    with pika.BlockingConnection(pika.URLParameters(URL)) as conn:
        conn.channel().queue_declare("lab.confirms", durable=True)
        start = time.perf_counter()
        publish_one_at_a_time(conn.channel(), "lab.confirms", range(1000))
        print(f"one at a time: {time.perf_counter() - start:.2f} s for 1000")
    start = time.perf_counter()
    confirmed, sent = publish_with_window(URL, "lab.confirms", range(1000), window=100)
    print(f"window of 100: {time.perf_counter() - start:.2f} s for 1000")
