"""The management plane: RabbitMQ's management HTTP API and Prometheus metrics.

Theory of operation
-------------------
Two aiohttp applications run in-process on the broker's event loop
(``service.py``), on ``--management-port`` (15672) and ``--prometheus-port``
(15692). They read the broker model directly: counters are the plain
integers channels, connections and vhosts keep (``model/stats.py``), and a
sampler reads them every 5 s into small ring buffers for rates
(``sampler.py``). Nothing here runs per message; a request costs only what it
formats (``listing.py`` pages before formatting). Writes go through the
vhost operations API, so HTTP gets AMQP's rules and texts.

Layering: this package sits above ``node``, which cannot import it, so the entry
point (``cli.py``) passes ``services()`` to ``node.process.run``, which starts them
after the AMQP listeners and stops them before. Modules: ``router``
(route matching, auth, error shapes), ``api`` (the route table), ``read``, ``admin``,
``write``, ``definitions``, ``health``, ``views`` (object -> JSON),
``listing``, ``auth`` (the one seam to the user model), ``guard`` (cross-site writes,
content types, body size and slow connections, before routing), ``prometheus``,
``console`` (the web console's static files at ``/``).
"""

from __future__ import annotations

from typing import Any

from leveret.management_ui.service import ManagementService


def services() -> list[Any]:
    """What ``leveret serve`` runs beside the AMQP listeners."""
    return [ManagementService()]
