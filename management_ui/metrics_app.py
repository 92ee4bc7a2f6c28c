"""The Prometheus listener's routes: ``/metrics``, ``/metrics/per-object`` and
``/metrics/detailed`` (``prometheus.py``, ``prometheus_detailed.py``).

A scrape must not stop the broker, though anyone who reaches the port may ask for one
(unauthenticated, as rabbitmq_prometheus, unless ``prometheus_authentication``). So:

* it is rendered in slices (``prometheus_slices.py``) and streamed: what a slice wrote
  goes out as one chunk of a chunked response, and the loop runs between slices;
  memory holds the queue rows and a chunk, not the whole text (100,000 queues: about
  100 MB of text, once whole in a string and again encoded);
* one scrape per endpoint (path and query) renders at a time (``_Scrapes``), and the
  scrapers that arrive meanwhile share the next rendering: four scrapes at once cost two
  renderings, one after the other, with one's memory;
* a scraper that stops reading holds a rendering up for at most ``WRITE_TIMEOUT`` per
  chunk, then its connection is closed and the others go on.

``prometheus_authentication`` on: HTTP Basic against the broker's users, who must be
tagged ``monitoring`` or ``administrator``; anyone else gets a 401 with
``WWW-Authenticate``, a user without the tag too (with the management API's
``Not monitor user``), so that a scraper may retry with other credentials. RabbitMQ
3.10's endpoint has no such setting (always open; later RabbitMQs have one).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from leveret.broker import auth as broker_auth
from leveret.management_ui import auth, prometheus, prometheus_detailed
from leveret.management_ui.prometheus import CONTENT_TYPE, Writer
from leveret.management_ui.prometheus_slices import Render
from leveret.management_ui.router import error_response

if TYPE_CHECKING:  # service imports this module
    from leveret.management_ui.service import State

log = logging.getLogger(__name__)

# Text written before it is sent as a chunk (lines, about 60 bytes each: ~256 KB).
FLUSH_LINES = 4096
# Seconds one chunk may wait for a scraper that does not read before it is dropped.
WRITE_TIMEOUT = 60.0
REALM = 'Basic realm="RabbitMQ Prometheus"'
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _Scrape:
    """One rendering and the scrapers it answers: all that asked for the same thing while
    the one before it was rendering."""

    def __init__(self, http: web.Request, response: web.StreamResponse) -> None:
        self.members = [(http, response)]
        self.done = asyncio.Event()

    async def run(self, w: Writer, render: Render) -> None:
        """Run ``render`` slice by slice, sending what it wrote to every member in chunks of
        about ``FLUSH_LINES`` lines; a member that does not take a chunk is dropped. Logs
        (debug) the slices' count and the longest one's CPU time: how long it held the loop."""
        scrapers, slices, longest, sent = len(self.members), 0, 0.0, 0
        clock = time.thread_time  # the loop's thread: CPU held, not time waiting for a core
        started = clock()
        for _ in render:
            now = clock()
            slices += 1
            longest = max(longest, now - started)
            if len(w.lines) >= FLUSH_LINES:
                chunk = w.take()
                sent += len(chunk)
                await self._send(chunk)
                if not self.members:
                    return  # nobody left to render for
            else:
                await asyncio.sleep(0)
            started = clock()
        longest = max(longest, clock() - started)
        chunk = w.take()
        await self._send(chunk)
        await asyncio.gather(*(response.write_eof() for _, response in self.members),
                             return_exceptions=True)
        log.debug("Prometheus %s for %d scraper(s): %d bytes in %d slices, the longest "
                  "%.1f ms of CPU", self.members[0][0].path if self.members else "scrape",
                  scrapers, sent + len(chunk), slices + 1, longest * 1e3)

    async def _send(self, chunk: bytes) -> None:
        sent = await asyncio.gather(*(_write(http, response, chunk)
                                      for http, response in self.members))
        self.members = [member for member, ok in zip(self.members, sent) if ok]

    def abandon(self) -> None:
        """The rendering will not be whole: close the members' connections."""
        for http, _ in self.members:
            if http.transport is not None:
                http.transport.close()
        self.members = []


