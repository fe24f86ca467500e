"""A small tmpfs that fills up, mounted in a mount namespace of its own.

The state directory on a full filesystem is a real failure (a node's disk filled by logs or
images): its files cannot be made (no inode left) or written (no block left), with ENOSPC from
the kernel. A tmpfs mounted with ``size=`` and ``nr_inodes=`` gives both on demand. It is mounted
in a private mount namespace (``unshare -m``) held by a child process, and the test reaches it
through that child's ``/proc/PID/root``: nothing is mounted in the test machine's namespace, and
the mount goes away with the child, whatever the test does. Needs root (``mount``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def small_tmpfs(where: Path, *, size: str = "64k", inodes: int = 64) -> Iterator[Path]:
    """A tmpfs of ``size`` bytes and ``inodes`` inodes mounted on the empty directory ``where``
    in a namespace of its own; yields the path under which this process sees it."""
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         f"mount -t tmpfs -o size={size},nr_inodes={inodes},mode=0700 tmpfs '{where}' "
         "&& echo mounted && exec sleep 3600"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != b"mounted":
            raise RuntimeError(f"cannot mount a tmpfs: {proc.stderr.read().decode()[:300]}"
                               if proc.stderr else "cannot mount a tmpfs")
        yield Path(f"/proc/{proc.pid}/root{where}")
    finally:
        proc.kill()
        proc.wait(10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def fill_blocks(directory: Path) -> Path:
    """Write one file until the filesystem has no block left; returns it."""
    filler = directory / "filler-blocks"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        chunk = b"\0" * 4096
        while True:
            try:
                os.write(fd, chunk)
            except OSError:  # ENOSPC
                break
    finally:
        os.close(fd)
    return filler


def fill_inodes(directory: Path) -> list[Path]:
    """Make empty files until the filesystem has no inode left; returns them."""
    made = []
    for i in range(1_000_000):
        path = directory / f"filler-{i}"
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError:  # ENOSPC
            return made
        made.append(path)
    raise AssertionError("the filesystem never ran out of inodes")
