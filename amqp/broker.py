"""The broker: virtual hosts, users and live connections, built from a Config."""

from __future__ import annotations

import logging
import socket
from typing import TYPE_CHECKING, Any

from leveret.amqp.vhost import VirtualHost
from leveret.persistence.memory import MemoryStore
from leveret.persistence.store import Store

if TYPE_CHECKING:
    from leveret.config import Config

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, config: Config, store: Store | None = None) -> None:
        self.config = config
        self.store: Store = store if store is not None else MemoryStore()
        self.cluster_name = f"leveret@{socket.gethostname()}"
        self.users: dict[str, str] = {config.default_user: config.default_pass}
        self.vhosts: dict[str, VirtualHost] = {
            config.default_vhost: VirtualHost(config.default_vhost, self.store)
        }
        self.connections: set[Any] = set()
        self.protocols: set[Any] = set()  # transports' adapters, for shutdown and alarms
        self.alarms: set[str] = set()

    def set_alarm(self, resource: str, active: bool) -> None:
        """Raise or clear a resource alarm; connections are (un)blocked accordingly."""
        if active == (resource in self.alarms):
            return
        if active:
            self.alarms.add(resource)
            log.warning("%s resource limit alarm set; publishers will be blocked", resource)
            for proto in list(self.protocols):
                proto.maybe_block()
        else:
            self.alarms.discard(resource)
            log.info("%s resource limit alarm cleared", resource)
            if not self.alarms:
                for proto in list(self.protocols):
                    proto.unblock()

    def close_all(self, text: str = "broker forced connection closure with reason 'shutdown'") -> None:
        for conn in list(self.connections):
            conn.close(text=text)
