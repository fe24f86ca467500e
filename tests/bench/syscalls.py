"""The syscall floor of a re-walk: what the kernel alone costs for the files a walk reads.

A re-walk cannot be cheaper than the syscalls it makes. This module counts them (strace on a
child process that walks the same tree, between two marker calls) and replays the same
sequence directly (``os.open``/``os.read``/``os.readlink``/``os.stat``..., a raw ``getdents64``
through ctypes) in this process, timing the replay: the floor. The benchmark reports the re-walk
as a ratio to that floor, measured in the same run, so the ratio says how much of a walk is
Python above the kernel's own work.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BEGIN, END = "/liken-bench-begin", "/liken-bench-end"
_LINE = re.compile(r"^(?:\d+ +)?(\w+)\((.*)\) += (-?\d+|\?)")
_PATH = re.compile(r'"((?:[^"\\]|\\.)*)"')
_SYS_GETDENTS64 = 217 if os.uname().machine == "x86_64" else 61
_FLAGS = {name: getattr(os, name) for name in dir(os) if name.startswith("O_")}

WALKER = """
import os, sys
sys.path[:0] = [{src!r}, {repo!r}]
from tests.bench.test_inventory_bench import rewalk
from pathlib import Path
root = Path(sys.argv[1])
rewalk(root); rewalk(root)
os.access({begin!r}, os.F_OK)
rewalk(root)
os.access({end!r}, os.F_OK)
"""


@dataclass(frozen=True)
class Floor:
    count: int  # syscalls in one re-walk
    seconds: float  # the same syscalls replayed directly, fastest of several replays
    kinds: str  # the most frequent syscalls, "openat 120, read 118, ..."


def trace_rewalk(root: Path) -> list[tuple[str, str, str]]:
    """(syscall, arguments, result) of one re-walk of ``root``, in order."""
    strace = shutil.which("strace")
    if strace is None:
        raise RuntimeError("strace is not installed")
    with tempfile.TemporaryDirectory(prefix="lkstrace-") as tmp:
        out = Path(tmp) / "trace"
        code = WALKER.format(src=str(REPO / "src"), repo=str(REPO), begin=BEGIN, end=END)
        subprocess.run([strace, "-qq", "-s", "512", "-o", str(out), sys.executable, "-c", code,
                        str(root)], check=True, timeout=300, stdout=subprocess.DEVNULL)
        calls: list[tuple[str, str, str]] = []
        inside = False
        for line in out.read_text(errors="replace").splitlines():
            m = _LINE.match(line)
            if m is None:
                continue
            name, args, result = m.groups()
            if name in ("access", "faccessat", "faccessat2") and BEGIN in args:
                inside = True
                continue
            if name in ("access", "faccessat", "faccessat2") and END in args:
                break
            if inside:
                calls.append((name, args, result))
        return calls


def _path(args: str) -> str | None:
    m = _PATH.search(args)
    return m.group(1).encode().decode("unicode_escape") if m else None


def _flags(args: str) -> int:
    value = 0
    for part in args.split(","):
        for name in part.strip().split("|"):
            value |= _FLAGS.get(name.strip(), 0)
    return value


def replay(calls: list[tuple[str, str, str]]) -> float:
    """Seconds to make the same syscalls directly (files opened are closed again)."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(32768)
    fds: dict[str, int] = {}
    started = time.perf_counter()
    for name, args, result in calls:
        first = args.split(",", 1)[0].strip()
        try:
            if name in ("openat", "open"):
                path = _path(args)
                if path is not None and result.isdigit():
                    flags = _flags(args.split(",", 2)[2] if name == "openat" else
                                   args.split(",", 1)[1])
                    fds[result] = os.open(path, flags & ~os.O_CREAT)
            elif name == "read" and first in fds:
                os.read(fds[first], int(args.rsplit(",", 1)[1]))
            elif name == "pread64" and first in fds:
                os.pread(fds[first], int(args.split(",")[-2]), int(args.split(",")[-1]))
            elif name == "close" and first in fds:
                os.close(fds.pop(first))
            elif name in ("readlink", "readlinkat"):
                path = _path(args)
                if path is not None:
                    os.readlink(path)
            elif name in ("newfstatat", "statx", "stat", "lstat"):
                path = _path(args)
                if path:
                    os.stat(path, follow_symlinks="AT_SYMLINK_NOFOLLOW" not in args
                            and name != "lstat")
                elif first in fds:
                    os.fstat(fds[first])
            elif name == "fstat" and first in fds:
                os.fstat(fds[first])
            elif name == "getdents64" and first in fds:
                libc.syscall(_SYS_GETDENTS64, fds[first], buf, len(buf))
            elif name == "lseek" and first in fds:
                os.lseek(fds[first], 0, os.SEEK_CUR)
            elif name == "ioctl" and first in fds:
                libc.ioctl(fds[first], 0x5401, buf)  # TCGETS, as isatty() asks
        except OSError:
            pass  # the walk's own call failed the same way
    elapsed = time.perf_counter() - started
    for fd in fds.values():
        os.close(fd)
    return elapsed


def floor_of_rewalk(root: Path, replays: int = 20) -> Floor:
    calls = trace_rewalk(root)
    seconds = min(replay(calls) for _ in range(replays))
    kinds = ", ".join(f"{n} {c}" for n, c in Counter(c[0] for c in calls).most_common(6))
    return Floor(len(calls), seconds, kinds)
