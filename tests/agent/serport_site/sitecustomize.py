"""serport's part, for agents run as processes on a kernel without the serport line discipline.

Loaded by every Python process the test starts (``PYTHONPATH``), the agents and their holders.
Only what this kernel cannot do is stood in for: the two serio ioctls are not sent, and the
holder runs as :mod:`serport_holder`, which plays serport's rules around the real holder. The
adapter's ``/dev/ttyACM0`` is a link in a test directory to a real pty.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

CONFIG = os.environ.get("LIKEN_TEST_SERPORT")
if CONFIG:
    from liken_devices.machine import serio

    _dev_root = Path(json.loads(Path(CONFIG).read_text())["dev_root"])
    _real_ioctl = serio.LineOps.ioctl
    _real_init = serio.SerioManager.__init__

    def _ioctl(self: serio.LineOps, fd: int, request: int, arg: bytes) -> None:
        if request in (serio.TIOCSETD, serio.SPIOCSTYPE):
            return None
        return _real_ioctl(self, fd, request, arg)

    def _init(self: serio.SerioManager, ops: serio.LineOps | None = None, *,
              dev_root: Path = _dev_root, on_change: object = None) -> None:
        _real_init(self, ops, dev_root=_dev_root, on_change=on_change)  # type: ignore[arg-type]

    serio.LineOps.ioctl = _ioctl  # type: ignore[method-assign]
    serio.SerioManager.__init__ = _init  # type: ignore[method-assign]
    serio.HOLDER_MODULE = "serport_holder"
