"""The node: one Leveret process, and what its front doors share.

Theory of operation
-------------------
``process.run`` is the composition root below the front doors: it locks the data dir,
opens the store and recovers the broker model, then starts the front doors it is handed
(``Service``s: the AMQP listeners of ``leveret.amqp.server``, the management API and
Prometheus of ``leveret.management_ui``) in order, the ``leveret ctl`` socket, the memory
and disk watchers (``watchers.py``) and the ready file (``ready_file.py``); on SIGINT or
SIGTERM it stops them last first and writes the store's last batch. The entry point
(``cli.py``) chooses the front doors. Both front doors import what they share from here:
``StartupError``, the ``Service`` seam, and the TLS contexts (``tls.py``).

Layering: ``node`` sits above ``broker`` and below ``amqp`` and ``management_ui``, so it
knows the broker model and the store, and no front door.
"""
