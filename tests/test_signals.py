"""Waiting in slices: a stop signal another thread received still reaches the main thread."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from liken_devices import signals

REPO = Path(__file__).resolve().parents[1]


def test_wait_returns_when_set_and_at_its_timeout() -> None:
    ev = threading.Event()
    threading.Timer(0.05, ev.set).start()
    assert signals.wait(ev) is True
    started = time.monotonic()
    assert signals.wait(threading.Event(), 0.2) is False
    assert 0.15 < time.monotonic() - started < 2.0


PROBE = """
import ctypes, os, signal, sys, threading
from liken_devices import signals
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
other = threading.Thread(target=threading.Event().wait, daemon=True)
other.start()
tid = other.native_id
print(tid, flush=True)
signals.wait(stop)  # untimed: only the slices let the handler run
print("stopped", flush=True)
"""


def test_a_signal_delivered_to_another_thread_ends_an_untimed_wait() -> None:
    proc = subprocess.Popen([sys.executable, "-c", PROBE], stdout=subprocess.PIPE, text=True,
                            env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    try:
        assert proc.stdout is not None
        tid = int(proc.stdout.readline())
        libc = ctypes.CDLL(None, use_errno=True)
        sys_tgkill = 131 if os.uname().machine == "aarch64" else 234
        assert libc.syscall(sys_tgkill, proc.pid, tid, signal.SIGTERM) == 0
        out, _ = proc.communicate(timeout=10)  # an untimed Event.wait() would never return
        assert out.strip() == "stopped" and proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
