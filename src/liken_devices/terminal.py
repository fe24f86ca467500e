"""Strings from outside made safe for a terminal and a log line: the one cleaning function.

What a node writes (a slice's attributes, a Machine's status), what an API server answers, what a
driver prints and what a file names all reach an operator's terminal or a log. A character that
is not text there acts instead of being read: ESC and CSI start escape sequences (set the window
title, write the clipboard, clear the screen), a carriage return or backspace overwrites what was
printed, a newline or U+2028 forges a line, the bidirectional overrides and isolates reorder what
follows (the "Trojan Source" characters), and zero-width characters make two different names look
alike. Every such character is shown as its Python escape (``\\x1b``, ``\\r``, ``\\u202e``,
``\\u200b``): the operator sees that it is there, and it does nothing.

Escaped: every character Python does not call printable (Unicode's controls Cc, formats Cf, which
hold the bidi and zero-width characters, line and paragraph separators, spaces other than the
ASCII space, surrogates, private-use and unassigned code points), and the few letters and marks
Unicode draws as nothing (the Hangul fillers, the combining grapheme joiner, the braille blank).
Machine-readable output (``-o json``, ``-o yaml``) is never cleaned: it stays exact.
"""

from __future__ import annotations

# Printable to Python, yet drawn as nothing: a name holding one looks like a name without it.
_INVISIBLE = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u2800\u3164\uffa0")


def _escape(ch: str) -> str:
    if ch in _INVISIBLE or not ch.isprintable():
        return ch.encode("unicode_escape").decode("ascii")
    return ch


def clean(text: object, limit: int | None = None) -> str:
    """``text`` (``str()`` of it) as one line for a terminal or a log: every control, format
    (bidi, zero-width), separator or invisible character written as its escape. With ``limit``,
    at most ``limit`` characters of the result, then ``...``."""
    s = str(text)
    if limit is not None:
        s = s[:limit + 1]
    if not (s.isascii() and s.isprintable()):
        s = "".join(_escape(ch) for ch in s)
    if limit is not None and len(s) > limit:
        return s[:limit] + "..."
    return s


def clean_row(cells: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Each cell of a table row cleaned (before the widths are measured)."""
    return tuple(clean(c) for c in cells)
