"""A virtual host: its exchanges, queues and bindings (no I/O, no protocol).

Operations raise ``ChannelError`` with RabbitMQ's texts; checks that depend on
who is asking (exclusive-queue ownership) stay with the channel handlers.
Durable definitions, and durable queues' messages, are recorded through the
injected group commit (``log``).
"""

from __future__ import annotations

import logging
from typing import Any

from leveret.model.errors import (
    ACCESS_REFUSED,
    NOT_FOUND,
    PRECONDITION_FAILED,
    ChannelError,
)
from leveret.model.field_types import amqp_type_name
from leveret.broker.reply_to import ReplyTo
from leveret.exchanges import Exchange
from leveret.persistence.group_commit import GroupCommit
from leveret.persistence.store import BindingDef, ExchangeDef, PolicyDef, QueueDef
from leveret.queues.policy import Policy, PolicySet, alternate_exchange
from leveret.queues.queue import Queue
from leveret.queues.ttl import Timekeeping

log = logging.getLogger(__name__)

DEFAULT_EXCHANGES = (
    ("amq.direct", "direct"),
    ("amq.fanout", "fanout"),
    ("amq.topic", "topic"),
    ("amq.headers", "headers"),
    ("amq.match", "headers"),
)


class VirtualHost:
    def __init__(self, name: str, log: GroupCommit) -> None:
        self.name = name
        self.log = log
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, Queue] = {}
        self.policies = PolicySet()
        self.reply_to = ReplyTo()  # direct reply-to consumers
        # Clocks and timers of its queues (TTL, x-expires); the server sets the scheduler.
        self.time = Timekeeping(scheduler=log.loop)
        self.default_exchange = Exchange("", "direct", durable=True, vhost=name)
        self.exchanges[""] = self.default_exchange
        for ex_name, ex_type in DEFAULT_EXCHANGES:
            self.exchanges[ex_name] = Exchange(ex_name, ex_type, durable=True, vhost=name)

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
        existing = self.exchanges.get(name)
        if existing is not None:
            self._check_exchange_equivalent(existing, type_, durable, auto_delete, internal, arguments)
            return existing
        exchange = Exchange(name, type_, durable, auto_delete, internal, arguments, vhost=self.name)
        self.exchanges[name] = exchange
        if self.policies:
            exchange.policy_alternate_exchange = alternate_exchange(
                self.policies.for_exchange(name))
        if durable:
            self.log.put_exchange(ExchangeDef(self.name, name, type_, durable, auto_delete,
                                                internal, dict(arguments)))
        log.debug("declared %s", exchange)
        return exchange

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
        # Bindings where it is the source vanish with it; where it is a destination, unbind.
        for dest, _, _ in list(exchange.matcher.bindings()):
            exchange.matcher.remove_destination(dest)
        for ex in list(self.exchanges.values()):
            if ex.matcher.remove_destination(exchange):
                self._maybe_auto_delete(ex)
        if exchange.durable:
            self.log.delete_exchange(self.name, exchange.name)
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
            self.log.put_binding(self._binding_def(source, dest, routing_key, arguments))

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

    # -- queues -------------------------------------------------------------

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
        log.debug("deleted queue %r in vhost %r", queue.name, self.name)
        return count


    # -- policies -------------------------------------------------------------

    def set_policy(self, policy: Policy) -> None:
        """Add or replace a policy; it applies to existing entities at once."""
        self.policies.put(policy)
        self.log.put_policy(PolicyDef(self.name, policy.name, policy.pattern, policy.apply_to,
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
                exchange.policy_alternate_exchange = alternate_exchange(
                    self.policies.for_exchange(exchange.name))


# Arguments RabbitMQ compares when a queue or exchange is redeclared; others are ignored.
QUEUE_EQUIVALENCE_ARGS = (
    "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-expires", "x-max-length",
    "x-max-length-bytes", "x-max-priority", "x-message-ttl", "x-overflow", "x-queue-mode",
    "x-queue-type", "x-single-active-consumer", "x-delivery-limit", "x-queue-version",
    "x-queue-leader-locator", "x-max-age", "x-dead-letter-strategy",
)


def _shown(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def check_arguments_equivalent(
    names: tuple[str, ...], received: dict[str, Any], current: dict[str, Any], what: str
) -> None:
    for name in names:
        new, old = received.get(name), current.get(name)
        if _normalise(new) == _normalise(old):
            continue
        if new is not None and old is not None:
            # Both present: RabbitMQ's assert_field_equivalence shows bare values
            # ("received '1000' but current is '60000'"), with no type names.
            raise ChannelError(
                PRECONDITION_FAILED,
                f"inequivalent arg '{name}' for {what}: "
                f"received '{_shown(new)}' but current is '{_shown(old)}'")
        got = ("none" if new is None
               else f"the value '{_shown(new)}' of type '{amqp_type_name(new)}'")
        now = ("none" if old is None
               else f"the value '{_shown(old)}' of type '{amqp_type_name(old)}'")
        raise ChannelError(PRECONDITION_FAILED,
                           f"inequivalent arg '{name}' for {what}: received {got} but current is {now}")


def _normalise(value: object) -> object:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value
