"""Users, permissions, limits and their persistence, as plain values (no server)."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest
from pamqp import commands

from leveret.amqp.connection import PROTOCOL_HEADER
from leveret.broker import limits
from leveret.broker.accounts import AccountError
from leveret.broker.auth import cert_user
from leveret.broker.broker import Broker
from leveret.broker.permissions import READ, WRITE, Access, Permission, TopicPermission
from leveret.broker.users import MD5, SHA512, User, check_password, hash_password
from leveret.config import Config
from leveret.model.errors import ChannelError, ConnectionError_
from leveret.persistence.memory import MemoryStore
from leveret.tests.unit.wire import Client


def test_hash_matches_rabbitmq_documentation_and_a_live_node() -> None:
    # passwords.md's example, and guest's hash exported from RabbitMQ 3.10.
    assert check_password("test12", "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR")
    assert check_password("guest", "xCs8BBL2gLkv35fbIgzI4UrqNcyzFImecxo7c5IMMnoNMZid")
    assert not check_password("guest2", "xCs8BBL2gLkv35fbIgzI4UrqNcyzFImecxo7c5IMMnoNMZid")


def test_hash_layout_is_salt_then_sha256_of_salt_and_password() -> None:
    raw = base64.b64decode(hash_password("secret", salt=b"\x01\x02\x03\x04"))
    assert raw == b"\x01\x02\x03\x04" + hashlib.sha256(b"\x01\x02\x03\x04secret").digest()
    assert hash_password("secret") != hash_password("secret")  # salted


@pytest.mark.parametrize("algorithm", [SHA512, MD5])
def test_imported_sha512_and_md5_hashes_verify(algorithm: str) -> None:
    user = User.from_record({"name": "u", "password_hash": hash_password("pw", algorithm),
                             "hashing_algorithm": algorithm, "tags": "a,b"})
    assert user.check_password("pw") and not user.check_password("px")
    assert user.tags == ("a", "b")


def test_empty_hash_never_matches() -> None:
    assert not User("u").check_password("")
    assert not check_password("x", "not base64!")


def test_patterns_are_unanchored_and_empty_means_nothing() -> None:
    p = Permission("u", "/", "q", "", ".*")
    assert p.allows("configure", "aqb")
    assert p.allows("write", "") and not p.allows("write", "x")
    with pytest.raises(ValueError, match="invalid regular expression"):
        Permission("u", "/", "(", ".*", ".*")


def test_patterns_match_in_linear_time_and_refuse_backtracking_features() -> None:
    # A backtracking engine takes 2**40 steps here: the check would never return.
    p = Permission("u", "/", "^(a+)+$", ".*", ".*")
    assert not p.allows("configure", "a" * 40 + "!")
    assert p.allows("configure", "aaa")
    with pytest.raises(ValueError, match="invalid regular expression"):
        Permission("u", "/", "(a)\\1", ".*", ".*")
    topic = TopicPermission("bob", "/", "amq.topic", "^(a+)+$", "^r")
    assert not topic.allows(WRITE, "a" * 40 + "!")


def test_access_caches_allowed_decisions_and_names_the_default_exchange() -> None:
    access = Access("u", "/", Permission("u", "/", "", "^w|^amq\\.default$", ""))
    access.check_publish("w1")
    access.check_publish("")
    assert access.writable == {"w1", ""}
    with pytest.raises(ChannelError) as info:
        access.check_publish("x")
    assert info.value.reply_text == ("ACCESS_REFUSED - access to exchange 'x' in vhost '/' "
                                     "refused for user 'u'")
    with pytest.raises(ChannelError):
        Access("u", "/", None).check(READ, "queue", "q")  # no permissions at all


def test_topic_permissions_expand_variables_and_are_per_exchange() -> None:
    topic = TopicPermission("bob", "/", "amq.topic", "^{username}\\.", "^r")
    access = Access("bob", "/", None, {"amq.topic": topic})
    access.check_topic(WRITE, "amq.topic", "bob.x")
    access.check_topic(WRITE, "other.topic", "anything")  # no topic permission there
    with pytest.raises(ChannelError, match=r"access to topic 'alice\.x' in exchange 'amq\.topic'"):
        access.check_topic(WRITE, "amq.topic", "alice.x")


def test_limits_texts_and_validation() -> None:
    with pytest.raises(ConnectionError_, match=r"connection limit \(2\) is reached"):
        limits.check_vhost_connections({"max-connections": 2}, 2, "v", "u")
    limits.check_vhost_connections({"max-connections": -1}, 99, "v", "u")  # -1: no limit
    with pytest.raises(ChannelError, match=r"queue limit in vhost 'v' \(0\) is reached"):
        limits.check_vhost_queues({"max-queues": 0}, 0, "q", "v")
    with pytest.raises(ValueError, match="Unrecognised terms"):
        limits.validate({"max-foo": 1}, limits.VHOST_LIMITS)


def _broker(store: MemoryStore, **config: object) -> Broker:
    broker = Broker(Config(**config), store)  # type: ignore[arg-type]
    broker.recover()
    return broker


def test_fresh_store_gets_the_default_user_and_vhost_from_config() -> None:
    store = MemoryStore()
    broker = _broker(store, default_user="admin", default_pass="s3", default_vhost="main")
    assert set(broker.vhosts) == {"main"}
    assert broker.accounts.authenticate("admin", "s3") is not None
    assert broker.users["admin"].tags == ("administrator",)
    assert broker.accounts.control.can_open("admin", "main")
    kinds = sorted(d.kind for d in store.load_definitions().access)
    assert kinds == ["permission", "user", "vhost"]


def test_everything_survives_a_restart_and_deleted_defaults_stay_deleted() -> None:
    store = MemoryStore()
    broker = _broker(store)
    a = broker.accounts
    a.add_user("bob", "pw", ["monitoring"])
    a.add_vhost("v2", "second", ["t"], "quorum")
    a.set_permissions("bob", "v2", "^c", "^w", "^r")
    a.set_topic_permissions("bob", "v2", "amq.topic", "^a", "^b")
    a.set_vhost_limits("v2", {"max-queues": 3})
    a.set_user_limits("bob", {"max-channels": 2})
    a.delete_user("guest")

    again = _broker(store)
    b = again.accounts
    assert set(b.users) == {"bob"}
    assert b.authenticate("bob", "pw") is not None
    assert again.users["bob"].tags == ("monitoring",) and again.users["bob"].limits == {
        "max-channels": 2}
    v2 = again.vhosts["v2"]
    assert (v2.description, v2.tags, v2.default_queue_type, v2.limits) == (
        "second", ("t",), "quorum", {"max-queues": 3})
    assert b.control.permissions["bob", "v2"].record()["write"] == "^w"
    assert [t.exchange for t in b.control.topics_of(user="bob")] == ["amq.topic"]
    assert not b.control.can_open("guest", "/")


def test_deleting_a_vhost_removes_its_objects_and_permissions_from_the_store() -> None:
    store = MemoryStore()
    broker = _broker(store)
    a = broker.accounts
    a.add_vhost("gone")
    a.set_permissions("guest", "gone", ".*", ".*", ".*")
    vhost = broker.vhosts["gone"]
    vhost.declare_queue("q", durable=True, exclusive=False, auto_delete=False, arguments={})
    vhost.declare_exchange("x", "direct", True, False, False, {})
    a.delete_vhost("gone")
    defs = store.load_definitions()
    assert not defs.queues and not defs.exchanges
    assert all("gone" not in d.key for d in defs.access)
    with pytest.raises(AccountError, match="Virtual host 'gone' does not exist"):
        a.delete_vhost("gone")


def test_account_errors_use_rabbitmqctl_texts_and_exit_codes() -> None:
    a = _broker(MemoryStore()).accounts
    with pytest.raises(AccountError) as info:
        a.add_user("guest", "x")
    assert (str(info.value), info.value.exit_code) == ('User "guest" already exists', 70)
    with pytest.raises(AccountError) as info:
        a.delete_user("nope")
    assert (str(info.value), info.value.exit_code) == ('User "nope" does not exist', 67)
    with pytest.raises(AccountError, match="Virtual host nope does not exist"):
        a.set_permissions("guest", "nope", ".*", ".*", ".*")


def test_default_queue_type_applies_to_durable_shared_queues() -> None:
    broker = _broker(MemoryStore())
    broker.accounts.add_vhost("dq", default_queue_type="quorum")
    vhost = broker.vhosts["dq"]
    q, _ = vhost.declare_queue("d", durable=True, exclusive=False, auto_delete=False, arguments={})
    assert q.arguments["x-queue-type"] == "quorum"
    q, _ = vhost.declare_queue("e", durable=False, exclusive=True, auto_delete=False, arguments={})
    assert "x-queue-type" not in q.arguments


# -- the handshake, sans IO (tests/unit/wire.py) ------------------------------------------

def only(frames: list[tuple[int, Any]], cls: type) -> Any:
    assert [type(f) for _, f in frames] == [cls], frames
    return frames[0][1]


def _start_ok(client: Any, mechanism: str, response: str) -> Any:
    return client.call(0, commands.Connection.StartOk(
        client_properties={"capabilities": {"authentication_failure_close": True}},
        mechanism=mechanism, response=response, locale="en_US"))


def test_failed_logins_are_counted_and_non_guest_users_may_log_in_remotely() -> None:
    client = Client(peer=("10.0.0.1", 4000))
    client.broker.accounts.add_user("bob", "pw")
    start = only(client.send(PROTOCOL_HEADER), commands.Connection.Start)
    assert start.mechanisms.split() == ["PLAIN", "AMQPLAIN"]  # no EXTERNAL without a cert
    only(_start_ok(client, "PLAIN", "\x00bob\x00pw"), commands.Connection.Tune)
    other = Client(broker=client.broker, peer=("10.0.0.1", 4001))
    other.send(PROTOCOL_HEADER)
    only(_start_ok(other, "PLAIN", "\x00bob\x00bad"), commands.Connection.Close)
    assert client.broker.accounts.auth_attempts == {"total": 2, "succeeded": 1, "failed": 1}


def test_external_is_offered_and_accepted_only_with_a_certificate_user() -> None:
    client = Client()
    client.broker.accounts.add_user("CN=svc,O=Acme")  # no password
    client.conn.peer_cert_user = "CN=svc,O=Acme"
    start = only(client.send(PROTOCOL_HEADER), commands.Connection.Start)
    assert start.mechanisms.split()[-1] == "EXTERNAL"
    only(_start_ok(client, "EXTERNAL", ""), commands.Connection.Tune)
    assert client.conn.user == "CN=svc,O=Acme"
    plain = Client(broker=client.broker)
    plain.send(PROTOCOL_HEADER)
    only(_start_ok(plain, "EXTERNAL", ""), commands.Connection.Close)


def test_certificate_user_as_distinguished_name_or_common_name() -> None:
    cert = {"subject": ((("countryName", "GB"),), (("organizationName", "Acme, Ltd"),),
                        (("commonName", "svc"),))}
    assert cert_user(cert) == "CN=svc,O=Acme\\, Ltd,C=GB"
    assert cert_user(cert, "common_name") == "svc"
    assert cert_user({}) is None
