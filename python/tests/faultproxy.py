"""A small TCP proxy in front of one PostgreSQL node, for fault tests that
need a network fault the node harness cannot give (a lost reply, a node that
stops answering while its sockets stay open) until the Toxiproxy tooling of
tests/cluster is used here.

    with FaultProxy(upstream_port) as px:
        dsn = px.dsn(pg_dsn)          # the node's DSN with the proxy's port
        px.lose_reply_after(b"PREPARE TRANSACTION")
        px.blackhole()                # accept, forward nothing, close nothing
        px.refuse()                   # cut every session, reset new connects
        px.heal()

Every fault is real at the socket level: a lost reply means the server got and
executed the command, and the client's connection is reset before any answer
reaches it; a blackhole keeps every socket open and moves no byte, so a
client call hangs until its own timeout.

The proxy listens on one port for its whole life, refusing included: a
refused proxy resets each connection as it accepts it (the client's connect
fails at once, as against a node gone) rather than closing its listener,
whose port would go back to the kernel's ephemeral range, where an outgoing
connection can take it before `heal()` listens there again (Java's
`FaultProxy` in java/test-support met that as a `BindException`)."""

from __future__ import annotations

import re
import selectors
import socket
import threading
from typing import List, Optional, Set


class FaultProxy:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self._lock = threading.Lock()
        self._blackhole = False
        self._lose_after: Optional[bytes] = None
        self._hole_before: Optional[bytes] = None
        self._then_refuse = False
        self._then_hole = False
        self._reset_gen = 0
        self._refusing = False
        self._lost = threading.Event()
        self._socks: Set[socket.socket] = set()
        self._threads: List[threading.Thread] = []
        self._closed = False
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        t = threading.Thread(target=self._accept, name="faultproxy-accept", daemon=True)
        t.start()
        self._threads.append(t)

    # -- faults -----------------------------------------------------------------

    def blackhole(self) -> None:
        """Every connection, open or new, stops moving bytes; none is closed."""
        with self._lock:
            self._blackhole = True

    def blackhole_before(self, marker: bytes) -> None:
        """The next client message that contains `marker` never reaches the
        server, and from then on the proxy is a blackhole (`blackhole()`)."""
        with self._lock:
            self._hole_before = marker

    def lose_reply_after(self, marker: bytes, *, then_refuse: bool = False) -> None:
        """The next client message that contains `marker` reaches the server;
        then the client's connection is reset before the server's answer is
        forwarded (the reply is lost, the command took effect). With
        `then_refuse` the proxy refuses (`refuse()`) before that reset, so
        the client's next connect fails (the node is gone after the reply)."""
        with self._lock:
            self._lose_after = marker
            self._then_refuse = then_refuse
            self._then_hole = False
            self._lost.clear()

    def blackhole_after(self, marker: bytes) -> None:
        """The next client message that contains `marker` reaches the server
        and runs; its answer and everything after it is held (`blackhole()`):
        the command took effect, the client hears nothing."""
        with self._lock:
            self._lose_after = marker
            self._then_refuse = False
            self._then_hole = True
            self._lost.clear()

    def reset(self) -> None:
        """Resets every open connection (the server sees its client go, the
        client a reset); new connections are accepted as before."""
        with self._lock:
            self._reset_gen += 1

    def refuse_new(self) -> None:
        """New connects fail (each is reset as it is accepted); the sessions
        already open go on (a node that stops accepting)."""
        with self._lock:
            self._refusing = True

    @property
    def connections(self) -> int:
        """The client connections open through the proxy now (a blackhole's
        held ones included)."""
        with self._lock:
            return len(self._socks) // 2

    @property
    def reply_lost(self) -> bool:
        return self._lost.is_set()

    def refuse(self) -> None:
        """Ends every open session and makes new connects fail (each is reset
        as it is accepted): a node gone."""
        with self._lock:
            self._refusing = True
            socks = list(self._socks)
        for s in socks:
            # shutdown, not close: the pump thread owns (and closes) them
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def heal(self) -> None:
        """Ends every fault: connections are accepted again, and the
        connections a blackhole held are dropped."""
        with self._lock:
            self._blackhole = False
            self._lose_after = None
            self._hole_before = None
            self._then_hole = False
            self._refusing = False

    # -- plumbing -----------------------------------------------------------------

    def dsn(self, node_dsn: str) -> str:
        return re.sub(r"port=\d+", f"port={self.port}", node_dsn)

    def _accept(self) -> None:
        lst = self._listener
        while True:
            try:
                client, _ = lst.accept()
            except OSError:
                return  # closed by close()
            if self._refusing or self._closed:
                _reset(client)
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                # refuse() may have come while this connected upstream: it
                # saw neither socket, so this one cuts them.
                refused = self._refusing or self._closed
                if not refused:
                    self._socks.update((client, server))
            if refused:
                _reset(client)
                _close(server)
                continue
            threading.Thread(target=self._pump, args=(client, server), name="faultproxy-pump", daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        sel.register(client, selectors.EVENT_READ, server)
        sel.register(server, selectors.EVENT_READ, client)
        held = False
        with self._lock:
            gen = self._reset_gen
        try:
            while not self._closed:
                with self._lock:
                    hole = self._blackhole
                    if self._reset_gen != gen:
                        hole = None
                if hole is None:
                    _reset(client)
                    return
                if hole:  # hold both sockets open, move nothing
                    held = True
                    threading.Event().wait(0.05)
                    continue
                if held:
                    # Healed: the connections the blackhole held are dropped,
                    # as after a partition that outlasted TCP, so bytes sent
                    # into the hole never arrive late.
                    _reset(client)
                    return
                for key, _ in sel.select(timeout=0.05):
                    with self._lock:
                        if self._blackhole:  # set while we waited: move nothing
                            break
                    src = key.fileobj
                    dst = key.data
                    data = src.recv(65536)  # type: ignore[union-attr]
                    if not data:
                        return
                    with self._lock:
                        hole = self._hole_before if src is client else None
                        if hole is not None and hole in data:
                            self._hole_before = None
                            self._blackhole = True
                            break  # the message is lost in the hole
                        marker = self._lose_after if src is client else None
                        if marker is not None and marker in data:
                            self._lose_after = None
                        else:
                            marker = None
                    dst.sendall(data)
                    if marker is not None:
                        # The server has the command; wait for its answer to
                        # start (so the command ran), then reset the client.
                        server.settimeout(5)
                        try:
                            server.recv(1, socket.MSG_PEEK)
                        finally:
                            server.settimeout(None)
                        if self._then_hole:
                            # Set before the hole opens, as before refuse()
                            # below: whoever sees the hole (a stalled link, a
                            # timeout) then sees reply_lost.
                            self._lost.set()
                            with self._lock:
                                self._blackhole = True
                            continue
                        # Set before refuse() ends the sessions: the client
                        # sees its reset from then on and may replay and
                        # check reply_lost before this thread runs again.
                        self._lost.set()
                        if self._then_refuse:
                            self.refuse()
                        _reset(client)
                        return
        except OSError:
            return
        finally:
            sel.close()
            _close(client)
            _close(server)
            with self._lock:
                self._socks.discard(client)
                self._socks.discard(server)

    def close(self) -> None:
        self._closed = True
        self.refuse()
        # shutdown first: a plain close leaves the socket listening while the
        # accept thread is blocked on it (Linux)
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        _close(self._listener)

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reset(s: socket.socket) -> None:
    """Closes with RST (SO_LINGER 0), as a lost connection looks to the client."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    except OSError:
        pass
    _close(s)


def _close(s: socket.socket) -> None:
    try:
        s.close()
    except OSError:
        pass
