"""Users, vhosts, permissions and limits: the operations, persisted and recovered.

Theory of operation
-------------------
``Accounts`` is the broker model's access-control API: every front door
(``leveret ctl`` now, the HTTP API next) calls these operations, which check
their arguments with rabbitmqctl's texts (``AccountError``), change the
in-memory model (``users.py``, ``permissions.py``, the vhosts), record the
change in the store as an ``AccessDef`` in RabbitMQ's definitions format, and
push the consequence to live connections: new permissions reach open
channels at once, a deleted vhost closes its connections with 320.

Storage: one record per user (limits included), vhost (metadata and limits),
permission and topic permission. A store with none of them is a fresh data
dir: the default user (``default_user``/``default_pass``, tagged
administrator, full permissions) and vhost (``default_vhost``) are written to
it, as RabbitMQ does on first boot; otherwise the stored records replace the
defaults, so a deleted guest stays deleted.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from leveret.broker import limits as limits_
from leveret.broker.permissions import Access, AccessControl, Permission, TopicPermission
from leveret.broker.users import SHA256, User, parse_tags
from leveret.broker.vhost import VirtualHost
from leveret.model.errors import CONNECTION_FORCED
from leveret.persistence.store import AccessDef

if TYPE_CHECKING:
    from leveret.broker.broker import Broker

log = logging.getLogger(__name__)

# rabbitmqctl's exit codes for refusals: 65 data error, 67 no such user, 70 already exists.
EX_DATAERR, EX_NOUSER, EX_UNAVAILABLE, EX_SOFTWARE = 65, 67, 69, 70
DEFAULT_VHOST_DESCRIPTION = "Default virtual host"


class AccountError(Exception):
    """A refused operation: ``str()`` is rabbitmqctl's message, ``exit_code`` its status."""

    def __init__(self, message: str, exit_code: int = EX_DATAERR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Accounts:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.users: dict[str, User] = {}
        self.control = AccessControl()
        self.auth_attempts: Counter[str] = Counter()  # total / succeeded / failed
        config = broker.config
        self.users[config.default_user] = User(config.default_user, tags=("administrator",))
        self.users[config.default_user].set_password(config.default_pass)
        vhost = broker.vhosts[config.default_vhost]
        vhost.description = DEFAULT_VHOST_DESCRIPTION
        self.control.set(Permission(config.default_user, config.default_vhost, ".*", ".*", ".*"))

    # -- recovery -------------------------------------------------------------------

    def recover(self, records: list[AccessDef]) -> None:
        """Replace the defaults by the stored records, or store the defaults (fresh data dir)."""
        if not records:
            for user in self.users.values():
                self._put_user(user)
            for vhost in self.broker.vhosts.values():
                self._put_vhost(vhost)
            for p in self.control.permissions.values():
                self._put_permission(p)
            return
        self.users.clear()
        self.control = AccessControl()
        stored_vhosts = {r.record["name"]: r.record for r in records if r.kind == "vhost"}
        for name in list(self.broker.vhosts):
            if name not in stored_vhosts:
                del self.broker.vhosts[name]
        for name, doc in stored_vhosts.items():
            vhost = self.broker.vhosts.get(name) or self.broker.new_vhost(name)
            _apply_vhost_record(vhost, doc)
        for r in records:
            try:
                if r.kind == "user":
                    user = User.from_record(r.record)
                    self.users[user.name] = user
                elif r.kind == "permission":
                    d = r.record
                    self.control.set(Permission(d["user"], d["vhost"], d["configure"],
                                                d["write"], d["read"]))
                elif r.kind == "topic_permission":
                    self.control.set_topic(TopicPermission(**r.record))
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("skipping stored %s %r: %s", r.kind, r.key, exc)
        log.info("recovered %d user(s), %d vhost(s), %d permission(s)", len(self.users),
                 len(stored_vhosts), len(self.control.permissions))

    # -- authentication -------------------------------------------------------------

    def authenticate(self, name: str, password: str) -> User | None:
        """PLAIN/AMQPLAIN credentials: the user, or None (no user, no password, wrong one)."""
        user = self.users.get(name)
        if user is None or not user.check_password(password):
            return None
        return user

    def access_for(self, user: str, vhost: str) -> Access:
        return self.control.access(user, vhost)

    def own_rights(self, user: str) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
        """A user's own permissions and topic permissions, by vhost (what ``whoami`` shows
        them: their rights, so a console offers only what they may do; no one else's)."""
        perms = sorted(self.control.of_user(user), key=lambda p: p.vhost)
        topics = sorted(self.control.topics_of(user=user), key=lambda t: (t.vhost, t.exchange))
        return ([{k: v for k, v in p.record().items() if k != "user"} for p in perms],
                [{k: v for k, v in t.record().items() if k != "user"} for t in topics])

    # -- users ------------------------------------------------------------------------

    def user(self, name: str) -> User:
        user = self.users.get(name)
        if user is None:
            raise AccountError(f'User "{name}" does not exist', EX_NOUSER)
        return user

    def add_user(self, name: str, password: str | None = None, tags: Any = (),
                 password_hash: str | None = None, hashing_algorithm: str = SHA256) -> User:
        if name in self.users:
            raise AccountError(f'User "{name}" already exists', EX_SOFTWARE)
        if not name:
            raise AccountError("User name cannot be empty")
        user = User(name, tags=_tags(tags))
        if password_hash is not None:
            user = User.from_record({"name": name, "password_hash": password_hash,
                                     "hashing_algorithm": hashing_algorithm, "tags": user.tags})
        else:
            user.set_password(password)
        self.users[name] = user
        self._put_user(user)
        log.info("created user %r", name)
        return user

    def delete_user(self, name: str) -> None:
        self.user(name)
        del self.users[name]
        self.broker.log.delete_access("user", (name,))
        for p in self.control.of_user(name):
            self.clear_permissions(name, p.vhost, check=False)
        for t in self.control.topics_of(user=name):
            self.clear_topic_permissions(name, t.vhost, t.exchange)
        log.info("deleted user %r", name)

    def change_password(self, name: str, password: str | None) -> None:
        user = self.user(name)
        user.set_password(password)
        self._put_user(user)
        log.info("%s password of user %r", "changed" if password is not None else "cleared", name)

    def set_user_tags(self, name: str, tags: Any) -> None:
        user = self.user(name)
        user.tags = _tags(tags)
        self._put_user(user)

    def set_user_limits(self, name: str, limits: Any) -> None:
        user = self.user(name)
        try:
            user.limits = limits_.validate(limits, limits_.USER_LIMITS)
        except ValueError as exc:
            raise AccountError(f"Validation failed\n{exc}") from None
        self._put_user(user)

    def clear_user_limits(self, name: str, limit: str) -> None:
        """rabbitmqctl clear_user_limits USER LIMIT|all."""
        user = self.user(name)
        if limit == "all":
            user.limits = {}
        else:
            user.limits = {k: v for k, v in user.limits.items() if k != limit}
        self._put_user(user)

    def _put_user(self, user: User) -> None:
        self.broker.log.put_definition(AccessDef("user", (user.name,), user.record()))

    # -- vhosts -----------------------------------------------------------------------

    def vhost(self, name: str) -> VirtualHost:
        vhost = self.broker.vhosts.get(name)
        if vhost is None:
            raise AccountError(f"Virtual host '{name}' does not exist")
        return vhost

    def add_vhost(self, name: str, description: str = "", tags: Any = (),
                  default_queue_type: str | None = None) -> VirtualHost:
        """Idempotent, as rabbitmqctl add_vhost (metadata of an existing vhost is updated)."""
        if not name:
            raise AccountError("Virtual host name cannot be empty")
        parsed = _tags(tags)  # checked before anything changes
        if default_queue_type is not None and not isinstance(default_queue_type, str):
            raise AccountError(f"default_queue_type must be a string, not {default_queue_type!r}")
        vhost = self.broker.vhosts.get(name) or self.broker.new_vhost(name)
        vhost.description = description
        vhost.tags = parsed
        vhost.default_queue_type = default_queue_type
        self._put_vhost(vhost)
        log.info("added vhost %r", name)
        return vhost

    def delete_vhost(self, name: str) -> None:
        """Close its connections (320), delete everything in it, forget its permissions."""
        vhost = self.vhost(name)
        for conn in [c for c in self.broker.connections if c.vhost is vhost]:
            conn.close(CONNECTION_FORCED, f"vhost '{name}' is deleted")
        vhost.delete_everything()
        del self.broker.vhosts[name]
        self.broker.log.delete_access("vhost", (name,))
        for p in self.control.of_vhost(name):
            self.clear_permissions(p.user, name, check=False)
        for t in self.control.topics_of(vhost=name):
            self.clear_topic_permissions(t.user, name, t.exchange)
        log.info("deleted vhost %r", name)

    def set_vhost_limits(self, name: str, limits: Any) -> None:
        vhost = self.vhost(name)
        try:
            vhost.limits = limits_.validate(limits, limits_.VHOST_LIMITS)
        except ValueError as exc:
            raise AccountError(f"Validation failed\n{exc}") from None
        self._put_vhost(vhost)

    def clear_vhost_limits(self, name: str) -> None:
        """rabbitmqctl clear_vhost_limits: with none set, "Parameter does not exist" (69)."""
        vhost = self.vhost(name)
        if not vhost.limits:
            raise AccountError("Parameter does not exist", EX_UNAVAILABLE)
        vhost.limits = {}
        self._put_vhost(vhost)

    def _put_vhost(self, vhost: VirtualHost) -> None:
        self.broker.log.put_definition(AccessDef("vhost", (vhost.name,), vhost_record(vhost)))

    # -- permissions ----------------------------------------------------------------

    def _user_and_vhost(self, user: str, vhost: str) -> None:
        if user not in self.users:
            raise AccountError(f"User {user} does not exist", EX_NOUSER)
        if vhost not in self.broker.vhosts:
            raise AccountError(f"Virtual host {vhost} does not exist")

    def set_permissions(self, user: str, vhost: str, configure: str, write: str,
                        read: str) -> None:
        self._user_and_vhost(user, vhost)
        try:
            permission = Permission(user, vhost, configure, write, read)
        except ValueError as exc:
            raise AccountError(str(exc)) from None
        self.control.set(permission)
        self._put_permission(permission)
        self._refresh(user, vhost)

    def clear_permissions(self, user: str, vhost: str, check: bool = True) -> None:
        if check:
            self._user_and_vhost(user, vhost)
        if self.control.clear(user, vhost) is not None:
            self.broker.log.delete_access("permission", (user, vhost))
            self._refresh(user, vhost)

    def _put_permission(self, p: Permission) -> None:
        self.broker.log.put_definition(AccessDef("permission", (p.user, p.vhost), p.record()))

    def set_topic_permissions(self, user: str, vhost: str, exchange: str, write: str,
                              read: str) -> None:
        self._user_and_vhost(user, vhost)
        try:
            topic = TopicPermission(user, vhost, exchange, write, read)
        except ValueError as exc:
            raise AccountError(str(exc)) from None
        self.control.set_topic(topic)
        self.broker.log.put_definition(AccessDef("topic_permission", (user, vhost, exchange),
                                             topic.record()))
        self._refresh(user, vhost)

    def clear_topic_permissions(self, user: str, vhost: str, exchange: str | None = None) -> None:
        for topic in self.control.clear_topic(user, vhost, exchange):
            self.broker.log.delete_access("topic_permission", (user, vhost, topic.exchange))
        self._refresh(user, vhost)

    def _refresh(self, user: str, vhost: str) -> None:
        """Open channels of ``user`` in ``vhost`` drop their cached decisions."""
        for conn in self.broker.connections:
            if conn.user == user and conn.vhost is not None and conn.vhost.name == vhost:
                for channel in conn.channels.values():
                    channel.access = self.access_for(user, vhost)

    # -- limits at connection and channel open ------------------------------------------

    def check_connection(self, user: str, vhost: VirtualHost) -> None:
        """vhost and user max-connections (530), before the vhost permission check."""
        if "max-connections" in vhost.limits:
            count = sum(1 for c in self.broker.connections if c.vhost is vhost)
            limits_.check_vhost_connections(vhost.limits, count, vhost.name, user)
        record = self.users.get(user)
        if record is not None and "max-connections" in record.limits:
            count = sum(1 for c in self.broker.connections if c.user == user)
            limits_.check_user_connections(record.limits, count, user)

    def check_channel(self, user: str | None) -> None:
        record = self.users.get(user or "")
        if record is not None and "max-channels" in record.limits:
            count = sum(len(c.channels) for c in self.broker.connections if c.user == user)
            limits_.check_user_channels(record.limits, count, record.name)


def _tags(tags: Any) -> tuple[str, ...]:
    try:
        return parse_tags(tags)
    except ValueError as exc:
        raise AccountError(str(exc)) from None


def vhost_record(vhost: VirtualHost) -> dict[str, Any]:
    """RabbitMQ's definitions ``vhosts`` entry (plus ``limits``, which RabbitMQ keeps as
    the ``vhost-limits`` parameter)."""
    return {"name": vhost.name, "description": vhost.description, "tags": list(vhost.tags),
            "default_queue_type": vhost.default_queue_type, "limits": dict(vhost.limits)}


def _apply_vhost_record(vhost: VirtualHost, doc: dict[str, Any]) -> None:
    vhost.description = str(doc.get("description") or "")
    vhost.tags = parse_tags(doc.get("tags") or ())
    vhost.default_queue_type = doc.get("default_queue_type")
    vhost.limits = dict(doc.get("limits") or {})
