"""The rendezvous stores: where the ranks of one training find each other before their collective
exists (each rank's ring address, NCCL's unique id). Two, with the same two calls:

    store.set(key, value: bytes)
    store.get(key, timeout) -> bytes      # waits until some rank has set it

TcpStore: a small server that rank 0 runs on MASTER_ADDR:MASTER_PORT (across hosts), the others
connect to it. FileStore: a folder, one file per key written atomically (one host: the launcher of
`darknet_py train --device cuda:0,1` makes the folder, so no port is needed).
"""
from __future__ import annotations

import os
import socket
import struct
import threading
import time
from typing import Dict, Optional


class RendezvousTimeout(RuntimeError):
    """A key did not appear in time: a rank did not start, or died before the rendezvous."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            raise ConnectionError("the store's peer closed the connection")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _send_item(sock: socket.socket, data: bytes) -> None:
    sock.sendall(struct.pack("<I", len(data)) + data)


def _recv_item(sock: socket.socket) -> bytes:
    (n,) = struct.unpack("<I", _recv_exact(sock, 4))
    return _recv_exact(sock, n)


class FileStore:
    """Keys as files in `folder` (made if missing); written through a temporary file and a rename,
    so that a reader sees a whole value or none."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        os.makedirs(folder, exist_ok=True)

    def _path(self, key: str) -> str:
        return os.path.join(self.folder, key.replace("/", "_"))

    def set(self, key: str, value: bytes) -> None:
        path = self._path(key)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(value)
        os.replace(tmp, path)

    def get(self, key: str, timeout: float) -> bytes:
        path, end = self._path(key), time.monotonic() + timeout
        while True:
            try:
                with open(path, "rb") as f:
                    return f.read()
            except FileNotFoundError:
                if time.monotonic() > end:
                    raise RendezvousTimeout(f"rendezvous: no '{key}' in {self.folder} after {timeout:g} s "
                                            "(a rank did not start, or died before it got there)") from None
                time.sleep(0.01)


class TcpStore:
    """The client of a store server at host:port; the server itself runs in this process when
    `serve` (rank 0). Requests: b"S" key value (answered b"ok") and b"G" key (answered with the value
    once some client has set it)."""

    def __init__(self, host: str, port: int, serve: bool, timeout: float) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self._server: Optional[_StoreServer] = _StoreServer(port) if serve else None
        end = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.create_connection((host, port), timeout=min(5.0, timeout))
                break
            except OSError as e:
                if time.monotonic() > end:
                    raise RendezvousTimeout(f"rendezvous: cannot reach the store at {host}:{port} after {timeout:g} s "
                                            f"({e}): is rank 0 running, and MASTER_ADDR/MASTER_PORT right?") from None
                time.sleep(0.1)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.lock = threading.Lock()

    def local_address(self) -> str:
        """This host's address as the store's host reaches it (the interface towards MASTER_ADDR)."""
        return self.sock.getsockname()[0]

    def set(self, key: str, value: bytes) -> None:
        with self.lock:
            self.sock.settimeout(self.timeout)
            self.sock.sendall(b"S")
            _send_item(self.sock, key.encode())
            _send_item(self.sock, value)
            _recv_item(self.sock)

    def get(self, key: str, timeout: float) -> bytes:
        """The value of key; RendezvousTimeout after `timeout` seconds (the store is then unusable: the
        rank stops)."""
        with self.lock:
            self.sock.sendall(b"G")
            _send_item(self.sock, key.encode())
            self.sock.settimeout(timeout)
            try:
                return _recv_item(self.sock)
            except socket.timeout:
                raise RendezvousTimeout(f"rendezvous: no '{key}' in the store at {self.host}:{self.port} after "
                                        f"{timeout:g} s (a rank did not start, or died before it got there)") from None

    def close(self) -> None:
        self.sock.close()
        if self._server is not None:
            self._server.close()


class _StoreServer:
    def __init__(self, port: int) -> None:
        self.values: Dict[str, bytes] = {}
        self.cond = threading.Condition()
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.listener.bind(("", port))
        except OSError as e:
            raise OSError(f"rendezvous: cannot listen on port {port} (MASTER_PORT): {e.strerror}") from None
        self.listener.listen(256)
        threading.Thread(target=self._accept, name="darknet_py-store", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), name="darknet_py-store-client", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            while True:
                op = conn.recv(1)
                if not op:
                    return
                key = _recv_item(conn).decode()
                if op == b"S":
                    value = _recv_item(conn)
                    with self.cond:
                        self.values[key] = value
                        self.cond.notify_all()
                    _send_item(conn, b"ok")
                else:
                    with self.cond:
                        self.cond.wait_for(lambda: key in self.values)
                        value = self.values[key]
                    _send_item(conn, value)
        except (OSError, ConnectionError):
            pass
        finally:
            conn.close()

    def close(self) -> None:
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept thread (close alone would not)
        except OSError:
            pass
        self.listener.close()
