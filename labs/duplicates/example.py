"""A consumer with a side effect (a line in a ledger file), naive or idempotent.

    python example.py QUEUE LEDGER [--idempotent] [--crash-before-ack MESSAGE_ID]

--crash-before-ack stages the worst moment: the work is done, the ack not yet sent.
Set AMQP_URL to use a broker other than amqp://guest:guest@localhost:5672/%2F.
"""

import argparse
import os
import signal

import pika

URL = os.environ.get("AMQP_URL", "amqp://guest:guest@localhost:5672/%2F")


def already_done(ledger):
    """The message ids whose effect is in the ledger."""
    if not os.path.exists(ledger):
        return set()
    with open(ledger) as f:
        return {line.split()[0] for line in f}


def do_the_work(ledger, message_id, body):
    """The side effect: here, one line appended to a file (think: charge a card)."""
    with open(ledger, "a") as f:
        f.write(f"{message_id} {body.decode()}\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("queue")
    parser.add_argument("ledger")
    parser.add_argument("--idempotent", action="store_true")
    parser.add_argument("--crash-before-ack", metavar="MESSAGE_ID")
    args = parser.parse_args()

    connection = pika.BlockingConnection(pika.URLParameters(URL))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=1)

    def on_message(channel, method, properties, body):
        message_id = properties.message_id
        flag = f"redelivered={method.redelivered}"
        if args.idempotent and message_id in already_done(args.ledger):
            channel.basic_ack(method.delivery_tag)  # done before: just ack it again
            print(f"skipped {message_id} {flag} (already in the ledger)", flush=True)
            return
        do_the_work(args.ledger, message_id, body)
        if message_id == args.crash_before_ack:
            print(f"crash {message_id}: work done, ack not sent", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        channel.basic_ack(method.delivery_tag)
        print(f"processed {message_id} {flag}", flush=True)

    channel.basic_consume(args.queue, on_message)
    print("consuming", flush=True)
    channel.start_consuming()


if __name__ == "__main__":
    main()
