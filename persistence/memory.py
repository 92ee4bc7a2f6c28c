"""In-memory store: the ``Store`` interface with nothing kept across restarts."""

from __future__ import annotations

from leveret.persistence.store import (
    BindingDef,
    CommitCallback,
    Definitions,
    ExchangeDef,
    QueueDef,
)


class MemoryStore:
    def __init__(self) -> None:
        self.exchanges: dict[tuple[str, str], ExchangeDef] = {}
        self.queues: dict[tuple[str, str], QueueDef] = {}
        self.bindings: dict[tuple[str, ...], BindingDef] = {}

    def load_definitions(self) -> Definitions:
        return Definitions(list(self.exchanges.values()), list(self.queues.values()),
                           list(self.bindings.values()))

    def put_exchange(self, exchange: ExchangeDef) -> None:
        self.exchanges[exchange.vhost, exchange.name] = exchange

    def delete_exchange(self, vhost: str, name: str) -> None:
        self.exchanges.pop((vhost, name), None)
        self.bindings = {k: b for k, b in self.bindings.items()
                         if not (b.vhost == vhost and (b.source == name or (
                             b.destination_type == "exchange" and b.destination == name)))}

    def put_queue(self, queue: QueueDef) -> None:
        self.queues[queue.vhost, queue.name] = queue

    def delete_queue(self, vhost: str, name: str) -> None:
        self.queues.pop((vhost, name), None)
        self.bindings = {k: b for k, b in self.bindings.items()
                         if not (b.vhost == vhost and b.destination_type == "queue"
                                 and b.destination == name)}

    def put_binding(self, binding: BindingDef) -> None:
        self.bindings[_key(binding)] = binding

    def delete_binding(self, binding: BindingDef) -> None:
        self.bindings.pop(_key(binding), None)

    def commit(self, callback: CommitCallback | None = None) -> None:
        if callback is not None:
            callback(True)

    def close(self) -> None:
        pass


def _key(b: BindingDef) -> tuple[str, ...]:
    return (b.vhost, b.source, b.destination, b.destination_type, b.routing_key,
            repr(sorted(b.arguments.items())))
