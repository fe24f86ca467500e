"""``liken-devices probe``: the DaemonSet's exec probes, asking the agent over its unix socket.

The kubelet runs a probe in the container every few seconds on every node, so its process is
kept to the interpreter and the ``socket`` module: the console script takes this short way for
a plain ``probe`` command line (:mod:`liken_devices.entry`), without the argument parser or any
of the package's other modules. ``liken-devices probe --help`` and a malformed command line go
through the full parser (``agent/cli.py`` defines the same command for it).

Why a unix socket: the agent's TCP endpoint shares its port with the other instance of a surge
upgrade (``SO_REUSEPORT``), and any root process on the host's network can join that group and
be handed the probes. The socket lives in the pod's private ``/tmp`` (an ``emptyDir``), which no
process outside the pod reaches (kube/endpoint.py; docs/plugin.md, "Upgrades").
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

MAX_ANSWER = 8192  # bytes read of the agent's answer: a status line and one line of text
TARGETS = ("/healthz", "/readyz")


def ask(path: Path | str, target: str, timeout: float = 4.0) -> tuple[bool, str]:
    """GET ``target`` on the endpoint's unix socket at ``path``: (200?, the answer's first
    line). Bounded: one request, at most ``MAX_ANSWER`` bytes read, within ``timeout``."""
    deadline = time.monotonic() + timeout
    answer = bytearray()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall(f"GET {target} HTTP/1.0\r\n\r\n".encode())
            while len(answer) <= MAX_ANSWER:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False, f"no answer within {timeout:g} s"
                sock.settimeout(left)
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
    except OSError as exc:
        return False, f"cannot ask the agent at {path}: {exc.strerror or exc}"
    head, _, body = bytes(answer[:MAX_ANSWER]).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split(b" ")
    ok = len(status) >= 2 and status[1] == b"200"
    line = body.decode("utf-8", "replace").strip().split("\n", 1)[0]
    return ok, line or head.decode("ascii", "replace").split("\r\n", 1)[0]


def _printable(text: str) -> str:
    """The agent's words as one line of ASCII (this path loads no other module of the
    package: what is not printable ASCII is escaped, as terminal.clean would show it)."""
    return "".join(c if " " <= c <= "~" else c.encode("unicode_escape").decode("ascii")
                   for c in text[:200])


def main(argv: list[str]) -> int | None:
    """``probe [--socket PATH] [--timeout SECONDS] /healthz|/readyz``: 0 healthy, 1 not; None
    for a command line this short way does not take (the full parser answers it)."""
    sock: str | None = None
    timeout = 4.0
    target: str | None = None
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        if name in ("--socket", "--timeout"):
            if not eq:
                if not args:
                    return None
                value = args.pop(0)
            if name == "--socket":
                sock = value
            else:
                try:
                    timeout = float(value)
                except ValueError:
                    return None
        elif arg in TARGETS and target is None:
            target = arg
        else:
            return None
    if sock is None or target is None or not 0 < timeout < 3600:
        return None
    ok, line = ask(sock, target, timeout)
    print(_printable(line))
    return 0 if ok else 1
