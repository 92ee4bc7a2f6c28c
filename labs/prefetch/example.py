"""A worker that acks each message after working on it, with a prefetch limit.

    python example.py QUEUE --work 0.2 --prefetch 1     # a slow worker
    python example.py QUEUE --work 0.01 --prefetch 1    # a fast one, in another terminal

Set AMQP_URL to use a broker other than amqp://guest:guest@localhost:5672/%2F.
"""

import argparse
import os
import time

import pika

URL = os.environ.get("AMQP_URL", "amqp://guest:guest@localhost:5672/%2F")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("queue")
    parser.add_argument("--work", type=float, default=0.0, help="seconds of work per message")
    parser.add_argument("--prefetch", type=int, default=0, help="0 = unlimited")
    args = parser.parse_args()

    connection = pika.BlockingConnection(pika.URLParameters(URL))
    channel = connection.channel()
    # At most this many unacked messages on this channel; 0 means no limit.
    channel.basic_qos(prefetch_count=args.prefetch)

    def on_message(channel, method, properties, body):
        time.sleep(args.work)  # stands in for real work
        channel.basic_ack(method.delivery_tag)
        print(f"processed {body.decode()}", flush=True)

    channel.basic_consume(args.queue, on_message)
    print("consuming", flush=True)
    channel.start_consuming()


if __name__ == "__main__":
    main()
