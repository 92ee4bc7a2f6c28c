"""A consumer that survives poison messages: delayed retries, then a dead-letter queue.

    python example.py        # declares the topology, publishes a good and a bad message,
                             # and consumes: the bad one is retried twice, then parked

Topology:  work --(reject)--> retry (TTL) --(expire)--> work ... --> dlq after MAX_ATTEMPTS
Set AMQP_URL to use a broker other than amqp://guest:guest@localhost:5672/%2F.
"""

import os

import pika

URL = os.environ.get("AMQP_URL", "amqp://guest:guest@localhost:5672/%2F")
MAX_ATTEMPTS = 3


def declare(channel, work, retry, dlq, delay_ms):
    """Rejected messages wait `delay_ms` in `retry`, then dead-letter back into `work`."""
    channel.queue_declare(dlq, durable=True)
    channel.queue_declare(retry, durable=True, arguments={
        "x-message-ttl": delay_ms,
        "x-dead-letter-exchange": "",          # the default exchange...
        "x-dead-letter-routing-key": work,     # ...routes by queue name
    })
    channel.queue_declare(work, durable=True, arguments={
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": retry,
    })


def attempts(properties):
    """How many times this message was rejected from a queue so far, from x-death."""
    deaths = (properties.headers or {}).get("x-death", [])
    return sum(d["count"] for d in deaths if d["reason"] == "rejected")


def handle(channel, method, properties, body, dlq):
    if body != b"poison":
        channel.basic_ack(method.delivery_tag)
        return "processed"
    if attempts(properties) + 1 >= MAX_ATTEMPTS:
        # Give up: park it for a human, keeping its headers (x-death tells its story).
        channel.basic_publish("", dlq, body, properties)
        channel.basic_ack(method.delivery_tag)
        return "parked"
    channel.basic_reject(method.delivery_tag, requeue=False)  # -> retry queue, after a delay
    return "retry later"


def explain_x_death(headers):
    """One line per field of each x-death entry (newest first, one entry per queue+reason)."""
    lines = []
    for i, death in enumerate(headers.get("x-death", [])):
        lines.append(f"x-death[{i}].queue        = {death['queue']}: the queue it died in")
        lines.append(f"x-death[{i}].reason       = {death['reason']}: rejected, expired, "
                     "maxlen or delivery_limit")
        lines.append(f"x-death[{i}].count        = {death['count']}: times it died there "
                     "for that reason")
        lines.append(f"x-death[{i}].exchange     = {death['exchange']!r}: where it had been "
                     "published")
        lines.append(f"x-death[{i}].routing-keys = {death['routing-keys']}: its routing keys "
                     "then")
        lines.append(f"x-death[{i}].time         = {death['time']}: when it first died there")
        if "original-expiration" in death:
            lines.append(f"x-death[{i}].original-expiration = {death['original-expiration']}: "
                         "its per-message TTL, removed so it does not expire again")
    return lines


if __name__ == "__main__":
    with pika.BlockingConnection(pika.URLParameters(URL)) as conn:
        ch = conn.channel()
        declare(ch, "lab.work", "lab.retry", "lab.dlq", delay_ms=1000)
        for body in (b"good", b"poison"):
            ch.basic_publish("", "lab.work", body, pika.BasicProperties(delivery_mode=2))

        def on_message(ch, method, properties, body):
            print(body, attempts(properties), handle(ch, method, properties, body, "lab.dlq"))

        ch.basic_consume("lab.work", on_message)
        conn.process_data_events(time_limit=2 * 1 + 1)  # two delays of 1 s, then parked
        method, properties, body = ch.basic_get("lab.dlq", auto_ack=True)
        if method:
            print("\n".join(explain_x_death(properties.headers)))
