"""Numbers and names read from sysfs or a recording, parsed as the kernel writes them.

Both readers take text from files an operator hands over (a recording, a tree under a root), so
every value is hostile until parsed. The kernel writes its numbers in ASCII; Python's ``int()``
also takes ``²``-like Unicode digits, underscores and signs, so numbers are matched against
ASCII digits first. A device number fits the kernel's ``dev_t`` (12-bit major, 20-bit minor,
``include/linux/kdev_t.h``). A node's name under ``/dev`` is a relative path of components made
of the characters the kernel's names use, never ``.`` or ``..``: the one rule for the readers
and for the plugin reading a name back from a CDI spec or its state.
"""

from __future__ import annotations

import re

MAX_MAJOR = (1 << 12) - 1
MAX_MINOR = (1 << 20) - 1
_DEC = re.compile(r"[0-9]{1,20}")
_HEX = re.compile(r"(?:0[xX])?([0-9a-fA-F]{1,16})")
# Characters no name or path read from sysfs may hold: C0 controls, DEL, NEL and the Unicode line
# and paragraph separators (they would split a log line or a YAML scalar).
CONTROL_CHARS = frozenset([*map(chr, range(0x20)), "\x7f", "\x85", "\u2028", "\u2029"])
_DEVNAME = re.compile(r"[A-Za-z0-9_.:+@=,-]{1,255}(/[A-Za-z0-9_.:+@=,-]{1,255}){0,15}")  # fullmatch
MAX_DEVNAME = 255


def has_control(text: str) -> bool:
    """Whether ``text`` holds a character of :data:`CONTROL_CHARS`."""
    return not CONTROL_CHARS.isdisjoint(text)


def dec(text: str | None) -> int | None:
    """An unsigned decimal number in ASCII (surrounding blanks allowed), else None."""
    if text is None:
        return None
    text = text.strip(" \t\n")
    return int(text) if _DEC.fullmatch(text) else None


def hexnum(text: str | None) -> int | None:
    """An unsigned hexadecimal number in ASCII, with or without ``0x``, else None."""
    if text is None:
        return None
    m = _HEX.fullmatch(text.strip(" \t\n"))
    return int(m.group(1), 16) if m else None


def dev_numbers(major: str | None, minor: str | None) -> tuple[int, int] | None:
    """A node's (major, minor), when both are ASCII numbers within ``dev_t``."""
    ma, mi = dec(major), dec(minor)
    if ma is None or mi is None or ma > MAX_MAJOR or mi > MAX_MINOR:
        return None
    return ma, mi


def devname_problem(name: str) -> str | None:
    """Why ``name`` (relative to /dev) cannot be a device node's name, or None."""
    if not name or len(name) > MAX_DEVNAME:
        return "empty or too long"
    if has_control(name):
        return "it contains a control or line-separator character"
    if name.startswith("/"):
        return "it is an absolute path"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "it has an empty, '.' or '..' component"
    if not _DEVNAME.fullmatch(name):
        return "it holds a character no kernel device name uses (letters, digits, _.:+@=,-)"
    return None
