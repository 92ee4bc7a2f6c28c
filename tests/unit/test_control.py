"""The control protocol (amqp/control.py) and ``leveret ctl`` output, without a broker process."""

from __future__ import annotations

import asyncio
import io
import json
import os
import stat
from pathlib import Path

import pytest

from leveret.broker import control, import_slices
from leveret.broker.broker import Broker
from leveret.cli import main
from leveret.config import Config
from leveret.ctl_objects import cell, format_rows


@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    return Broker(Config(data_dir=tmp_path))


def call(handler: control.ControlHandler, **request: object) -> dict:
    return json.loads(handler.handle_line(json.dumps(request).encode() + b"\n"))


def test_set_list_clear(broker):
    h = control.ControlHandler(broker)
    assert call(h, command="list_policies", vhost="/") == {"ok": True, "result": []}
    assert call(h, command="set_policy", vhost="/", name="p", pattern="^q",
                definition={"max-length": 3}, priority=2, apply_to="queues") == {
        "ok": True, "result": None}
    assert call(h, command="list_policies") == {"ok": True, "result": [
        {"vhost": "/", "name": "p", "pattern": "^q", "apply-to": "queues",
         "definition": {"max-length": 3}, "priority": 2}]}
    assert call(h, command="clear_policy", vhost="/", name="p")["ok"]
    assert call(h, command="clear_policy", vhost="/", name="p") == {
        "ok": False, "error": "Parameter does not exist"}


def test_refusals(broker):
    h = control.ControlHandler(broker)
    bad = call(h, command="set_policy", name="p", pattern=".*", definition={"max-length": -1})
    assert bad == {"ok": False, "error": "Validation failed\n\n-1 is not a valid maximum length\n"}
    assert call(h, command="list_policies", vhost="nope") == {
        "ok": False, "error": "Virtual host 'nope' does not exist"}
    assert call(h, command="frobnicate")["error"] == "unknown command 'frobnicate'"
    assert call(h, command="set_policy")["error"].startswith("malformed request")
    assert json.loads(h.handle_line(b"not json\n"))["error"].startswith("malformed request")
    assert json.loads(h.handle_line(b"[1]\n"))["error"].startswith("malformed request")


async def test_socket_round_trip_and_cli_output(broker, tmp_path, capsys):
    server = await control.start_server(broker, tmp_path)
    try:
        sock = control.socket_path(tmp_path)
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600

        def ctl(*argv: str) -> tuple[int, str, str]:
            out, err = io.StringIO(), io.StringIO()
            code = main(["ctl", "--data-dir", str(tmp_path), *argv], env={}, stdout=out, stderr=err)
            return code, out.getvalue(), err.getvalue()

        code, out, err = await asyncio.to_thread(
            ctl, "set_policy", "lim", "^lim-", '{"max-length": 2}', "--priority", "1",
            "--apply-to", "queues")
        assert (code, err) == (0, "")
        assert out == ('Setting policy "lim" for pattern "^lim-" to "{"max-length": 2}" with '
                       'priority "1" for vhost "/" ...\n')
        code, out, err = await asyncio.to_thread(ctl, "list_policies")
        assert code == 0
        assert out == ('Listing policies for vhost "/" ...\n'
                       "vhost\tname\tpattern\tapply-to\tdefinition\tpriority\n"
                       '/\tlim\t^lim-\tqueues\t{"max-length":2}\t1\n')
        code, out, err = await asyncio.to_thread(ctl, "set_policy", "x", ".*", "{bad")
        assert code == 65 and err.startswith("Error:\nJSON decoding error")
        code, out, err = await asyncio.to_thread(ctl, "clear_policy", "missing")
        assert code == 65 and err == "Error:\nParameter does not exist\n"
        code, out, err = await asyncio.to_thread(ctl, "clear_policy", "lim")
        assert code == 0 and out == 'Clearing policy "lim" on vhost "/" ...\n'
        assert broker.vhosts["/"].policies.by_name == {}
    finally:
        server.close()
        await server.wait_closed()


async def test_long_socket_paths_work(broker, tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    server = await control.start_server(broker, deep)
    try:
        result = await asyncio.to_thread(control.request, deep, {"command": "list_policies"})
        assert result == []
    finally:
        server.close()
        await server.wait_closed()


def test_unreachable_broker(tmp_path):
    err = io.StringIO()
    code = main(["ctl", "list_policies", "--data-dir", str(tmp_path)], env={},
                stdout=io.StringIO(), stderr=err)
    assert code == 69
    assert "cannot reach a running broker" in err.getvalue()
    assert str(tmp_path / "ctl.sock") in err.getvalue()
    # A stale socket file (broker crashed) is "not running" too, not a traceback.
    import socket

    s = socket.socket(socket.AF_UNIX)
    s.bind(str(tmp_path / "ctl.sock"))
    s.close()
    with pytest.raises(control.BrokerUnreachable):
        control.request(tmp_path, {"command": "list_policies"})


def test_ctl_table_cells_are_written_as_rabbitmqctl_writes_them():
    assert cell(True) == "true" and cell(False) == "false" and cell(None) == ""
    assert cell({}) == "[]" and cell({"x-max-length": 5}) == '[{"x-max-length",5}]'
    assert cell({"capabilities": {"basic.nack": True}, "product": "pika"}) == (
        '[{"capabilities",[{"basic.nack",true}]},{"product","pika"}]')
    assert format_rows([]) == ""
    assert format_rows([{"name": "q", "durable": True}]) == "name\tdurable\nq\ttrue\n"
    assert format_rows([{"name": "q"}], headers=False) == "q\n"


async def test_import_definitions_gives_the_loop_back_between_slices(broker, monkeypatch):
    monkeypatch.setattr(import_slices, "SLICE_SECONDS", 0.0)  # a slice every CHECK_EVERY items
    turns = 0
    done = False

    async def other_client() -> None:
        nonlocal turns
        while not done:
            turns += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(other_client())
    queues = [{"name": f"q{i}", "vhost": "/", "durable": False, "auto_delete": False,
               "arguments": {}} for i in range(200)]
    line = json.dumps({"command": "import_definitions", "definitions": {"queues": queues}})
    reply = json.loads(await control.ControlHandler(broker).respond(line.encode() + b"\n"))
    done = True
    await other
    assert reply == {"ok": True, "result": 200}
    assert turns >= 200 // import_slices.CHECK_EVERY  # it ran between the import's slices
    assert len(broker.vhosts["/"].queues) == 200
    bad = json.dumps({"command": "import_definitions", "definitions": {"queues": [{}]}})
    reply = json.loads(await control.ControlHandler(broker).respond(bad.encode() + b"\n"))
    assert reply["ok"] is False and reply["exit_code"] == 65
    assert reply["error"].startswith("Validation failed: ")
