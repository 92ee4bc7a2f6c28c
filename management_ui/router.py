"""The management API's routes as one table, and the request/response plumbing.

aiohttp serves one catch-all route; ``Router`` matches the *raw* path split on
``/`` and percent-decoded per segment, because RabbitMQ's paths carry vhosts
as ``%2F`` (a decoded path would have an empty segment there). A route is
(method, pattern, handler, tag needed): ``ROUTES`` in ``api.py`` reads like
RabbitMQ's dispatcher. A write (PUT, POST, DELETE) answers only once the group
commit has written what it changed, so a crash after the answer keeps it; a
failed write answers 500 ``internal_server_error``. Errors are raised by name
(``ApiError`` or the broker model's ``ChannelError``) and shaped once, here, as
RabbitMQ shapes them:

=====  ==========================================================
401    a failed login: ``{"error":"not_authorized","reason":"Login failed"}``
       + ``WWW-Authenticate: Basic realm="RabbitMQ Management"``;
       empty body when no credentials were sent (as RabbitMQ)
401    a refusal after the login (no management tag, a tag the route
       needs, ``loopback_users``, vhost or object access; ``auth.py``):
       ``{"error":"not_authorised","reason":"Not administrator user"}``,
       British spelling and no ``WWW-Authenticate``, as RabbitMQ 3.10.8
400    empty, for Basic credentials that are not base64 ``user:password``
400    ``{"error":"bad_request","reason":...}``; AMQP texts as they are.
       Publish (and get's exclusive-queue refusal) answer with the
       channel's close reason, code first (``channel_closed``):
       ``404 NOT_FOUND - no exchange 'x' in vhost '/'``. A reason is
       sometimes an Erlang term as a JSON list: ``["not_int","priority"]``
401    ``{"error":"not_authorised","reason":"Access refused."}`` for an AMQP
       ACCESS_REFUSED (declaring ``amq.*``, a resource permission refused:
       ``rights.py``, which also has publish's and get's other shapes)
404    ``{"error":"Object Not Found","reason":"Not Found"}``; get and bind
       name what is missing: ``{"error":"not_found","reason":"no queue …"}``
405    ``{"error":"Method Not Allowed","reason":...}`` + ``Allow``
       (RabbitMQ sends an empty body; Leveret answers JSON everywhere)
403    ``{"error":"forbidden",...}``: a write from another Origin (``guard.py``)
408    ``{"error":"request_timeout",...}``: a body that stopped arriving
415    ``{"error":"Unsupported Media Type",...}``: a write's body not JSON
=====  ==========================================================
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote

from aiohttp import web

from leveret.management_ui import auth
from leveret.model.errors import ACCESS_REFUSED, NOT_FOUND, ChannelError, ConnectionError_

log = logging.getLogger(__name__)

REALM = 'Basic realm="RabbitMQ Management"'
# Routes that take credentials from ``?auth=<base64 user:password>`` (the UI's definitions
# download link and upload form cannot set a header). RabbitMQ 3.10.8 reads it on
# /api/definitions[/{vhost}] only, in preference to an Authorization header, and answers
# ?auth= elsewhere as no credentials (``test_management_columns.py``). Where Leveret
# differs: a ?auth= that is not base64 of user:password is the header's empty 400, where
# RabbitMQ answers an empty 500.
QUERY_AUTH = frozenset({"definitions"})
# Methods of the routes that change state: their answer waits for the commit (``_after_commit``).
WRITE_METHODS = frozenset({"PUT", "POST", "DELETE"})
COMMIT_FAILED = "the change was applied but could not be written to the message store"
BODY_TOO_LARGE = "Exceeded HTTP request body size limit"  # RabbitMQ 3.10.8's reason
# RabbitMQ's reason for a body that is JSON but a string, not an object.
JSON_STRING = ("invalid payload: the request body JSON-decoded to a string. "
               "Is the input doubly-JSON-encoded?")


class ApiError(Exception):
    def __init__(self, status: int, error: str, reason: str | list[Any]) -> None:
        super().__init__(reason)
        self.status = status
        self.error = error
        self.reason = reason


def bad_request(reason: str | list[Any]) -> ApiError:
    return ApiError(400, "bad_request", reason)


def not_found() -> ApiError:
    return ApiError(404, "Object Not Found", "Not Found")


def channel_closed(exc: ChannelError) -> ApiError:
    """400 with the close reason of the AMQP channel RabbitMQ's plugin ran the operation
    on, code first: ``406 PRECONDITION_FAILED - …`` (publish's answer to every refusal)."""
    return bad_request(f"{int(exc.code)} {exc.reply_text}")


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=json.dumps(data, separators=(",", ":"), default=str).encode(),
                        status=status, content_type="application/json", headers=headers)


