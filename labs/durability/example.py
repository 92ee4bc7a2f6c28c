"""Which messages survive a broker crash? Four queues, one message each.

    python example.py publish     # declare the 4 queues, publish 1 message to each
    kill -9 <broker pid>; start the broker again
    python example.py count       # what is left

Set AMQP_URL to use a broker other than amqp://guest:guest@localhost:5672/%2F.
"""

import os
import sys

import pika

URL = os.environ.get("AMQP_URL", "amqp://guest:guest@localhost:5672/%2F")

# (queue name, durable queue?, persistent message?)
CASES = [
    ("lab.durable-persistent", True, True),
    ("lab.durable-transient", True, False),
    ("lab.nondurable-persistent", False, True),
    ("lab.nondurable-transient", False, False),
]


def publish(channel, cases=CASES):
    channel.confirm_delivery()  # basic_publish now returns once the broker has the message
    for queue, durable, persistent in cases:
        channel.queue_declare(queue, durable=durable)
        mode = pika.DeliveryMode.Persistent if persistent else pika.DeliveryMode.Transient
        channel.basic_publish("", queue, b"hello", pika.BasicProperties(delivery_mode=mode))


def count(connection, queue):
    """Messages in the queue, or None if the queue itself is gone."""
    channel = connection.channel()  # a failed passive declare closes the channel
    try:
        return channel.queue_declare(queue, passive=True).method.message_count
    except pika.exceptions.ChannelClosedByBroker:  # 404 NOT_FOUND
        return None


if __name__ == "__main__":
    with pika.BlockingConnection(pika.URLParameters(URL)) as conn:
        if sys.argv[1:] == ["publish"]:
            publish(conn.channel())
            print("published and confirmed one message per queue")
        else:
            for queue, _, _ in CASES:
                print(queue, count(conn, queue))
