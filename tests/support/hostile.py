"""Running a command on hostile input, bounded in memory and time, and judging how it failed.

The property every input of the project must hold (README, "Fuzzing"): the command exits 0 or 2;
on 2 it says why in exactly one line on stderr; it never prints a traceback; it stays within a
memory limit (``RLIMIT_AS``) and a deadline. :func:`run_cli` runs ``main(argv)`` in a forked
child (cheap enough for hypothesis to run it per example) with the address-space limit set in
the child and the deadline enforced by the parent, which kills a child that overruns it.

Fuzz tests are marked ``@pytest.mark.fuzz`` and take their example counts from
:func:`examples`: a few in the ordinary suite, many more under ``./tasks fuzz``
(``LIKEN_FUZZ=1``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import resource
import select
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Main = Callable[[list[str]], int]

FUZZ = os.environ.get("LIKEN_FUZZ", "") not in ("", "0")
MEMORY = 768 << 20  # address space a command may add to the forked test process
DEADLINE = 30.0


def examples(ci: int, fuzz: int | None = None) -> int:
    """How many hypothesis examples: ``ci`` in the suite, ``fuzz`` (40x) under ./tasks fuzz."""
    return (fuzz if fuzz is not None else ci * 40) if FUZZ else ci


@dataclass(frozen=True)
class Outcome:
    rc: int | None  # None: killed at the deadline
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return [ln for ln in self.stderr.splitlines() if ln.strip()]


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _child(main: Main, argv: list[str], out_fd: int, err_fd: int, memory: int) -> None:
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    os.setsid()  # the command's own children end with it (see the kill below)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)  # pytest's capture handler: the command logs to stderr
    rc = 1
    try:
        limit = _vm_size() + memory
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
        rc = 1
    with contextlib.suppress(BaseException):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(rc)


def run_cli(argv: Sequence[str], main: Main | None = None, *, memory: int = MEMORY,
            deadline: float = DEADLINE) -> Outcome:
    """``main(argv)`` (default: ``liken-devices``) in a forked child under the bounds."""
    if main is None:
        from liken_devices.cli import main as devices_main

        main = devices_main
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            _child(main, list(argv), out.fileno(), err.fileno(), memory)
        rc = _wait(pid, deadline)
        out.seek(0)
        err.seek(0)
        return Outcome(rc, out.read().decode(errors="replace"),
                       err.read().decode(errors="replace"))


def _wait(pid: int, deadline: float) -> int | None:
    pidfd = os.pidfd_open(pid)
    try:
        end = time.monotonic() + deadline
        while True:
            left = end - time.monotonic()
            if left <= 0 or select.select([pidfd], [], [], left)[0]:
                break
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == 0:  # the deadline passed
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        if os.WIFSIGNALED(status):
            return -os.WTERMSIG(status)
        return os.waitstatus_to_exitcode(status)
    finally:
        os.close(pidfd)


def assert_fails_closed(outcome: Outcome, allowed: Sequence[int] = (0, 2)) -> None:
    """Exit 0 or 2, one line on stderr for 2, never a traceback, within the bounds."""
    assert outcome.rc is not None, f"still running at the deadline; stderr: {outcome.stderr[-500:]}"
    assert "Traceback" not in outcome.stderr, outcome.stderr[-2000:]
    assert outcome.rc in allowed, (outcome.rc, outcome.stderr[-2000:])
    if outcome.rc == 2:
        assert len(outcome.lines) == 1, outcome.stderr[-2000:]


def mappings(value: object, path: str = "") -> list[tuple[dict[str, object], str]]:
    """Every mapping in ``value`` with its path as the API server writes it (``a.b[0].c``): the
    places a strict-input fuzz test plants an unknown key in."""
    out: list[tuple[dict[str, object], str]] = []
    stack: list[tuple[object, str]] = [(value, path)]
    while stack:
        v, where = stack.pop()
        if isinstance(v, dict):
            out.append((v, where))
            stack.extend((x, f"{where}.{k}" if where else str(k)) for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((x, f"{where}[{i}]") for i, x in enumerate(v))
    return out