def error_response(status: int, error: str, reason: str | list[Any],
                   headers: dict[str, str] | None = None) -> web.Response:
    return json_response({"error": error, "reason": reason}, status, headers)


@dataclass
class Request:
    """What a handler gets: the aiohttp request, path parameters, the user, the state."""

    http: web.Request
    params: dict[str, str]
    user: str
    tags: list[str]
    state: Any  # management_ui.service.State

    @property
    def query(self) -> Any:
        return self.http.query

    async def body(self) -> dict[str, Any]:
        """The JSON object body; ``{}`` when empty or ``null``; else RabbitMQ's 400s:
        ``not_json`` (not JSON, not UTF-8, nested past Python's recursion limit, not an
        object), ``JSON_STRING``, ``BODY_TOO_LARGE`` (a chunked body past the limit)."""
        data = parse_json(await self.http.read())
        if data is None:
            return {}
        if isinstance(data, str):
            raise bad_request(JSON_STRING)
        if not isinstance(data, dict):
            raise bad_request("not_json")
        return data


def parse_json(raw: bytes) -> Any:
    """``raw`` decoded; None when blank; ApiError ``not_json`` when it is not JSON."""
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise bad_request("not_json") from None


# The 400s a malformed body gets, logged in one line each (never a traceback).
CLIENT_BODY_ERRORS = frozenset({"not_json", "failed_to_parse_json", JSON_STRING})

