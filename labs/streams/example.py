"""A stream reader that starts where you tell it and prints each message's offset.

    python example.py STREAM [--offset first|last|next|N] [--work SECONDS]

Declares STREAM (x-queue-type: stream) if needed. Kill it (kill -9) in the middle, then start
it again with --offset one past the last offset it printed: it carries on where it stopped.
Set AMQP_URL to use a broker other than amqp://guest:guest@localhost:5672/%2F.
"""

import argparse
import os
import time

import pika

URL = os.environ.get("AMQP_URL", "amqp://guest:guest@localhost:5672/%2F")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("stream")
    parser.add_argument("--offset", default="first", help="first, last, next or a number")
    parser.add_argument("--work", type=float, default=0.0, help="seconds of work per message")
    args = parser.parse_args()
    offset = int(args.offset) if args.offset.isdigit() else args.offset

    connection = pika.BlockingConnection(pika.URLParameters(URL))
    channel = connection.channel()
    channel.queue_declare(args.stream, durable=True, arguments={"x-queue-type": "stream"})
    channel.basic_qos(prefetch_count=10)  # a stream needs a prefetch: it is the reader's credit

    def on_message(channel, method, properties, body):
        time.sleep(args.work)  # stands in for real work
        channel.basic_ack(method.delivery_tag)  # gives credit back; removes nothing
        at = properties.headers["x-stream-offset"]
        print(f"processed {body.decode()} offset={at}", flush=True)

    channel.basic_consume(args.stream, on_message, arguments={"x-stream-offset": offset})
    print("consuming", flush=True)
    channel.start_consuming()


if __name__ == "__main__":
    main()
