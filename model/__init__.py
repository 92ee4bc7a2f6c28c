"""Domain types below everything else: what a message is, and the vocabulary shared by all.

``message`` (a published message with its properties kept as the publisher's
bytes), ``properties`` (the basic-properties codec for the slow paths),
``field_table`` (field tables that keep their wire types end to end), ``errors``
(AMQP reply codes and the errors raised by name everywhere) and ``stats``
(message and churn counters). Imports nothing else from Leveret, so
``persistence``, ``queues`` and ``exchanges`` depend on it and not on each other.
"""