Handler = Callable[[Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: tuple[str, ...]  # literal segments, or "{name}" for a parameter
    handler: Handler
    need: str | None  # tag needed (auth.MANAGEMENT...), None = no login at all
    vhost_rule: str  # who may name an existing {vhost} (auth.VHOST_RULES)


class Router:
    def __init__(self, routes: list[tuple[str, str, Handler, str | None]]) -> None:
        self.routes = [Route(m, tuple(p.strip("/").split("/")), h, n,
                             auth.VHOST_RULES.get(p.strip("/"), auth.ACCESS))
                       for m, p, h, n in routes]

    def match(self, method: str, segments: list[str]) -> tuple[Route, dict[str, str]] | list[str]:
        """The route and its parameters, or the methods allowed on this path ([] = none)."""
        allowed: list[str] = []
        for route in self.routes:
            params = _match(route.pattern, segments)
            if params is None:
                continue
            if route.method == method or (method == "HEAD" and route.method == "GET"):
                return route, params
            allowed.append(route.method)
        return allowed


def _match(pattern: tuple[str, ...], segments: list[str]) -> dict[str, str] | None:
    if len(pattern) != len(segments):
        return None
    params = {}
    for want, got in zip(pattern, segments):
        if want.startswith("{"):
            params[want[1:-1]] = got
        elif want != got:
            return None
    return params


def make_handler(router: Router, state: Any, prefix: str = "/api/") -> Callable[
        [web.Request], Awaitable[web.StreamResponse]]:
    """The aiohttp handler for everything under ``prefix``."""

    async def handle(request: web.Request) -> web.StreamResponse:
        raw = request.rel_url.raw_path
        if not raw.startswith(prefix):
            return error_response(404, "Object Not Found", "Not Found")
        segments = [unquote(s) for s in raw[len(prefix):].rstrip("/").split("/")]
        found = router.match(request.method, segments)
        if isinstance(found, list):
            if not found:
                return error_response(404, "Object Not Found", "Not Found")
            allow = ", ".join(sorted(set(found)))
            return error_response(405, "Method Not Allowed",
                                  f"{request.method} is not allowed here", {"Allow": allow})
        route, params = found
        user, tags = "", list[str]()
        if route.need is not None:
            header = request.headers.get("Authorization")
            if route.pattern[0] in QUERY_AUTH and "auth" in request.query:
                header = "Basic " + request.query["auth"]
            peer = request.transport.get_extra_info("peername") if request.transport else None
            try:
                login = auth.check_login(state.broker, state.config, header, peer)
            except auth.MalformedCredentials:
                return web.Response(status=400)  # as RabbitMQ (cowboy): empty
            if isinstance(login, auth.Refusal):
                state.auth_attempts(False)
                if header is None:
                    return web.Response(status=401, headers={"WWW-Authenticate": REALM})
                if login.failed:
                    return error_response(401, auth.NOT_AUTHORIZED, login.reason,
                                          {"WWW-Authenticate": REALM})
                return error_response(401, auth.NOT_AUTHORISED, login.reason)
            state.auth_attempts(True)
            user, tags = login
            refused = auth.refusal(state.broker, user, tags, route.need, route.vhost_rule,
                                   params.get("vhost"))
            if refused is not None:
                return error_response(401, auth.NOT_AUTHORISED, refused)
        response = await _dispatch(route, Request(request, params, user, tags, state), raw)
        if route.method in WRITE_METHODS:
            response = await _after_commit(state.broker.log, response, request.method, raw)
        return response

    return handle


async def _dispatch(route: Route, req: Request, raw: str) -> web.StreamResponse:
    """The handler's answer, or its error in RabbitMQ's shape."""
    try:
        return await route.handler(req)
    except ApiError as exc:
        if exc.status == 400 and isinstance(exc.reason, str) and exc.reason in CLIENT_BODY_ERRORS:
            log.info("management API %s %s: %s", req.http.method, raw, exc.reason)
        return error_response(exc.status, exc.error, exc.reason)
    except web.HTTPRequestEntityTooLarge:  # a chunked body past client_max_size
        log.warning("management API %s %s: %s", req.http.method, raw, BODY_TOO_LARGE)
        return error_response(400, "bad_request", BODY_TOO_LARGE)
    except ChannelError as exc:
        if exc.code == NOT_FOUND:
            return error_response(404, "Object Not Found", "Not Found")
        if exc.code == ACCESS_REFUSED:  # as RabbitMQ 3.10 ("amq.x", permissions)
            return error_response(401, auth.NOT_AUTHORISED, "Access refused.")
        return error_response(400, "bad_request", exc.detail)
    except ConnectionError_ as exc:  # what AMQP refuses by closing (a stream's purge): 400
        return error_response(400, "bad_request", exc.detail)
    except Exception as exc:  # a bug: the client still gets RabbitMQ's JSON shape
        log.exception("management API %s %s failed", req.http.method, raw)
        return error_response(500, "internal_server_error", str(exc) or type(exc).__name__)


class CommitLog(Protocol):
    """The group commit, as a write route waits for it (``persistence/group_commit.py``)."""

    async def committed(self) -> bool: ...


async def _after_commit(commit_log: CommitLog, response: web.StreamResponse, method: str,
                        raw: str) -> web.StreamResponse:
    """A write route answers once everything it recorded is committed, as AMQP's "-ok"s
    and ``leveret ctl`` do: a crash after the answer cannot undo what it reported. Its
    errors wait too (a refusal may follow a partial change). A failed write is a 500."""
    if await commit_log.committed():
        return response
    log.error("management API %s %s: the store could not write the change", method, raw)
    return error_response(500, "internal_server_error", COMMIT_FAILED)
