"""Reading a file an operator names: a regular file, bounded in bytes, or an InputError.

``--recording FILE`` and ``--machine FILE`` may name anything: a FIFO (whose open blocks until a
writer comes), ``/dev/zero`` (which never ends), a file of gigabytes. :func:`read_input` reads
them with the project's one bounded reader (:func:`..files.read_bounded`: ``O_NONBLOCK``, regular
files only, at most the bound), following symlinks as a command line does, and turns every
refusal into one line for the operator (docs/inventory.md, "Bad input").
"""

from __future__ import annotations

from pathlib import Path

from .errors import InputError
from .files import FileTooLarge, NotRegularFile, read_bounded


def read_input(path: Path | str, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path`` of at most ``limit`` bytes; InputError otherwise."""
    try:
        return read_bounded(path, limit, follow_symlinks=True)
    except NotRegularFile:
        raise InputError(f"{what} {path} is not a regular file") from None
    except FileTooLarge:
        raise InputError(f"{what} {path} is larger than {limit} bytes") from None
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
