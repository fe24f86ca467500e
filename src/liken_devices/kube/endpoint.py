"""The HTTP endpoint Kubernetes and Prometheus read: ``/metrics``, ``/healthz``, ``/readyz``.

The node agent runs in a host-network pod, so whatever it listens on is reachable from the
node's network; and it shares its memory limit with the kubelet plugin, so an endpoint that
spends a thread and a buffer on every connection lets one host with a few thousand idle
connections push the whole agent into the OOM killer. This server is bounded by construction
(docs/agent.md, "Metrics and health"):

* it listens on one address the operator chooses (:func:`default_address`: the pod's IP from
  the downward API when ``POD_IP`` is set, else loopback), never on every address by default;
* one thread, non-blocking sockets and a selector: no thread per connection;
* at most ``max_connections`` open at once; when a new one arrives at the cap, the oldest that
  has not finished sending its request is closed, so idle connections cannot lock scrapers out;
* every connection has ``timeout`` seconds from accept to the last byte of the answer, and a
  request may be at most ``MAX_REQUEST`` bytes; only ``GET``/``HEAD`` of the three paths answer;
* idle, the thread blocks in the selector with no timeout (no wake-ups on an idle node).

The kubelet's probes do not use the port in a surge upgrade: with ``probe_socket`` the endpoint
also listens on a unix socket in the pod's own private directory (an ``emptyDir``), and the
DaemonSet's probes are exec probes (``liken-devices probe``) that run inside the container and
connect to it. A shared TCP port cannot keep a stranger out: any root process on the host's
network may join an ``SO_REUSEPORT`` group, and the steering below would then hand it the
probes, so it could get the agent killed (failing its liveness) or hide a hung one (answering
"ok"). Nothing outside the pod reaches the pod's ``/tmp``, so only the agent answers its probes.

A busy port is :class:`EndpointError` with one line (the callers exit 2 on it). The one
exception is by design: in a surge upgrade (``reuse_port``) the old and the new instance share
the port with ``SO_REUSEPORT`` (a host-network pod has the node's addresses; the kernel lets
sockets of the same user that all set the option listen on one address and port). Left alone,
the kernel would spread connections over both by a hash of the connection's addresses, and the
kubelet's probe of the new pod would then often reach the old instance, whose "ready" marks the
new pod ready before it is (one success is enough), and the DaemonSet would stop the old pod
early. So each listener of the group attaches a classic BPF program to it
(``SO_ATTACH_REUSEPORT_CBPF``) that picks the group's second socket: while two listen, every
connection goes to the newer one; alone, the program's index is out of range and the kernel
falls back to its hash, i.e. to the only socket (docs/plugin.md, "Upgrades"). What the port
then serves is the metrics scrape (and probes of a deployment that still sends them there).
"""

from __future__ import annotations

import array
import contextlib
import errno
import ipaddress
import logging
import os
import selectors
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError

log = logging.getLogger(__name__)

MAX_REQUEST = 8192  # bytes of request line and headers; a scraper sends a few hundred
DEFAULT_MAX_CONNECTIONS = 16
DEFAULT_TIMEOUT = 5.0  # seconds from accept to the last byte of the answer

# A probe's answer: (healthy, one line saying why).
Check = Callable[[], tuple[bool, str]]


class EndpointError(InputError):
    """The endpoint cannot listen (a busy port, an address not on this host): one line on
    stderr and exit 2, like any bad input of the command line."""


def default_address(env: dict[str, str] | None = None) -> str:
    """The pod's IP when the downward API gives it (``POD_IP``), else loopback."""
    value = (env if env is not None else os.environ).get("POD_IP", "").strip()
    if value:
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            log.warning("POD_IP=%r is not an IP address; the endpoint listens on loopback",
                        value)
    return "127.0.0.1"


@dataclass
class _Conn:
    sock: socket.socket
    deadline: float
    inbox: bytearray = field(default_factory=bytearray)
    outbox: bytes = b""
    answered: bool = False  # the whole request arrived and an answer is queued


