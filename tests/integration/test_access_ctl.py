"""``leveret ctl`` user/vhost/permission/limit commands, as rabbitmqctl prints them,
and a restart keeping all of it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pika
import pytest


def ctl(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "leveret", "ctl", "--data-dir", str(data_dir),
                           *args], capture_output=True, text=True, timeout=60)


def connect(port: int, user: str, password: str, vhost: str = "/") -> Any:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", port, vhost, pika.PlainCredentials(user, password), connection_attempts=1))


def test_ctl_commands_output_and_restart(make_broker: Any, tmp_path: Path) -> None:
    b = make_broker(tmp_path / "data")
    d = b.data_dir
    r = ctl(d, "add_user", "alice", "s3cret")
    assert (r.returncode, r.stdout) == (0, 'Adding user "alice" ...\n')
    r = ctl(d, "add_user", "alice", "x")
    assert (r.returncode, r.stderr) == (70, 'Error:\nUser "alice" already exists\n')
    assert ctl(d, "set_user_tags", "alice", "monitoring", "ops").stdout == (
        'Setting tags for user "alice" to [monitoring, ops] ...\n')
    assert ctl(d, "add_vhost", "prod", "--description", "Production", "--tags", "a,b",
               "--default-queue-type", "classic").returncode == 0
    r = ctl(d, "set_permissions", "-p", "prod", "alice", "^alice-", "^alice-", ".*")
    assert r.stdout == 'Setting permissions for user "alice" in vhost "prod" ...\n'
    assert ctl(d, "set_topic_permissions", "-p", "prod", "alice", "amq.topic", "^a", "^b"
               ).returncode == 0
    assert ctl(d, "set_vhost_limits", "-p", "prod", '{"max-queues": 5}').returncode == 0
    assert ctl(d, "set_user_limits", "alice", '{"max-connections": 3}').returncode == 0

    assert ctl(d, "list_users").stdout == (
        "Listing users ...\nuser\ttags\nguest\t[administrator]\nalice\t[monitoring, ops]\n")
    assert ctl(d, "list_vhosts", "name", "description", "tags", "default_queue_type").stdout == (
        "Listing vhosts ...\nname\tdescription\ttags\tdefault_queue_type\n"
        "/\tDefault virtual host\t[]\tundefined\nprod\tProduction\t[a, b]\tclassic\n")
    assert ctl(d, "list_permissions", "-p", "prod").stdout == (
        'Listing permissions for vhost "prod" ...\nuser\tconfigure\twrite\tread\n'
        "alice\t^alice-\t^alice-\t.*\n")
    assert json.loads(ctl(d, "list_user_permissions", "alice", "--json").stdout) == [
        {"vhost": "prod", "configure": "^alice-", "write": "^alice-", "read": ".*"}]
    assert ctl(d, "authenticate_user", "alice", "s3cret").stdout.endswith("Success\n")
    assert ctl(d, "authenticate_user", "alice", "nope").returncode == 65
    hashed = ctl(d, "hash_password", "pw").stdout.splitlines()
    assert hashed[0] == "Will hash password pw" and len(hashed[1]) == 48

    with connect(b.port, "alice", "s3cret", "prod") as conn:
        conn.channel().queue_declare("alice-q", durable=True)

    b.stop()
    b.start()
    assert "alice\t[monitoring, ops]" in ctl(d, "list_users").stdout
    assert ctl(d, "list_vhost_limits", "-p", "prod").stdout.endswith('{"max-queues":5}\n')
    assert ctl(d, "list_user_limits", "alice").stdout.endswith('{"max-connections":3}\n')
    assert "alice\tamq.topic\t^a\t^b" in ctl(d, "list_topic_permissions", "-p", "prod").stdout
    with connect(b.port, "alice", "s3cret", "prod") as conn:
        ch = conn.channel()
        assert ch.queue_declare("alice-q", passive=True).method.queue == "alice-q"
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.queue_declare("bob-q")
        assert info.value.reply_code == 403

    # Clearing limits, with rabbitmqctl's banners and its 69 when there is nothing to clear.
    cleared = ctl(d, "clear_user_limits", "alice", "max-connections")
    assert cleared.returncode == 0
    assert cleared.stdout.startswith('Clearing "max-connections" limit for user "alice" ...')
    assert ctl(d, "list_user_limits", "alice").stdout.endswith("{}\n")
    assert ctl(d, "clear_user_limits", "alice", "all").stdout.startswith(
        'Clearing all limits for user "alice" ...')
    assert ctl(d, "clear_vhost_limits", "-p", "prod").stdout.startswith(
        'Clearing vhost "prod" limits ...')
    again = ctl(d, "clear_vhost_limits", "-p", "prod")
    assert again.returncode == 69 and "Parameter does not exist" in again.stderr

    assert ctl(d, "change_password", "alice", "new").returncode == 0
    assert ctl(d, "clear_permissions", "-p", "prod", "alice").returncode == 0
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        connect(b.port, "alice", "new", "prod")
    assert ctl(d, "delete_vhost", "prod").returncode == 0
    assert ctl(d, "delete_user", "alice").returncode == 0
    assert ctl(d, "delete_user", "alice").returncode == 67


def test_fresh_data_dir_creates_default_user_and_vhost_from_config(make_broker: Any,
                                                                  tmp_path: Path) -> None:
    b = make_broker(tmp_path / "data", LEVERET_DEFAULT_USER="admin", LEVERET_DEFAULT_PASS="pw",
                    LEVERET_DEFAULT_VHOST="main")
    with connect(b.port, "admin", "pw", "main") as conn:
        conn.channel().queue_declare("", exclusive=True)
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        connect(b.port, "guest", "guest")
    log = b.log_text()
    assert "login refused for user 'guest': invalid credentials" in log


def test_node_connection_max(make_broker: Any, tmp_path: Path) -> None:
    """Over connection_max: 530 at connection.open (text as RabbitMQ's rabbit_reader; not
    compared live, the shared RabbitMQ cannot be restarted with the setting)."""
    b = make_broker(tmp_path / "data", LEVERET_CONNECTION_MAX="1")
    with connect(b.port, "guest", "guest"):
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
            connect(b.port, "guest", "guest")
        assert "node connection limit (1) is reached" in str(info.value)
    with connect(b.port, "guest", "guest"):  # the slot is free again
        pass
