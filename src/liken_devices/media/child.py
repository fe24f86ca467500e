"""The child process that asks one render node's driver (:func:`.probe.child_command` starts it).

It is the only place libva is loaded (the parent never loads libva, so a driver that hangs or
crashes takes down only this process, which the parent kills after the timeout; docs/media.md).
It prints one JSON object on its stdout: ``{"ok": true, "vendor", "version",
"pairs": [[profile, entrypoint, rtformat]], "vpp": [fourcc] | null, "messages", "dropped"}`` or
``{"ok": false, "error", "messages", "dropped"}`` (``dropped``: libva messages counted, not
kept). Before loading libva it moves its stdout onto stderr, so whatever libva or a driver prints
cannot corrupt the answer; the JSON goes out on a duplicate of the original stdout.

It starts once per render node, so it imports only ``os``, ``sys``, ``ctypes`` and the two
modules that speak to libva: no ``json`` (which brings ``re``), no ``typing``, no ``runpy``
(the parent runs it with ``python -I -S -c``); :func:`encode` writes the few JSON types the
answer has.
"""

from __future__ import annotations

import os
import sys

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def encode(value: object) -> str:
    """JSON for None, bools, ints, strings, lists, tuples and dicts with string keys."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, str):
        out = []
        for ch in value:
            if ch in _ESCAPES:
                out.append(_ESCAPES[ch])
            elif ch < " " or "\u007f" <= ch <= "\u009f" or "\ud800" <= ch <= "\udfff":
                out.append(f"\\u{ord(ch):04x}")
            else:
                out.append(ch)
        return '"' + "".join(out) + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(encode(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{encode(str(k))}: {encode(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot encode {type(value).__name__}")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: child /dev/dri/renderDN", file=sys.stderr)
        return 2
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    doc: dict[str, object]
    try:
        from .vaapi import QueryError, query_node  # loads libva: only ever in this process
    except OSError as exc:  # libva.so.2 or libva-drm.so.2 is missing
        doc = {"ok": False, "error": f"cannot load libva: {exc}", "messages": []}
    else:
        try:
            answer = query_node(argv[0])
            doc = {"ok": True, "vendor": answer.vendor, "version": list(answer.version),
                   "pairs": [list(p) for p in answer.pairs], "vpp": answer.vpp_formats,
                   "messages": answer.messages, "dropped": answer.dropped}
        except QueryError as exc:
            doc = {"ok": False, "error": str(exc), "messages": exc.messages,
                   "dropped": exc.dropped}
        except OSError as exc:  # ctypes could not load libva.so.2 or libva-drm.so.2
            doc = {"ok": False, "error": f"cannot load libva: {exc}", "messages": []}
    with os.fdopen(answer_fd, "w", encoding="utf-8", errors="surrogateescape") as out:
        out.write(encode(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