class Endpoint:
    """Serves ``metrics()`` on /metrics and the ``health``/``ready`` checks, until :meth:`stop`."""

    def __init__(self, address: str, port: int, metrics: Callable[[], tuple[bytes, str]],
                 health: Check | None = None, ready: Check | None = None,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 timeout: float = DEFAULT_TIMEOUT, reuse_port: bool = False,
                 probe_socket: Path | None = None) -> None:
        """``metrics()`` gives the exposition and its content type; ``reuse_port`` lets another
        instance that also asks for it listen on the same port (a surge upgrade);
        ``probe_socket`` is a unix socket path the same routes are served on too (the probes'
        way in, module docstring)."""
        self._metrics = metrics
        self._checks: dict[str, Check | None] = {"/healthz": health, "/readyz": ready}
        self._max = max(1, max_connections)
        self._timeout = timeout
        self._listener = _listen(address, port, reuse_port)
        self.address = address
        self.port: int = self._listener.getsockname()[1]
        self.probe_socket = probe_socket
        self._listeners = [self._listener]
        self._probe_inode = 0
        if probe_socket is not None:
            try:
                self._listeners.append(_listen_unix(probe_socket))
                self._probe_inode = os.lstat(probe_socket).st_ino
            except BaseException:
                self._listener.close()
                raise
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector = selectors.DefaultSelector()
        for listener in self._listeners:
            self._selector.register(listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._conns: dict[int, _Conn] = {}
        self._stopping = False
        self.evicted = 0
        self._thread = threading.Thread(target=self._serve, name="endpoint", daemon=True)
        self._thread.start()

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    def stop(self) -> None:
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join(2)
        for conn in list(self._conns.values()):
            self._close(conn)
        if self.probe_socket is not None:
            _unlink_socket(self.probe_socket, self._probe_inode)
        for s in (*self._listeners, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                s.close()
        self._selector.close()

    # ---- the loop (the endpoint's thread) --------------------------------------------------

    def _serve(self) -> None:
        while not self._stopping:
            timeout = None
            if self._conns:
                soonest = min(c.deadline for c in self._conns.values())
                timeout = max(0.0, soonest - time.monotonic())
            try:
                events = self._selector.select(timeout)
            except OSError:  # interrupted, or closed under us by stop()
                if self._stopping:
                    return
                continue
            for key, mask in events:
                if key.fileobj in self._listeners:
                    self._accept(key.fileobj)
                elif key.fileobj is self._wake_r:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(64)
                else:
                    conn = self._conns.get(key.fd)
                    if conn is not None:
                        self._io(conn, mask)
            now = time.monotonic()
            for conn in [c for c in self._conns.values() if c.deadline <= now]:
                self._close(conn)

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(self._max):  # a burst of new connections: take them, but not forever
            try:
                sock, _addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and the like: shed load rather than spin
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._evict_one()
                return
            if len(self._conns) >= self._max and not self._evict_one():
                sock.close()  # every open one is mid-answer: this one waits for the next try
                continue
            sock.setblocking(False)
            conn = _Conn(sock, time.monotonic() + self._timeout)
            self._conns[sock.fileno()] = conn
            self._selector.register(sock, selectors.EVENT_READ, None)

    def _evict_one(self) -> bool:
        """Close the oldest connection still sending its request; False when there is none."""
        idle = [c for c in self._conns.values() if not c.answered]
        if not idle:
            return False
        self._close(min(idle, key=lambda c: c.deadline))
        self.evicted += 1
        return True

    def _io(self, conn: _Conn, mask: int) -> None:
        try:
            if mask & selectors.EVENT_READ and not conn.answered:
                data = conn.sock.recv(4096)
                if not data:
                    self._close(conn)
                    return
                conn.inbox += data
                if len(conn.inbox) > MAX_REQUEST:
                    self._answer(conn, 431, b"request too large\n", "text/plain")
                elif b"\r\n\r\n" in conn.inbox or b"\n\n" in conn.inbox:
                    self._route(conn)
            if mask & selectors.EVENT_WRITE and conn.outbox:
                sent = conn.sock.send(conn.outbox)
                conn.outbox = conn.outbox[sent:]
                if not conn.outbox:
                    self._close(conn)  # one request per connection
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)

    def _route(self, conn: _Conn) -> None:
        line = bytes(conn.inbox).split(b"\n", 1)[0].strip()
        parts = line.split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            self._answer(conn, 400, b"bad request\n", "text/plain")
            return
        method, target = parts[0], parts[1].split(b"?", 1)[0].decode("ascii", "replace")
        if method not in (b"GET", b"HEAD"):
            self._answer(conn, 405, b"method not allowed\n", "text/plain")
            return
        head = method == b"HEAD"
        if target == "/metrics":
            try:
                body, ctype = self._metrics()
            except Exception:  # a collector's bug is the scraper's 500, not the agent's end
                log.exception("collecting metrics failed")
                self._answer(conn, 500, b"collecting metrics failed\n", "text/plain", head)
                return
            self._answer(conn, 200, body, ctype, head)
            return
        if target in self._checks:
            check = self._checks[target]
            ok, why = (True, "ok") if check is None else _run_check(check)
            self._answer(conn, 200 if ok else 503, (why + "\n").encode(), "text/plain", head)
            return
        self._answer(conn, 404, b"not found: try /metrics, /healthz or /readyz\n", "text/plain",
                     head)

    def _answer(self, conn: _Conn, code: int, body: bytes, ctype: str,
                head: bool = False) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                  431: "Request Header Fields Too Large", 500: "Internal Server Error",
                  503: "Service Unavailable"}[code]
        header = (f"HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\n"
                  f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        conn.outbox = header + (b"" if head else body)
        conn.answered = True
        conn.inbox = bytearray()
        with contextlib.suppress(KeyError, ValueError):
            self._selector.modify(conn.sock, selectors.EVENT_WRITE, None)

    def _close(self, conn: _Conn) -> None:
        self._conns.pop(conn.sock.fileno(), None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()


def _run_check(check: Check) -> tuple[bool, str]:
    try:
        return check()
    except Exception as exc:
        return False, f"check failed: {type(exc).__name__}: {exc}"


def _listen(address: str, port: int, reuse_port: bool = False) -> socket.socket:
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
    except ValueError:
        raise EndpointError(f"the endpoint address {address!r} is not an IP address") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((address, port))
        sock.listen(64)
        sock.setblocking(False)
        if reuse_port:
            _prefer_the_newer(sock)
    except OSError as exc:
        sock.close()
        why = exc.strerror or str(exc)
        if exc.errno == errno.EADDRINUSE:
            why = "the port is in use by another process (another agent on this node?)"
        elif exc.errno == errno.EADDRNOTAVAIL:
            why = "the address is not one of this host's"
        raise EndpointError(f"cannot listen on {address}:{port}: {why}") from None
    return sock


def _listen_unix(path: Path) -> socket.socket:
    """A unix stream socket at ``path``, for this user only (0600). A socket file left there by
    an instance that died is replaced; anything else at the path is an error."""
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise EndpointError(f"cannot listen on {path}: something other than a socket is "
                                "there")
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old = os.umask(0o177)
        try:
            sock.bind(str(path))
        finally:
            os.umask(old)
        sock.listen(16)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise EndpointError(f"cannot listen on {path}: {exc.strerror or exc}") from None
    return sock


def _unlink_socket(path: Path, inode: int) -> None:
    """Remove the socket file at ``path`` if it is still the one this endpoint made."""
    with contextlib.suppress(OSError):
        if os.lstat(path).st_ino == inode:
            os.unlink(path)


# Classic BPF, from the kernel's uapi (linux/filter.h, asm-generic/socket.h): one instruction,
# BPF_RET | BPF_K, returning the index of the socket in the SO_REUSEPORT group.
SO_ATTACH_REUSEPORT_CBPF = 51
_BPF_RET_K = 0x06
NEWER = 1  # the group's sockets in the order they joined; a socket that leaves is replaced by
#            the last one, so of two listeners the one at index 1 is the one that bound last


def _prefer_the_newer(sock: socket.socket) -> None:
    """Attach the group's selector: every connection to the socket at index ``NEWER`` while
    there is one, else (one listener) the kernel's hash. Attached after ``bind``: a socket that
    carries a program before it binds has a group of its own and cannot join another. A kernel
    that refuses it keeps the hash (either instance answers), which is logged."""
    # struct sock_filter {u16 code; u8 jt, jf; u32 k}, in a buffer that stays put while the
    # kernel copies it; struct sock_fprog {u16 len; struct sock_filter *filter}.
    insn = array.array("B", struct.pack("=HBBI", _BPF_RET_K, 0, 0, NEWER))
    fprog = struct.pack("@HP", 1, insn.buffer_info()[0])
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, fprog)
    except OSError as exc:
        log.warning("cannot steer the shared port to the newer instance (%s): during a surge "
                    "upgrade either instance may answer", exc.strerror or exc)
