"""Reading a file an operator hands over: a regular file, bounded in bytes, or an InputError.

``--recording FILE`` and ``--machine FILE`` may name anything: a FIFO (whose open blocks until a
writer comes), ``/dev/zero`` (which never ends), a file of gigabytes. Each is opened with
``O_NONBLOCK``, refused unless it is a regular file, and read only up to its bound
(docs/inventory.md, "Bad input").
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import InputError


def read_bounded(path: Path | str, limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; :class:`InputError` otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{what} {path} is not a regular file")
        if st.st_size > limit:
            raise InputError(f"{what} {path} is larger than {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(limit + 1 - size, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:  # it grew since the fstat
            raise InputError(f"{what} {path} is larger than {limit} bytes")
        return b"".join(chunks)
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
