"""Publishing in AMQP transactions: tx.select once, then publish ... tx.commit.

    python example.py        # times a commit per message vs a commit per 100

Set AMQP_URL to use a broker other than amqp://guest:guest@localhost:5672/%2F.
"""

import os
import time

import pika

URL = os.environ.get("AMQP_URL", "amqp://guest:guest@localhost:5672/%2F")
PERSISTENT = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)


def publish_in_transactions(channel, queue, numbers, batch):
    """Commit every `batch` messages; tx_commit returns when the broker has them all."""
    channel.tx_select()  # once per channel: from now on publishes wait for a commit
    pending = 0
    for n in numbers:
        channel.basic_publish("", queue, str(n).encode(), PERSISTENT)
        pending += 1
        if pending == batch:
            channel.tx_commit()
            pending = 0
    if pending:
        channel.tx_commit()


def publish_then_roll_back(channel, queue, numbers):
    channel.tx_select()
    for n in numbers:
        channel.basic_publish("", queue, str(n).encode(), PERSISTENT)
    channel.tx_rollback()  # none of them is enqueued


if __name__ == "__main__":
    with pika.BlockingConnection(pika.URLParameters(URL)) as conn:
        conn.channel().queue_declare("lab.tx", durable=True)
        for batch in (1, 100):
            start = time.perf_counter()
            publish_in_transactions(conn.channel(), "lab.tx", range(1000), batch)
            print(f"commit every {batch}: {time.perf_counter() - start:.2f} s for 1000")
