"""The child process that asks one render node's driver: ``python -m liken_devices.media.child
/dev/dri/renderDN``.

It is the only place libva is loaded (the parent never loads libva, so a driver that hangs or
crashes takes down only this process, which the parent kills after the timeout; docs/media.md).
It prints one JSON object on its stdout: ``{"ok": true, "vendor", "version",
"pairs": [[profile, entrypoint, rtformat]], "vpp": [fourcc] | null, "messages", "dropped"}`` or
``{"ok": false, "error", "messages", "dropped"}`` (``dropped``: libva messages counted, not
kept). Before loading libva it moves its stdout onto stderr, so whatever
libva or a driver prints cannot corrupt the answer; the JSON goes out on a duplicate of the
original stdout. It imports as little as it can: it starts once per render node.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m liken_devices.media.child /dev/dri/renderDN", file=sys.stderr)
        return 2
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    doc: dict[str, Any]
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
    with os.fdopen(answer_fd, "w", encoding="utf-8") as out:
        json.dump(doc, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
