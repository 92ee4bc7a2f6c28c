"""The control socket's access-control commands (rabbitmqctl's names and arguments).

Each command takes the request dict (``vhost`` defaults to ``/``) and returns
JSON-able data: ``None`` for actions, a list of row objects for ``list_*``
(the CLI prints them as rabbitmqctl's tab-separated table or as JSON). A
refusal raises ``AccountError``, whose text and exit code are rabbitmqctl's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from leveret.broker.accounts import AccountError, Accounts, vhost_record
from leveret.broker.users import SHA256, hash_password

Command = Callable[[dict[str, Any]], Any]


def commands(accounts: Accounts) -> dict[str, Command]:
    a = accounts

    def vh(r: dict[str, Any]) -> str:
        return str(r.get("vhost", "/"))

    def authenticate_user(r: dict[str, Any]) -> None:
        if a.authenticate(r["user"], r["password"]) is None:
            raise AccountError(f'Error: failed to authenticate user "{r["user"]}"\n'
                               f"user '{r['user']}' - invalid credentials", 65)

    def list_users(r: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"user": u.name, "tags": list(u.tags)} for u in a.users.values()]

    def list_vhosts(r: dict[str, Any]) -> list[dict[str, Any]]:
        return [vhost_record(v) for v in a.broker.vhosts.values()]

    def list_permissions(r: dict[str, Any]) -> list[dict[str, Any]]:
        a.vhost(vh(r))
        return [{k: v for k, v in p.record().items() if k != "vhost"}
                for p in a.control.of_vhost(vh(r))]

    def list_user_permissions(r: dict[str, Any]) -> list[dict[str, Any]]:
        a.user(r["user"])
        return [{k: v for k, v in p.record().items() if k != "user"}
                for p in a.control.of_user(r["user"])]

    def list_topic_permissions(r: dict[str, Any]) -> list[dict[str, Any]]:
        a.vhost(vh(r))
        return [{k: v for k, v in t.record().items() if k != "vhost"}
                for t in a.control.topics_of(vhost=vh(r))]

    def list_user_topic_permissions(r: dict[str, Any]) -> list[dict[str, Any]]:
        a.user(r["user"])
        return [{k: v for k, v in t.record().items() if k != "user"}
                for t in a.control.topics_of(user=r["user"])]

    def add_user(r: dict[str, Any]) -> None:
        a.add_user(r["user"], r.get("password"), r.get("tags", ()), r.get("password_hash"),
                   r.get("hashing_algorithm") or SHA256)

    def add_vhost(r: dict[str, Any]) -> None:
        a.add_vhost(vh(r), r.get("description", ""), r.get("tags", ()),
                    r.get("default_queue_type"))

    return {
        "add_user": add_user,
        "delete_user": lambda r: a.delete_user(r["user"]),
        "change_password": lambda r: a.change_password(r["user"], r["password"]),
        "clear_password": lambda r: a.change_password(r["user"], None),
        "authenticate_user": authenticate_user,
        "set_user_tags": lambda r: a.set_user_tags(r["user"], r.get("tags", [])),
        "list_users": list_users,
        "add_vhost": add_vhost,
        "delete_vhost": lambda r: a.delete_vhost(vh(r)),
        "list_vhosts": list_vhosts,
        "set_permissions": lambda r: a.set_permissions(r["user"], vh(r), r["configure"],
                                                       r["write"], r["read"]),
        "clear_permissions": lambda r: a.clear_permissions(r["user"], vh(r)),
        "list_permissions": list_permissions,
        "list_user_permissions": list_user_permissions,
        "set_topic_permissions": lambda r: a.set_topic_permissions(
            r["user"], vh(r), r["exchange"], r["write"], r["read"]),
        "clear_topic_permissions": lambda r: a.clear_topic_permissions(
            a.user(r["user"]).name, a.vhost(vh(r)).name, r.get("exchange")),
        "list_topic_permissions": list_topic_permissions,
        "list_user_topic_permissions": list_user_topic_permissions,
        "set_vhost_limits": lambda r: a.set_vhost_limits(vh(r), r["definition"]),
        "set_user_limits": lambda r: a.set_user_limits(r["user"], r["definition"]),
        "clear_vhost_limits": lambda r: a.clear_vhost_limits(vh(r)),
        "clear_user_limits": lambda r: a.clear_user_limits(r["user"], r["limit"]),
        "list_vhost_limits": lambda r: [{"vhost": vh(r), "limits": a.vhost(vh(r)).limits}],
        "list_user_limits": lambda r: [{"user": r["user"], "limits": a.user(r["user"]).limits}],
        "hash_password": lambda r: hash_password(r["password"]),
    }
