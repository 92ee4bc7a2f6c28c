"""Leveret: an AMQP 0-9-1 message broker in the RabbitMQ mould.

The repository's top-level folders are this package's subpackages:
``leveret.amqp`` (protocol core and server), ``leveret.exchanges`` (routing),
``leveret.queues`` (queues and consumer dispatch), ``leveret.persistence``
(message store), ``leveret.confirms`` (publisher confirms), and later
``leveret.management_ui`` and ``leveret.spark_sink``.
"""

from leveret.node import compiled as _compiled

__version__ = "0.1.0"

# LEVERET_NO_EXTENSIONS=1: the hot path's Python source even where compiled modules are
# installed; done here, before anything imports them.
_compiled.honour_env()
