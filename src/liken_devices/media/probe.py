"""One child process per render node, killed after a timeout; the parent never loads libva.

render-node-capabilities.txt, "When a query fails": a query that fails or runs longer than 20
seconds publishes the GPU's device with every capability false and no vaDriver. A libva call
blocked in a driver cannot be interrupted from Python, and a thread stuck in it wedges the whole
process (reference/libva.md 3.4), so each node is asked by a fresh interpreter running
:mod:`.child` (``python -m liken_devices.media.child NODE``), in its own process group, which the
parent kills with SIGKILL when the time is up. All nodes are asked at once, so a hung driver
costs one timeout, not one per GPU.

The child prints one JSON object on its stdout: ``{"ok": true, "vendor", "pairs", "vpp"}`` or
``{"ok": false, "error"}``, both with libva's log ``messages``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .capabilities import RawCaps

DEFAULT_TIMEOUT = 20.0  # seconds; render-node-capabilities.txt, "When a query fails"
REAP_GRACE = 2.0  # after SIGKILL; a child in uninterruptible sleep is left behind (libva.md 3.4)
STDERR_TAIL = 4096


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What asking one render node gave: the driver's answer, or why there is none."""

    node: str
    raw: RawCaps | None
    error: str | None
    messages: tuple[str, ...] = ()
    stderr: str = ""  # the tail of what the child (libva, the driver) wrote on stderr
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.raw is not None


def child_command() -> list[str]:
    """The child's command line, without the node (a fresh interpreter: libva.md 3.4)."""
    return [sys.executable, "-m", "liken_devices.media.child"]


def probe_node(node: str, timeout: float = DEFAULT_TIMEOUT,
               env: Mapping[str, str] | None = None,
               command: Sequence[str] | None = None) -> ProbeResult:
    """Ask one node's driver in a child process; never raises."""
    start = time.monotonic()
    cmd = [*(command or child_command()), node]
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=err, close_fds=True, process_group=0,
                                    env=None if env is None else dict(env))
        except OSError as exc:
            return ProbeResult(node, None, f"cannot start the query: {exc}",
                               seconds=time.monotonic() - start)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            # A child stuck in the kernel dies when its ioctl returns: do not wait for it.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=REAP_GRACE)
            return ProbeResult(node, None, f"timed out after {timeout:g} s",
                               stderr=_tail(err), seconds=time.monotonic() - start)
        elapsed = time.monotonic() - start
        stderr = _tail(err)
    rc = proc.returncode
    if rc < 0:
        return ProbeResult(node, None, f"crashed: signal {-rc}", stderr=stderr, seconds=elapsed)
    return _parse(node, out, rc, stderr, elapsed)


def probe_nodes(nodes: Sequence[str], timeout: float = DEFAULT_TIMEOUT,
                env: Mapping[str, str] | None = None,
                command: Sequence[str] | None = None) -> dict[str, ProbeResult]:
    """Ask every node at once, one child each; the answers by node path."""
    unique = list(dict.fromkeys(nodes))
    if not unique:
        return {}
    with ThreadPoolExecutor(max_workers=len(unique), thread_name_prefix="va-probe") as pool:
        futures = {n: pool.submit(probe_node, n, timeout, env, command) for n in unique}
        return {n: f.result() for n, f in futures.items()}


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child leads its own group (process_group=0)
    except ProcessLookupError:
        pass
    except PermissionError:
        proc.kill()


def _tail(f: Any) -> str:
    try:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - STDERR_TAIL))
        data: bytes = f.read()
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


def _parse(node: str, out: bytes, rc: int, stderr: str, elapsed: float) -> ProbeResult:
    try:
        doc = json.loads(out.decode("utf-8"))
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        messages = tuple(str(m) for m in doc.get("messages") or ())
        if not doc.get("ok"):
            error = str(doc.get("error") or "query failed")
            return ProbeResult(node, None, error, messages, stderr, elapsed)
        raw = _raw_caps(doc)
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
        why = f"exited with status {rc}" if rc else f"gave no answer ({exc})"
        return ProbeResult(node, None, why, (), stderr, elapsed)
    if rc != 0:
        return ProbeResult(node, None, f"exited with status {rc}", messages, stderr, elapsed)
    return ProbeResult(node, raw, None, messages, stderr, elapsed)


def _raw_caps(doc: Mapping[str, Any]) -> RawCaps:
    vendor = doc["vendor"]
    if not isinstance(vendor, str):
        raise TypeError("vendor is not a string")
    pairs: list[tuple[int, int, int | None]] = []
    for item in doc["pairs"]:
        profile, entrypoint, rt = item
        if not isinstance(profile, int) or not isinstance(entrypoint, int):
            raise TypeError("a pair is not two integers")
        if rt is not None and not isinstance(rt, int):
            raise TypeError("an RT format is not an integer")
        pairs.append((profile, entrypoint, rt))
    vpp_raw = doc.get("vpp")
    vpp: tuple[int, ...] | None = None
    if vpp_raw is not None:
        if not all(isinstance(x, int) for x in vpp_raw):
            raise TypeError("a pixel format is not an integer")
        vpp = tuple(vpp_raw)
    return RawCaps(vendor, tuple(pairs), vpp)


if __name__ == "__main__":
    from .child import main

    sys.exit(main(sys.argv[1:]))
