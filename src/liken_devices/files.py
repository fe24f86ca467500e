"""The one way the project writes a file that something else reads, and reads one back.

Files others read (the CDI specs the container runtime loads, the plugin's state a restarted
plugin loads, the slice and status an operator asks for) must never be seen half-written, must
survive a power cut once written, and must not be redirected by whatever was planted at their
temp name. :func:`write_atomic` is the only writer: a temp file created next to the target with
``O_CREAT|O_EXCL|O_NOFOLLOW`` (an existing file or symlink at that name is an error, never
followed or truncated) and an explicit mode (set with ``fchmod``, so the umask does not decide
it), written, fsync'd, renamed over the target, and the directory fsync'd so the rename itself is
durable. Its name starts with ``.`` and ends in ``.tmp``, so no CDI runtime loads it (the CDI
specification: only ``*.json``/``*.yaml`` files are specs). A temp file left by a writer killed
mid-write is removed by :func:`sweep_temp` at the next start.

:func:`read_bounded` is the matching reader for files that may have been tampered with: it never
follows a symlink, never blocks on a FIFO or device, refuses anything but a regular file and
reads at most ``limit`` bytes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

TEMP_SUFFIX = ".tmp"


class FileTooLarge(OSError):
    """A file longer than the reader's bound."""


class NotRegularFile(OSError):
    """A directory, FIFO, socket, device or symlink where a regular file belongs."""


def temp_name(path: Path) -> Path:
    """A fresh temp name next to ``path``: ``.<name>.<pid>.<random>.tmp``."""
    return path.parent / f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}{TEMP_SUFFIX}"


def read_bounded(path: Path | str, limit: int, *, follow_symlinks: bool = False,
                 noatime: bool = False) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``), without following a symlink.

    Raises ``FileNotFoundError``, :class:`NotRegularFile`, :class:`FileTooLarge` or another
    ``OSError``; never blocks on a FIFO or a device node. ``follow_symlinks`` is for files an
    operator names on the command line (a ConfigMap volume's files are symlinks).
    """
    nofollow = 0 if follow_symlinks else os.O_NOFOLLOW
    flags = os.O_RDONLY | nofollow | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    try:
        try:
            # ``noatime``: this read leaves the access time alone (the file's owner or
            # CAP_FOWNER only; others read it as usual): a CDI spec's access time tells the
            # runtime's reads (plugin/late.py).
            fd = os.open(path, flags | (os.O_NOATIME if noatime else 0))
        except PermissionError:
            if not noatime:
                raise
            fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and nofollow:  # O_NOFOLLOW on a symlink
            raise NotRegularFile(errno.ELOOP, "a symlink, not a regular file",
                                 str(path)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file", str(path))
        if st.st_size > limit:
            raise FileTooLarge(errno.EFBIG, f"larger than {limit} bytes", str(path))
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # it grew while we read
                raise FileTooLarge(errno.EFBIG, f"larger than {limit} bytes", str(path))
        return b"".join(chunks)
    finally:
        os.close(fd)


def _same_content(path: Path, data: bytes) -> bool:
    try:
        return read_bounded(path, len(data), noatime=True) == data
    except OSError:
        return False


def make_dir(path: Path, mode: int) -> None:
    """Create ``path`` (and missing parents) with ``mode`` exactly; an existing one is kept as is.

    Only the directories made here get the mode: an existing directory may be shared with others
    (the kubelet's registry, the runtime's CDI directory) and is not ours to change.
    """
    if path.is_dir():
        return
    if not path.parent.is_dir():
        make_dir(path.parent, mode)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        if not path.is_dir():
            raise
        return
    os.chmod(path, mode)  # mkdir's mode passes through the umask


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, *, mode: int, dir_mode: int = 0o755,
                 skip_same: bool = True) -> bool:
    """Replace ``path`` by ``data`` atomically and durably; True when written.

    Readers see the old file or the new one, never a part. With ``skip_same`` a file that already
    holds exactly ``data`` is left alone (a reconcile pass that changes nothing touches nothing).
    The file gets ``mode`` whatever the umask; a missing directory is made with ``dir_mode``.
    """
    if skip_same and _same_content(path, data):
        return False
    make_dir(path.parent, dir_mode)
    tmp = temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)
    return True


def is_temp(name: str, prefix: str) -> bool:
    """Whether ``name`` is a temp file :func:`write_atomic` made for a target named ``prefix*``."""
    return name.startswith("." + prefix) and name.endswith(TEMP_SUFFIX)


def sweep_temp(directory: Path, prefix: str) -> list[str]:
    """Remove the temp files of interrupted writes of ``prefix*`` targets; returns their names.

    Only files (and symlinks) are removed, never a directory. The caller makes sure no writer of
    these targets is running (the plugin holds its state lock).
    """
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed = []
    for name in sorted(names):
        if not is_temp(name, prefix):
            continue
        p = directory / name
        try:
            if stat.S_ISDIR(p.lstat().st_mode):
                continue
            p.unlink()
        except OSError:
            continue
        removed.append(name)
    return removed