async def _write(http: web.Request, response: web.StreamResponse, chunk: bytes) -> bool:
    try:
        await asyncio.wait_for(response.write(chunk), WRITE_TIMEOUT)
    except TimeoutError:
        log.warning("Prometheus scrape of %s from %s dropped: not read for %g s",
                    http.path, http.remote, WRITE_TIMEOUT)
        if http.transport is not None:
            http.transport.close()
        return False
    except ConnectionResetError:  # the scraper went away
        return False
    return True


class _Scrapes:
    """One rendering per endpoint at a time; scrapers that arrive meanwhile share the next
    one (``_Scrape``), keyed by path and query."""

    def __init__(self) -> None:
        self._turns: dict[str, asyncio.Lock] = {}
        self._forming: dict[str, _Scrape] = {}

    async def serve(self, http: web.Request, prefix: str,
                    render: Callable[[Writer], Render]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": CONTENT_TYPE})
        await response.prepare(http)
        key = http.path_qs
        forming = self._forming.get(key)
        if forming is not None:
            forming.members.append((http, response))
            await forming.done.wait()
            return response
        scrape = self._forming[key] = _Scrape(http, response)
        try:
            async with self._turns.setdefault(key, asyncio.Lock()):
                del self._forming[key]  # later scrapers form the next one
                w = Writer(prefix)
                await scrape.run(w, render(w))
        except BaseException:  # cancelled, or a bug: no member may take a cut text as whole
            scrape.abandon()
            raise
        finally:
            if self._forming.get(key) is scrape:
                del self._forming[key]
            scrape.done.set()
        return response


def _refused(state: State, request: web.Request) -> web.Response | None:
    """None when the scrape may go on (authentication off, or a monitoring user)."""
    if not state.config.prometheus_authentication:
        return None
    header = request.headers.get("Authorization")
    peer = request.transport.get_extra_info("peername") if request.transport else None
    try:
        credentials = auth.parse_basic(header)
    except auth.MalformedCredentials:
        return web.Response(status=400)  # as the management API
    found = auth.authenticate(state.broker, *credentials) if credentials else None
    challenge = {"WWW-Authenticate": REALM}
    if found is None:
        state.auth_attempts(False)
        log.info("Prometheus scrape of %s from %s refused: %s", request.path, request.remote,
                 "login failed" if header else "no credentials")
        if header is None:
            return web.Response(status=401, headers=challenge)
        return error_response(401, auth.NOT_AUTHORIZED, auth.LOGIN_FAILED, challenge)
    state.auth_attempts(True)
    name, tags = found
    if name in state.config.loopback_users and not broker_auth.is_loopback(peer):
        reason = auth.LOOPBACK_ONLY
    elif not auth.allowed(tags, auth.MONITORING):
        reason = auth.REFUSED_TEXT[auth.MONITORING]
    else:
        return None
    log.info("Prometheus scrape of %s by %r refused: %s", request.path, name, reason)
    return error_response(401, auth.NOT_AUTHORISED, reason, challenge)


def build_app(state: State) -> web.Application:
    scrapes = _Scrapes()

    def endpoint(render: Callable[[web.Request, Writer], Render],
                 prefix: str = "rabbitmq_") -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            refused = _refused(state, request)
            if refused is not None:
                return refused
            return await scrapes.serve(request, prefix, lambda w: render(request, w))
        return handle

    def detailed(request: web.Request, w: Writer) -> Render:
        families = set(request.query.getall("family", []))
        vhosts = set(request.query.getall("vhost", [])) or None
        return prometheus_detailed.render(w, state, families, vhosts)

    app = web.Application()
    app.router.add_get("/metrics", endpoint(lambda _, w: prometheus.render_metrics(w, state)))
    app.router.add_get("/metrics/per-object", endpoint(
        lambda _, w: prometheus.render_per_object(w, state)))
    app.router.add_get("/metrics/detailed", endpoint(detailed, prometheus_detailed.PREFIX))
    return app
