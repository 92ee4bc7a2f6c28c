"""A consumer in three styles: auto-ack, manual ack, and one that never acks.

    python example.py QUEUE auto-ack|manual-ack|never-ack [--work SECONDS] [--prefetch N]

It prints one line per message. Kill it (kill -9) in the middle and look at the queue.
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
    parser.add_argument("mode", choices=["auto-ack", "manual-ack", "never-ack"])
    parser.add_argument("--work", type=float, default=0.0, help="seconds of work per message")
    parser.add_argument("--prefetch", type=int, default=0, help="0 = unlimited")
    args = parser.parse_args()

    connection = pika.BlockingConnection(pika.URLParameters(URL))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=args.prefetch)

    def on_message(channel, method, properties, body):
        if args.mode == "never-ack":
            print(f"received {body.decode()} redelivered={method.redelivered}", flush=True)
            return  # no ack: the broker keeps the message for us, unacked
        time.sleep(args.work)  # stands in for real work: a database write, an HTTP call
        if args.mode == "manual-ack":
            channel.basic_ack(method.delivery_tag)  # only now may the broker forget it
        print(f"processed {body.decode()} redelivered={method.redelivered}", flush=True)

    channel.basic_consume(args.queue, on_message, auto_ack=args.mode == "auto-ack")
    print("consuming", flush=True)
    channel.start_consuming()


if __name__ == "__main__":
    main()
