"""The ready file: its document from the broker's listeners, and a write that a reader
never sees half done."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from leveret.node import ready_file

LISTENERS = [("amqp", "127.0.0.1", 40001), ("amqp", "::1", 40002),
             ("http", "127.0.0.1", 40003), ("http/prometheus", "127.0.0.1", 40004),
             ("spdy", "127.0.0.1", 9)]  # not a listener the file knows: ignored


def test_the_document_names_each_listeners_first_port() -> None:
    assert ready_file.ready_document(LISTENERS, 1234, "leveret@host") == {
        "amqp": 40001, "amqps": None, "management": 40003, "management_tls": None,
        "prometheus": 40004, "pid": 1234, "node": "leveret@host"}


def test_tls_listeners_have_their_own_keys() -> None:
    document = ready_file.ready_document(
        [("amqp/ssl", "127.0.0.1", 5671), ("https", "127.0.0.1", 15671)], 1, "n")
    assert (document["amqps"], document["management_tls"], document["amqp"]) == (5671, 15671, None)


def test_write_renames_a_whole_file_over_the_old_one(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ready.json"
    path.write_text("an earlier run's file")
    document = ready_file.ready_document(LISTENERS, 7, "leveret@host")
    seen: list[tuple[str, object]] = []
    real_replace = os.replace

    def replace(source: str, target: Path) -> None:
        # At the rename: the old file is still whole and the new one is already complete.
        seen.append((path.read_text(), json.loads(Path(source).read_text())))
        real_replace(source, target)

    monkeypatch.setattr(ready_file.os, "replace", replace)
    ready_file.write(path, document)
    assert seen == [("an earlier run's file", document)]
    assert json.loads(path.read_text()) == document
    assert os.listdir(tmp_path) == ["ready.json"]  # no temporary file left behind


def test_a_failed_write_leaves_neither_a_file_nor_a_temporary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full_disk(*_args: object, **_kw: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ready_file.json, "dump", full_disk)
    with pytest.raises(OSError):
        ready_file.write(tmp_path / "ready.json", ready_file.ready_document([], 1, "n"))
    assert os.listdir(tmp_path) == []


def test_remove_is_quiet_when_there_is_no_file(tmp_path: Path) -> None:
    ready_file.remove(tmp_path / "absent.json")
    (tmp_path / "there.json").write_text("{}")
    ready_file.remove(tmp_path / "there.json")
    assert os.listdir(tmp_path) == []


class FakeProcess:
    """A started broker that writes its file on the third look, or exits instead."""

    def __init__(self, path: Path, pid: int, exits: bool = False) -> None:
        self.path, self.pid, self.exits, self.looks = path, pid, exits, 0

    def poll(self) -> int | None:
        self.looks += 1
        if self.looks == 3:
            if self.exits:
                return 1
            ready_file.write(self.path, ready_file.ready_document(LISTENERS, self.pid, "n"))
        return None


def test_wait_skips_a_killed_brokers_file_for_its_own(tmp_path: Path) -> None:
    path = tmp_path / "ready.json"
    ready_file.write(path, ready_file.ready_document([], 99, "n"))  # a killed broker's
    process = FakeProcess(path, 100)
    document = ready_file.wait(path, process, timeout=3600)
    assert document is not None and (document["pid"], document["amqp"]) == (100, 40001)


def test_wait_gives_up_when_the_broker_exits(tmp_path: Path) -> None:
    path = tmp_path / "ready.json"
    assert ready_file.wait(path, FakeProcess(path, 100, exits=True), timeout=3600) is None


def test_ready_file_is_a_setting_like_the_others(tmp_path: Path) -> None:
    from leveret.config import load_config

    env = {"LEVERET_READY_FILE": str(tmp_path / "env.json")}
    assert load_config({}, env, None).ready_file == tmp_path / "env.json"
    flag = load_config({"ready_file": str(tmp_path / "flag.json")}, env, None)
    assert flag.ready_file == tmp_path / "flag.json"  # the flag wins, as for every setting
    assert load_config({}, {}, None).ready_file is None
