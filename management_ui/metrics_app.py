"""The Prometheus listener's routes: ``/metrics``, ``/metrics/per-object`` and
``/metrics/detailed`` (``prometheus.py``, ``prometheus_detailed.py``).
Unauthenticated, as rabbitmq_prometheus."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from leveret.management_ui import prometheus, prometheus_detailed
from leveret.management_ui.prometheus import CONTENT_TYPE, Writer


def _text(text: str) -> web.Response:
    return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})


def build_app(state: Any) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        w = Writer()
        prometheus.write_node(w, state)
        prometheus.write_queues_aggregated(w, state)
        return _text(w.text())

    async def per_object(request: web.Request) -> web.Response:
        w = Writer()
        prometheus.write_node(w, state)
        prometheus.write_queues_per_object(w, state)
        prometheus.write_connections_channels(w, state)
        return _text(w.text())

    async def detailed(request: web.Request) -> web.Response:
        families = set(request.query.getall("family", []))
        vhosts = set(request.query.getall("vhost", [])) or None
        return _text(prometheus_detailed.write(state, families, vhosts))

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/metrics/per-object", per_object)
    app.router.add_get("/metrics/detailed", detailed)
    return app
