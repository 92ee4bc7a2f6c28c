"""The control channel: ``leveret ctl`` talking to the running broker.

Theory of operation
-------------------
The broker listens on a Unix domain socket in its data directory
(``<data_dir>/ctl.sock``, mode 0600: only the broker's user may use it; the
data dir lock guarantees one broker per socket). The protocol is one JSON
object per line each way: a request ``{"command": "set_policy", ...}`` gets
exactly one response, ``{"ok": true, "result": ...}`` or ``{"ok": false,
"error": "..."}``; a connection may send several requests.

``ControlHandler`` is the sans-IO part: a line in, a line out, applied to the
broker on the event loop thread (so it needs no locking). A command that
changes durable state (``CHANGES``) is answered only after the group commit
that records the change (``respond``), as AMQP's "-ok" replies are: an
``ok`` the broker loses in a crash would be a lie. ``start_server``
is the thin asyncio adapter and ``request`` the blocking client the CLI uses.

Commands (mirroring rabbitmqctl): ``set_policy`` (vhost, name, pattern,
definition, priority, apply_to), ``clear_policy`` (vhost, name),
``list_policies`` (vhost); the users / vhosts / permissions / limits
commands of ``control_access.py``; the list_* / status / purge / delete /
close / export commands of ``control_inventory.py``; ``import_definitions``,
applied in slices as over HTTP (``import_slices.py``: a file of 100,000 queues
never holds the loop); and ``compact``:
rewrite the message store without its free pages while the broker runs
(between two group-commit batches; the file shrinks to the live data). A
refusal may carry rabbitmqctl's exit code:
``{"ok": false, "error": "...", "exit_code": 67}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leveret.broker import control_access, control_inventory, definitions, import_slices
from leveret.broker.accounts import AccountError
from leveret.broker.control_inventory import EX_DATAERR
from leveret.persistence.store import StoreError
from leveret.queues.policy import PolicyError, validate

if TYPE_CHECKING:
    from leveret.broker.broker import Broker

log = logging.getLogger(__name__)

SOCKET_NAME = "ctl.sock"
SOCKET_MODE = 0o600
# Longest request line accepted: a definitions import carries a whole file (a RabbitMQ
# export with thousands of queues is a few MB); this still stops a runaway client.
MAX_LINE = 64 << 20
# sun_path is 108 bytes on Linux; longer paths are reached through /proc/self/fd.
_SUN_PATH_MAX = 100


# Commands that change durable state: answered after the commit that records it.
CHANGES = frozenset({"set_policy", "clear_policy", "purge_queue", "delete_queue"})


class ControlError(Exception):
    """A request the broker refused; ``str()`` is the message for the user."""

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def socket_path(data_dir: Path | str) -> Path:
    return Path(data_dir) / SOCKET_NAME


class ControlHandler:
    """Requests in, responses out (no I/O)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.commands: dict[str, Callable[[dict[str, Any]], Any]] = {
            "set_policy": self.set_policy,
            "clear_policy": self.clear_policy,
            "list_policies": self.list_policies,
            **control_access.commands(broker.accounts),
            **control_inventory.commands(broker),
        }
        self.changed = False  # a command in CHANGES succeeded: its reply waits for the commit

    async def respond(self, line: bytes) -> bytes:
        """``handle_line``, answered once what it changed is committed; ``compact`` too."""
        try:
            request = json.loads(line)
        except ValueError:
            request = None
        if isinstance(request, dict) and request.get("command") == "compact":
            return _line(await self.compact())
        if isinstance(request, dict) and request.get("command") == "import_definitions":
            return _line(await self.import_definitions(request))
        response = self.handle_line(line)  # parses again: control lines are tiny
        if self.changed:
            self.changed = False
            if not await self.broker.log.committed():
                response = _line({"ok": False, "error": "the change was applied but could not "
                                  "be written to the message store"})
        return response

    async def compact(self) -> dict[str, Any]:
        """Rewrite the store without its free pages (``GroupCommit.compact``)."""
        try:
            before, after = await self.broker.log.compact()
        except StoreError as exc:
            return {"ok": False, "error": str(exc)}
        log.info("store compacted: %d -> %d bytes", before, after)
        return {"ok": True, "result": {"before": before, "after": after}}

    async def import_definitions(self, request: dict[str, Any]) -> dict[str, Any]:
        """Checked whole, then applied in slices; answered after the last slice's commit."""
        try:
            count, skipped = await import_slices.apply_in_slices(
                self.broker, request.get("definitions"))
        except definitions.Invalid as exc:
            return {"ok": False, "error": f"Validation failed: {exc}; nothing was imported",
                    "exit_code": EX_DATAERR}
        log.info("definitions imported: %d operation(s)%s", count,
                 f", {skipped} skipped (changed meanwhile)" if skipped else "")
        if not await self.broker.log.committed():
            return {"ok": False, "error": "the change was applied but could not be written "
                    "to the message store"}
        return {"ok": True, "result": count}

    def handle_line(self, line: bytes) -> bytes:
        try:
            request = json.loads(line)
        except ValueError as exc:
            request = f"not JSON: {exc}"
        if isinstance(request, dict):
            response = self.handle(request)
        else:
            response = {"ok": False, "error": f"malformed request (not a JSON object): {request}"}
        return _line(response)

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        command = self.commands.get(request.get("command", ""))
        if command is None:
            return {"ok": False, "error": f"unknown command {request.get('command')!r}"}
        try:
            result = {"ok": True, "result": command(request)}
            self.changed = self.changed or request.get("command") in CHANGES
            return result
        except ControlError as exc:
            return {"ok": False, "error": str(exc)}
        except AccountError as exc:
            return {"ok": False, "error": str(exc), "exit_code": exc.exit_code}
        except (KeyError, TypeError) as exc:
            return {"ok": False, "error": f"malformed request: {exc!r}"}

    def _vhost(self, request: dict[str, Any]) -> Any:
        name = request.get("vhost", "/")
        vhost = self.broker.vhosts.get(name)
        if vhost is None:
            raise ControlError(f"Virtual host '{name}' does not exist")
        return vhost

    def set_policy(self, request: dict[str, Any]) -> None:
        vhost = self._vhost(request)
        try:
            policy = validate(vhost.name, request["name"], request["pattern"],
                              request["definition"], request.get("priority", 0),
                              request.get("apply_to", "all"))
        except PolicyError as exc:
            raise ControlError(f"Validation failed\n\n{exc}\n") from None
        vhost.set_policy(policy)
        log.info("policy %r set in vhost %r", policy.name, vhost.name)

    def clear_policy(self, request: dict[str, Any]) -> None:
        vhost = self._vhost(request)
        if not vhost.clear_policy(request["name"]):
            raise ControlError("Parameter does not exist")
        log.info("policy %r cleared in vhost %r", request["name"], vhost.name)

    def list_policies(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        vhost = self._vhost(request)
        return [definitions.policy_record(p)
                for p in sorted(vhost.policies, key=lambda p: p.name)]


def _line(response: dict[str, Any]) -> bytes:
    return json.dumps(response, separators=(",", ":")).encode() + b"\n"


# -- asyncio adapter ---------------------------------------------------------------------

@contextlib.contextmanager
def _short_path(path: Path) -> Iterator[str]:
    """A name for ``path`` that fits in sun_path (via the directory's fd if needed)."""
    text = str(path)
    if len(os.fsencode(text)) <= _SUN_PATH_MAX:
        yield text
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


async def start_server(broker: Broker, data_dir: Path) -> asyncio.AbstractServer:
    """Listen on ``<data_dir>/ctl.sock``; a stale socket from a crashed broker is replaced."""
    path = socket_path(data_dir)
    handler = ControlHandler(broker)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # we hold the data dir lock: no live broker owns it
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with _short_path(path) as name:
            sock.bind(name)
        os.chmod(path, SOCKET_MODE)
    except OSError:
        sock.close()
        raise

    async def serve_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                writer.write(await handler.respond(line))
                await writer.drain()
        except (ConnectionError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_unix_server(serve_client, sock=sock, limit=MAX_LINE)
    log.info("control socket at %s", path)
    return server


def remove_socket(data_dir: Path) -> None:
    with contextlib.suppress(OSError):
        socket_path(data_dir).unlink()


# -- blocking client (leveret ctl) ---------------------------------------------------------

class BrokerUnreachable(Exception):
    """No broker answers on the control socket."""


def request(data_dir: Path, payload: dict[str, Any], timeout: float = 10.0) -> Any:
    """Send one request; returns its result, raises ControlError or BrokerUnreachable."""
    path = socket_path(data_dir)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            with _short_path(path) as name:
                sock.connect(name)
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError) as exc:
            raise BrokerUnreachable(
                f"cannot reach a running broker: no control socket answers at {path} "
                f"({exc.strerror or exc}); is the broker running with this data directory?"
            ) from None
        except OSError as exc:
            raise BrokerUnreachable(f"cannot connect to {path}: {exc.strerror or exc}") from None
        sock.sendall(json.dumps(payload).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                raise BrokerUnreachable(f"the broker closed the control connection at {path}")
            data += chunk
    except TimeoutError:
        raise BrokerUnreachable(f"the broker did not answer within {timeout:g}s at {path}") from None
    finally:
        sock.close()
    response = json.loads(data)
    if not response.get("ok"):
        raise ControlError(response.get("error", "unknown error"), response.get("exit_code"))
    return response.get("result")
