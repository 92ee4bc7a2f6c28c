"""The data dir holds persistent bodies: 0700, and its files 0600."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pika


def modes(data_dir: Path) -> dict[str, int]:
    out = {".": data_dir.stat().st_mode & 0o777}
    for path in data_dir.rglob("*"):
        out[str(path.relative_to(data_dir))] = path.stat().st_mode & 0o777
    return out


def test_data_dir_and_files_are_owner_only(make_broker: Any, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o755)  # as an older Leveret (or a careless operator) left it
    os.chmod(data_dir, 0o755)
    broker = make_broker(data_dir)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.queue_declare("perm-q", durable=True)
    ch.basic_publish("", "perm-q", b"secret", pika.BasicProperties(delivery_mode=2))
    conn.close()
    found = modes(data_dir)
    assert {"leveret.lock", "store", "store/data.mdb", "store/lock.mdb", "ctl.sock"} <= set(found)
    wrong = {name: oct(mode) for name, mode in found.items()
             if mode != (0o700 if (data_dir / name).is_dir() else 0o600)}
    assert not wrong
