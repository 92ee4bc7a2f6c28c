"""A virtual host: its exchanges, queues and bindings, and the operations on them.

This is the broker model's operations API for one vhost: declare, bind,
unbind, route, purge and delete, with RabbitMQ's checks and texts. Every front
door calls these (AMQP handlers, the control socket, later the HTTP API), so a
rule such as "inequivalent arg" or "exclusive queue locked" lives once. No I/O
and no protocol: operations raise ``ChannelError`` with RabbitMQ's texts, which
each front door maps to its own reply (channel.close, an HTTP 4xx). Who is
asking is an opaque ``owner`` (the AMQP connection) for exclusive queues.
Durable definitions, and durable queues' messages, are recorded through the
injected group commit (``log``).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from typing import Any, cast

from leveret.broker import limits, publishing
from leveret.broker.dedupe import DedupeStore, ExchangeDedupe, exchange_settings
from leveret.broker.delayed import Delays, check_declaration
from leveret.broker.equivalence import check_arguments_equivalent, queue_equivalence_args
from leveret.broker.reply_to import PREFIX as REPLY_TO_PREFIX
from leveret.broker.reply_to import ReplyTo
from leveret.exchanges import Exchange
from leveret.exchanges.router import Step, explain, route_message, routing_headers
from leveret.model.errors import (
    ACCESS_REFUSED,
    NOT_FOUND,
    PRECONDITION_FAILED,
    RESOURCE_LOCKED,
    ChannelError,
)
from leveret.model.message import Message
from leveret.model.stats import Churn, MessageStats
from leveret.persistence.group_commit import GroupCommit
from leveret.persistence.store import BindingDef, ExchangeDef, PolicyDef, QueueDef
from leveret.queues import queue_types
from leveret.queues.arguments import check_alternate_exchange, validate_queue_arguments
from leveret.queues.flavours import new_queue
from leveret.queues.paging import Paging
from leveret.queues.policy import Policy, PolicySet, alternate_exchange
from leveret.queues.queue import Queue
from leveret.queues.tracing import Tracer
from leveret.queues.ttl import Timekeeping

log = logging.getLogger(__name__)

# Names clients may not declare: RabbitMQ reserves them for itself.
RESERVED_PREFIX = "amq."

TRACE_EXCHANGE = "amq.rabbitmq.trace"
DEFAULT_EXCHANGES = (
    ("amq.direct", "direct"),
    ("amq.fanout", "fanout"),
    ("amq.topic", "topic"),
    ("amq.headers", "headers"),
    ("amq.match", "headers"),
)


class VirtualHost:
    def __init__(self, name: str, log: GroupCommit, paging: Paging | None = None) -> None:
        self.name = name
        self.log = log
        self.paging = paging if paging is not None else Paging()  # the broker's (paging.py)
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, Queue] = {}
        # Deduplication windows of the exchanges that have one, by name (broker/dedupe.py).
        self.dedupe: dict[str, ExchangeDedupe] = {}
        self.policies = PolicySet()
        # Metadata and limits (broker/accounts.py keeps them; RabbitMQ's vhost record).
        self.description = ""
        self.tags: tuple[str, ...] = ()
        self.default_queue_type: str | None = None
        self.limits: dict[str, int] = {}  # max-connections, max-queues (broker/limits.py)
        self.reply_to = ReplyTo()  # direct reply-to consumers
        self.tracer: Tracer | None = None  # set while traced (queues/tracing.py)
        # Counters: what closed channels left behind, and queue churn (model/stats.py).
        self.closed_channel_stats = MessageStats()
        self.churn = Churn()
        # Clocks and timers of its queues (TTL, x-expires); the server sets the scheduler.
        self.time = Timekeeping(scheduler=log.loop)
        self.delays = Delays(self, log)  # delayed exchanges' schedules (broker/delayed.py)
        self.default_exchange = Exchange("", "direct", durable=True, vhost=name)
        self.exchanges[""] = self.default_exchange
        for ex_name, ex_type in DEFAULT_EXCHANGES:
            self.exchanges[ex_name] = Exchange(ex_name, ex_type, durable=True, vhost=name)
        # RabbitMQ pre-declares its firehose exchange in every vhost (internal: clients may
        # bind to it but not publish to it). Leveret's tracing is its own (queues/tracing.py).
        self.exchanges[TRACE_EXCHANGE] = Exchange(TRACE_EXCHANGE, "topic", durable=True,
                                                  internal=True, vhost=name)

    # -- lookups ------------------------------------------------------------

    def describe_exchange(self, name: str) -> str:
        return f"exchange '{name}' in vhost '{self.name}'"

    def describe_queue(self, name: str) -> str:
        return f"queue '{name}' in vhost '{self.name}'"

    def get_exchange(self, name: str) -> Exchange:
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise ChannelError(NOT_FOUND, f"no {self.describe_exchange(name)}")
        return exchange

    def get_queue(self, name: str) -> Queue:
        queue = self.queues.get(name)
        if queue is None:
            raise ChannelError(NOT_FOUND, f"no {self.describe_queue(name)}")
        return queue

    # -- exchanges ----------------------------------------------------------

    def declare_exchange(
        self, name: str, type_: str, durable: bool, auto_delete: bool, internal: bool,
        arguments: dict[str, Any],
    ) -> Exchange:
        check_alternate_exchange(arguments, self.describe_exchange(name))
        existing = self.exchanges.get(name)
        if existing is not None:
            self._check_exchange_equivalent(existing, type_, durable, auto_delete, internal, arguments)
            return existing
        check_declaration(type_, arguments)
        dedupe = exchange_settings(type_, arguments, durable,  # 406 for a bad window
                                   self.policies.for_exchange(name) if self.policies else None)
        exchange = Exchange(name, type_, durable, auto_delete, internal, arguments, vhost=self.name)
        self.exchanges[name] = exchange
        if dedupe is not None:
            exchange.dedupe = self.dedupe[name] = ExchangeDedupe(dedupe, self.name, name,
                                                                 self.log, self.time)
        if self.policies:
            exchange.policy_alternate_exchange = alternate_exchange(
                self.policies.for_exchange(name))
        if durable:
            self.log.put_definition(ExchangeDef(self.name, name, type_, durable, auto_delete,
                                                internal, dict(arguments)))
        self.delays.declared(exchange)
        log.debug("declared %s", exchange)
        return exchange

    def recover_dedupe(self, exchange: Exchange, store: DedupeStore) -> None:
        """A recovered exchange's window, with its stored keys if it is durable."""
        try:
            settings = exchange_settings(exchange.type, exchange.arguments, exchange.durable,
                                         self.policies.for_exchange(exchange.name))
        except ChannelError as exc:  # stored by an older version that did not check
            log.warning("exchange %r: no deduplication window (%s)", exchange.name, exc)
            return
        if settings is not None:
            window = exchange.dedupe = self.dedupe[exchange.name] = ExchangeDedupe(
                settings, self.name, exchange.name, self.log, self.time)
            if settings.persistent:
                window.load(store)

    def _check_exchange_equivalent(
        self, ex: Exchange, type_: str, durable: bool, auto_delete: bool, internal: bool,
        arguments: dict[str, Any],
    ) -> None:
        def fail(arg: str, received: object, current: object) -> ChannelError:
            return ChannelError(
                PRECONDITION_FAILED,
                f"inequivalent arg '{arg}' for {self.describe_exchange(ex.name)}: "
                f"received '{received}' but current is '{current}'",
            )

        if ex.type != type_:
            raise fail("type", type_, ex.type)
        for arg, received, current in (
            ("durable", durable, ex.durable),
            ("auto_delete", auto_delete, ex.auto_delete),
            ("internal", internal, ex.internal),
        ):
            if received != current:
                raise fail(arg, str(received).lower(), str(current).lower())
        check_arguments_equivalent(
            ("alternate-exchange",), arguments, ex.arguments, self.describe_exchange(ex.name)
        )

    def delete_exchange(self, exchange: Exchange, if_unused: bool = False) -> None:
        # "Unused" means no bindings with it as the *source* (rabbit_binding
        # has_for_source): being the destination of an E2E binding does not count.
        if if_unused and len(exchange.matcher):
            raise ChannelError(PRECONDITION_FAILED, f"{self.describe_exchange(exchange.name)} in use")
        self._remove_exchange(exchange)

    def _remove_exchange(self, exchange: Exchange) -> None:
        if self.exchanges.get(exchange.name) is not exchange:
            return
        del self.exchanges[exchange.name]
        window = self.dedupe.pop(exchange.name, None)
        if window is not None:
            window.drop()
        # Bindings where it is the source vanish with it; where it is a destination, unbind.
        for dest, _, _ in list(exchange.matcher.bindings()):
            exchange.matcher.remove_destination(dest)
        for ex in list(self.exchanges.values()):
            if ex.matcher.remove_destination(exchange):
                self._maybe_auto_delete(ex)
        if exchange.durable:
            self.log.delete_exchange(self.name, exchange.name)
        self.delays.deleted(exchange)
        log.debug("deleted %s", exchange)

    def _maybe_auto_delete(self, exchange: Exchange) -> None:
        """Auto-delete exchanges go when their last (source-side) binding goes."""
        if exchange.auto_delete and not len(exchange.matcher):
            self._remove_exchange(exchange)

    # -- bindings -----------------------------------------------------------

    def bind(self, source: Exchange, dest: Exchange | Queue, routing_key: str,
             arguments: dict[str, Any]) -> None:
        self.check_not_default(source)
        source.matcher.validate_binding(routing_key, arguments)
        if source.matcher.bind(dest, routing_key, arguments) and source.durable and dest.durable:
            self.log.put_definition(self._binding_def(source, dest, routing_key, arguments))

    def unbind(self, source: Exchange, dest: Exchange | Queue, routing_key: str,
               arguments: dict[str, Any]) -> None:
        self.check_not_default(source)
        if source.matcher.unbind(dest, routing_key, arguments):
            if source.durable and dest.durable:
                self.log.delete_binding(self._binding_def(source, dest, routing_key, arguments))
            self._maybe_auto_delete(source)

    def check_not_default(self, exchange: Exchange) -> None:
        if exchange is self.default_exchange:
            raise ChannelError(ACCESS_REFUSED,
                               "operation not permitted on the default exchange")

    def _binding_def(self, source: Exchange, dest: Exchange | Queue, rk: str,
                     arguments: dict[str, Any]) -> BindingDef:
        kind = "exchange" if isinstance(dest, Exchange) else "queue"
        return BindingDef(self.name, source.name, dest.name, kind, rk, dict(arguments))

    def bindings_of(self, queue: Queue) -> list[tuple[Exchange, str, dict[str, Any]]]:
        return [(ex, rk, args) for ex in self.exchanges.values()
                for dest, rk, args in ex.matcher.bindings() if dest is queue]

    # -- routing --------------------------------------------------------------

    def route(self, message: Message, extra_routing_keys: tuple[str, ...] = ()) -> Sequence[Queue]:
        """The queues ``message`` goes to, through its exchange (basic.publish, HTTP publish).

        404 for an unknown exchange, 403 for an internal one. Direct reply-to
        names on the default exchange are delivered here and, as in RabbitMQ
        3.10, do not count as routes. Headers are decoded only when an exchange
        on the way may match on them; malformed properties raise ``ValueError``
        (the caller's protocol error).
        """
        name = message.exchange
        if not name:
            queue = self.queues.get(message.routing_key)
            if extra_routing_keys or (
                    queue is None and message.routing_key.startswith(REPLY_TO_PREFIX)):
                return self._route_default(message, extra_routing_keys)
            return (queue,) if queue is not None else ()
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise ChannelError(NOT_FOUND, f"no exchange '{name}' in vhost '{self.name}'")
        if exchange.internal:
            self.check_not_internal(exchange)
        # Matchers hold whatever was bound: in a vhost, queues and exchanges; the router
        # resolves exchanges, so what comes back are queues.
        return cast("Sequence[Queue]",
                    route_message(exchange, message, self.exchanges, extra_routing_keys))

    def publish_routed(self, message: Message, queues: Sequence[Queue],
                       deduplicate: bool = True) -> None:
        """A dead letter, routed by ``queues/dead_letter.py``, into ``queues``: the broker's
        publish without a publisher (not traced as a publish, no flow control), checked by
        the exchange's window if it has one. A delayed release (``deduplicate`` False) was
        checked when it was scheduled."""
        publishing.basic_publish(self, message, (), False, None, None, queues, deduplicate)

    def check_not_internal(self, exchange: Exchange) -> None:
        """An internal exchange takes no publishes: 403 (rabbit_channel check_internal_exchange)."""
        if exchange.internal:
            raise ChannelError(
                ACCESS_REFUSED,
                f"cannot publish to internal exchange '{exchange.name}' in vhost '{self.name}'")

    def explain_route(self, message: Message,
                      extra_routing_keys: tuple[str, ...] = ()) -> tuple[Step, ...]:
        """How ``route`` got there (after a successful ``route`` of the same message; message
        tracing only): the exchanges walked, how each was reached, what each matched."""
        exchange = self.exchanges[message.exchange]
        headers = routing_headers(exchange, message)
        return explain(exchange, message.routing_key, headers, self.exchanges.get,
                       extra_routing_keys)

    def _route_default(self, message: Message, extra: tuple[str, ...]) -> list[Queue]:
        """The default exchange with CC/BCC keys or direct reply-to names: each queue once."""
        queues: dict[str, Queue] = {}
        for key in dict.fromkeys((message.routing_key, *extra)):
            queue = self.queues.get(key)
            if queue is not None:
                queues[key] = queue
            elif key.startswith(REPLY_TO_PREFIX):
                self.reply_to.deliver(key, message)
        return list(queues.values())

    # -- queues -------------------------------------------------------------

    def declare_queue(
        self, name: str, *, durable: bool, exclusive: bool, auto_delete: bool,
        arguments: dict[str, Any], owner: Hashable | None = None, server_named: bool = False,
    ) -> tuple[Queue, bool]:
        """queue.declare (not passive): ``(queue, created)``.

        An existing queue must be usable by ``owner`` and equivalent to the
        request, and its new arguments are not validated (rabbit_channel); a new
        one passes argument and queue-type validation first. Exclusive + durable makes an exclusive transient queue,
        as in RabbitMQ.
        """
        if not server_named and name.startswith(RESERVED_PREFIX):
            raise ChannelError(ACCESS_REFUSED,
                               f"queue name '{name}' contains reserved prefix 'amq.*'")
        queue = self.queues.get(name)
        if queue is None:  # an existing queue's equivalence is checked, not the arguments
            validate_queue_arguments(arguments, self.describe_queue(name))
        self.churn.queue_declared += 1
        if queue is not None:
            self.check_exclusive(queue, owner)
            self._check_queue_equivalent(queue, durable, exclusive, auto_delete, arguments)
            return queue, False
        if "max-queues" in self.limits:
            limits.check_vhost_queues(self.limits, len(self.queues), name, self.name)
        if (self.default_queue_type and "x-queue-type" not in arguments and durable
                and not exclusive and not auto_delete and not server_named):
            # RabbitMQ's vhost default queue type applies to queues that could be of any type.
            arguments = {**arguments, "x-queue-type": self.default_queue_type}
        queue_types.check_declare(queue_types.queue_type(arguments), server_named=server_named,
                                  durable=durable, exclusive=exclusive, auto_delete=auto_delete,
                                  arguments=arguments, what=self.describe_queue(name))
        queue = new_queue(self, name, durable=durable and not exclusive,
                          exclusive_owner=owner if exclusive else None,
                          auto_delete=auto_delete, arguments=arguments)
        self.add_queue(queue)
        self.churn.queue_created += 1
        return queue, True

    def _check_queue_equivalent(self, queue: Queue, durable: bool, exclusive: bool,
                                auto_delete: bool, arguments: dict[str, Any]) -> None:
        if exclusive != queue.exclusive:
            raise ChannelError(RESOURCE_LOCKED, self._locked_text(queue))
        what = self.describe_queue(queue.name)
        for arg, received, current in (
            ("durable", durable and not exclusive, queue.durable),
            ("auto_delete", auto_delete, queue.auto_delete),
        ):
            if received != current:
                raise ChannelError(
                    PRECONDITION_FAILED,
                    f"inequivalent arg '{arg}' for {what}: received '{str(received).lower()}' "
                    f"but current is '{str(current).lower()}'",
                )
        names = queue_equivalence_args(queue_types.queue_type(queue.arguments))
        if queue_types.queue_type(arguments) == queue_types.queue_type(queue.arguments):
            # No x-queue-type means classic: 3.10 lets "classic" and none redeclare each other.
            names = tuple(n for n in names if n != "x-queue-type")
        check_arguments_equivalent(names, arguments, queue.arguments, what)

    def check_exclusive(self, queue: Queue, owner: Hashable | None) -> None:
        """Only the declaring connection may use an exclusive queue (405 for the others)."""
        if queue.exclusive_owner is not None and queue.exclusive_owner is not owner:
            raise ChannelError(RESOURCE_LOCKED, self._locked_text(queue))

    def _locked_text(self, queue: Queue) -> str:
        return (f"cannot obtain exclusive access to locked {self.describe_queue(queue.name)}. "
                "It could be originally declared on another connection or the exclusive "
                "property value does not match that of the original declaration.")

    def queue_for(self, name: str, owner: Hashable | None) -> Queue:
        """An existing queue that ``owner`` may use (404, 405 otherwise)."""
        queue = self.get_queue(name)
        self.check_exclusive(queue, owner)
        return queue

    def purge_queue(self, queue: Queue) -> int:
        """queue.purge: drop the ready messages; returns how many."""
        return queue.purge()

    def delete_queue_checked(self, queue: Queue, if_unused: bool, if_empty: bool) -> int:
        """queue.delete with its conditions (406 if they do not hold); returns the ready count."""
        if if_unused and queue.consumers:
            raise ChannelError(PRECONDITION_FAILED, f"{self.describe_queue(queue.name)} in use")
        if if_empty and queue.message_count:
            raise ChannelError(PRECONDITION_FAILED, f"{self.describe_queue(queue.name)} not empty")
        return self.delete_queue(queue)

    def add_queue(self, queue: Queue, qid: int = 0) -> None:
        """Register ``queue``; a durable one gets its store id (``qid`` when recovering)."""
        self.queues[queue.name] = queue
        if self.policies:
            queue.apply_settings(self.policies.for_queue(queue.name, queue.arguments))
        if queue.durable:
            if not qid:
                qid = self.log.put_queue(QueueDef(self.name, queue.name, True, queue.auto_delete,
                                                  dict(queue.arguments)))
            queue.qid = qid
            queue.log = self.log
        log.debug("declared %s", queue)

    def delete_queue(self, queue: Queue) -> int:
        """Remove ``queue``: unbind it, cancel its consumers; returns its ready count."""
        if self.queues.get(queue.name) is not queue:
            return 0
        del self.queues[queue.name]
        self.churn.queue_deleted += 1
        queue.deleted = True
        count = queue.purge()
        queue.release_flow(force=True)
        for ex in list(self.exchanges.values()):
            if ex.matcher.remove_destination(queue):
                self._maybe_auto_delete(ex)
        for consumer in queue.all_consumers():
            queue.remove_consumer(consumer)
            consumer.channel.consumer_cancelled_by_broker(consumer)
        if queue.durable:
            self.log.delete_queue(self.name, queue.name, queue.qid)
        queue.close()
        log.debug("deleted queue %r in vhost %r", queue.name, self.name)
        return count


    def delete_everything(self) -> None:
        """The vhost is being deleted: its queues, exchanges and policies go (and their records)."""
        for queue in list(self.queues.values()):
            self.delete_queue(queue)
        for exchange in list(self.exchanges.values()):
            if exchange is not self.default_exchange:
                self._remove_exchange(exchange)
        for policy in list(self.policies):
            self.clear_policy(policy.name)

    # -- policies -------------------------------------------------------------

    def set_policy(self, policy: Policy) -> None:
        """Add or replace a policy; it applies to existing entities at once."""
        self.policies.put(policy)
        self.log.put_definition(PolicyDef(self.name, policy.name, policy.pattern, policy.apply_to,
                                      dict(policy.definition), policy.priority))
        self.apply_policies()

    def clear_policy(self, name: str) -> bool:
        if self.policies.remove(name) is None:
            return False
        self.log.delete_policy(self.name, name)
        self.apply_policies()
        return True

    def apply_policies(self) -> None:
        """Recompute every queue's settings and exchange's policy AE (policies changed)."""
        for queue in self.queues.values():
            settings = self.policies.for_queue(queue.name, queue.arguments)
            if settings != queue.settings:
                queue.apply_settings(settings)
        for exchange in self.exchanges.values():
            if exchange is not self.default_exchange:  # no AE on the default exchange
                policy = self.policies.for_exchange(exchange.name)
                exchange.policy_alternate_exchange = alternate_exchange(policy)
                window = self.dedupe.get(exchange.name)
                if window is not None:  # the window keys the policy sets (broker/dedupe.py)
                    window.apply_policy(exchange.type, exchange.arguments, exchange.durable,
                                        policy)
