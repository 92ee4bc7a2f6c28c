"""The broker model: one home for every front door (AMQP, HTTP, ``leveret ctl``, metrics).

``broker`` (the node: vhosts, users, connections, alarms, recovery, counters),
``vhost`` (a virtual host's exchanges, queues and bindings, and the operations
on them: declare, bind, route, purge, delete, with RabbitMQ's checks),
``equivalence`` (redeclaration rules), ``control`` (the ``leveret ctl`` socket's
operations), ``alarms`` (memory and disk monitors), ``auth`` (SASL mechanisms
and the loopback rule), ``reply_to`` (direct reply-to) and ``publish_props``
(CC/BCC and reply-to rewriting of published properties). No protocol and no
I/O beyond the control socket: ``amqp`` calls in, never the other way round.
"""
