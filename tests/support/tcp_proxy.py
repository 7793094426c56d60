"""A TCP proxy on 127.0.0.1 that a test controls: relay, blackhole (connections stay open, nothing
passes) or cut (every connection closed). Used to take a daemon's database away from it."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading


class TcpProxy:
    """127.0.0.1:``port`` → ``upstream``; ``blackhole()`` stops relaying (connections stay
    open, nothing passes), ``cut()`` closes every connection, ``heal()`` relays again."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._relaying = threading.Event()
        self._relaying.set()
        self._closed = False
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._relay, args=(client, upstream), daemon=True).start()

    def _relay(self, client: socket.socket, upstream: socket.socket) -> None:
        peers = {client: upstream, upstream: client}
        with selectors.DefaultSelector() as selector:
            for end in peers:
                selector.register(end, selectors.EVENT_READ)
            while True:
                self._relaying.wait()
                try:
                    ready = selector.select(timeout=0.1)
                    for key, _ in ready:
                        if not self._relaying.is_set():
                            break
                        source: socket.socket = key.fileobj  # type: ignore[assignment]
                        data = source.recv(65536)
                        if not data:
                            raise OSError("closed")
                        peers[source].sendall(data)
                except (OSError, ValueError):
                    for end in peers:
                        with contextlib.suppress(OSError):
                            end.close()
                    return

    def upstream_ports(self) -> set[int]:
        """The local ports of the proxy's connections to the upstream (what the server sees as
        its clients' ports)."""
        with self._lock:
            pairs = list(self._pairs)
        ports = set()
        for _, upstream in pairs:
            with contextlib.suppress(OSError):
                ports.add(int(upstream.getsockname()[1]))
        return ports

    def blackhole(self) -> None:
        self._relaying.clear()

    def heal(self) -> None:
        self._relaying.set()

    def cut(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for end in pair:
                with contextlib.suppress(OSError):  # not connected any more: close it anyway
                    end.shutdown(socket.SHUT_RDWR)
                end.close()

    def close(self) -> None:
        self._closed = True
        self.heal()
        self.cut()
        self._listener.close()
