"""A TCP relay in front of one node's replication port that can cut one follower's link.

A node advertises the relay's port (``--replication-advertised-port``), so every follower
dials through it. The relay reads the follower's first frame (``HELLO``, which names the
node; plain text without TLS) to learn whose link a connection is; ``cut(name)`` closes
that follower's connections and refuses its new ones (closed right after its ``HELLO``),
as a partition would look to both ends; ``heal(name)`` lets it through again. Threads, no
root, nothing of the node's code but the frame reader.
"""

from __future__ import annotations

import socket
import threading

from leveret.cluster import wire


class LinkProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._cut: set[str] = set()
        self._links: dict[str, list[socket.socket]] = {}
        self.refused: dict[str, int] = {}  # connections refused while cut, per follower
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self, node: str) -> None:
        with self._lock:
            self._cut.add(node)
            doomed = self._links.pop(node, [])
        for sock in doomed:
            _close(sock)

    def heal(self, node: str) -> None:
        with self._lock:
            self._cut.discard(node)

    def close(self) -> None:
        self._closed = True
        _close(self._listener)
        with self._lock:
            doomed = [s for socks in self._links.values() for s in socks]
            self._links.clear()
        for sock in doomed:
            _close(sock)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port), 5)
        except OSError:
            _close(client)
            return
        upstream.settimeout(None)
        threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()
        # The follower's first frame names it; relay it, and everything after, unchanged.
        reader = wire.Reader()
        buffered = b""
        frames: list[tuple[int, bytes]] = []
        while not frames:
            try:
                data = client.recv(65536)
            except OSError:
                data = b""
            if not data:
                _close(client)
                _close(upstream)
                return
            buffered += data
            try:
                frames = reader.feed(data)
            except wire.WireError:
                break  # not our protocol: relay it as it is
        kind, payload = frames[0] if frames else (0, b"")
        node = str(wire.parse_json(payload).get("node", "")) if kind == wire.HELLO else ""
        with self._lock:
            refused = node in self._cut
            if refused:
                self.refused[node] = self.refused.get(node, 0) + 1
            else:
                self._links.setdefault(node, []).extend((client, upstream))
        if refused:
            _close(client)
            _close(upstream)
            return
        try:
            upstream.sendall(buffered)
        except OSError:
            _close(client)
            _close(upstream)
            return
        _pump(client, upstream)


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    finally:
        _close(source)
        _close(target)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
