"""Resource permissions (configure / write / read) on the management API's write routes.

RabbitMQ's management plugin performs these operations over an AMQP
connection opened as the requesting user (``rabbit_mgmt_util:amqp_request``
and ``with_channel``), so the AMQP permission rules of
``broker/permissions.py`` apply, checked where ``rabbit_channel`` checks
them, and the channel error comes back through the HTTP layer in one of
three shapes. Observed on RabbitMQ 3.10.8 (user tagged ``management``,
permissions refused; ``tests/integration/test_management_permissions.py``):

=======================================  ===============================  ======================
route                                    needs                            refused
=======================================  ===============================  ======================
PUT /exchanges/{vh}/{x}                  configure x (new, with an AE:    401 ``not_authorised``
                                         also read x, write the AE)       ``Access refused.``
DELETE /exchanges/{vh}/{x}               configure x                      same (404 first)
PUT /queues/{vh}/{q}                     configure q (new, with a DLX:    same
                                         also read q, write the DLX)
DELETE /queues/{vh}/{q}                  configure q                      same (404 first)
DELETE /queues/{vh}/{q}/contents         read q                           same (404 first)
POST /bindings/{vh}/e/{s}/{q|e}/{d}      write d, read s (topic s: topic  same, before any 404
                                         read on the binding key)
DELETE /bindings/…/{props}               the same                         same (404 first)
POST /exchanges/{vh}/{x}/publish         write x (``amq.default`` for     400 ``bad_request``
                                         the default exchange; topic x:   ``403 ACCESS_REFUSED -
                                         topic write on the routing key)  access to …``
POST /queues/{vh}/{q}/get                read q                           401 ``not_authorised``
                                                                          ``ACCESS_REFUSED -
                                                                          access to …``
=======================================  ===============================  ======================

"404 first" is where RabbitMQ's ``resource_exists`` looks the object up
before the operation runs; elsewhere a refused name is refused whether or
not it exists, as on AMQP, and a missing object allowed is answered after
the check in the operation's own shape: bind 404 ``not_found`` ``no queue
'q' in vhost '/'``, publish 400 ``404 NOT_FOUND - no exchange …``, get 404
``not_found`` ``NOT_FOUND - no queue …`` (``write.post_binding``,
``basic.py``). Body validation (``not_json``, ``key_missing``,
an unknown exchange type) comes before the permission check, as in
RabbitMQ. Administrators get no exemption: RabbitMQ's tags decide which
routes a user may call, permissions what the operation may touch. An
administrator without permissions in the vhost may read it (``auth.py``),
but the channel it would act on does not open: 401 ``Access refused.``
(``channel_vhost`` for publish, get and the aliveness test; the checks
below refuse everything else with the same answer).

The 401 ``Access refused.`` shape is the router's answer to any
``ChannelError(ACCESS_REFUSED)``, so most routes just let ``Access.check``
raise; publish and get reshape it here. These checks cost a dictionary
lookup and a regex match per HTTP request; nothing here runs on the AMQP path.
"""

from __future__ import annotations

from typing import Any

from leveret.broker.permissions import CONFIGURE, READ, WRITE, Access
from leveret.management_ui.router import ApiError, Request, channel_closed, not_found
from leveret.model.errors import ChannelError

DEST_KIND = {"q": "queue", "e": "exchange"}  # a binding route's {kind} -> resource kind


def channel_vhost(req: Request) -> Any:
    """The path's vhost, where RabbitMQ's plugin opens a channel as the user (publish,
    get, the aliveness test): 401 ``Access refused.`` when the vhost does not exist or the
    user has no permissions there (an administrator the router let through)."""
    broker = req.state.broker
    vhost = broker.vhosts.get(req.params["vhost"])
    if vhost is None or not broker.accounts.control.can_open(req.user, vhost.name):
        raise ApiError(401, "not_authorised", "Access refused.")
    return vhost


def access_of(req: Request, vhost: str) -> Access:
    """The requesting user's rights in ``vhost``, as an AMQP channel of theirs has them."""
    access: Access = req.state.broker.accounts.access_for(req.user, vhost)
    return access


def check_declare(req: Request, vhost: Any, kind: str, name: str, linked: Any,
                  exists: bool) -> None:
    """exchange.declare / queue.declare: configure on the object; a new one naming an
    alternate exchange (exchange) or a dead-letter exchange (queue) also needs read on
    itself and write on that exchange (``rabbit_channel:check_{exchange,dlx}…``)."""
    access = access_of(req, vhost.name)
    access.check(CONFIGURE, kind, name)
    if not exists and isinstance(linked, str):
        access.check(READ, kind, name)
        access.check(WRITE, "exchange", linked)


def check_configure(req: Request, vhost: Any, kind: str, name: str) -> None:
    """exchange.delete / queue.delete: configure on the object."""
    access_of(req, vhost.name).check(CONFIGURE, kind, name)


def check_read(req: Request, vhost: Any, name: str) -> None:
    """queue.purge: read on the queue."""
    access_of(req, vhost.name).check(READ, "queue", name)


def check_binding(req: Request, vhost: Any, kind: str, dest: str, source: str) -> Access:
    """queue.bind / exchange.bind and their unbinds: write on the destination, read on
    the source. Returns the access for ``check_topic_binding``."""
    dest_kind = DEST_KIND.get(kind)
    if dest_kind is None:
        raise not_found()
    access = access_of(req, vhost.name)
    access.check(WRITE, dest_kind, dest)
    access.check(READ, "exchange", source)
    return access


def check_topic_binding(access: Access, source: Any, routing_key: str) -> None:
    """A topic exchange named in the user's topic permissions: read on the binding key."""
    if access.topics is not None and source.type == "topic":
        access.check_topic(READ, source.name, routing_key)


def check_publish(req: Request, vhost: Any, exchange: str) -> Access:
    """basic.publish: write on the exchange (``amq.default`` for the default one).

    RabbitMQ answers 400 with the channel's close reason, ``403 ACCESS_REFUSED - …``,
    even when the exchange does not exist (the check comes first)."""
    access = access_of(req, vhost.name)
    try:
        access.check(WRITE, "exchange", exchange)
    except ChannelError as exc:
        raise channel_closed(exc) from None
    return access


def check_topic_publish(access: Access, exchange: Any, routing_key: str) -> None:
    """A topic exchange named in the user's topic permissions: write on the routing key
    (400 ``403 ACCESS_REFUSED - access to topic …``, as RabbitMQ)."""
    if access.topics is None or exchange.type != "topic":
        return
    try:
        access.check_topic(WRITE, exchange.name, routing_key)
    except ChannelError as exc:
        raise channel_closed(exc) from None


def check_get(req: Request, vhost: Any, name: str) -> None:
    """basic.get: read on the queue, before it is looked up. RabbitMQ answers 401
    ``not_authorised`` with the close reason without its code."""
    try:
        access_of(req, vhost.name).check(READ, "queue", name)
    except ChannelError as exc:
        raise ApiError(401, "not_authorised", exc.reply_text) from None
