"""serport's part, for agents run as processes on a kernel without the serport line discipline.

Loaded by every Python process the test starts (``PYTHONPATH``), the agents and their holders.
The agents' system calls on the adapter's line go through :class:`tests.machine.serport_tty.
SerportOps`, which answers them as a ``ttyACM`` that serport holds answers (termios ``EINVAL``,
``TIOCGETD`` reading ``N_MOUSE``, one reader), and the holder runs as :mod:`serport_holder`,
which also writes the serio port into the test's sysfs tree. The adapter's ``/dev/ttyACM0`` is a
link in a test directory to a real pty.

``LIKEN_TEST_SERPORT_SLOW_EXIT``: seconds an agent waits between its holder's end and the close
of its own descriptor on the line (a pod whose exit is slow on a loaded node): meanwhile the
port is gone but the tty is still open in ``N_MOUSE``, as on a real kernel.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

CONFIG = os.environ.get("LIKEN_TEST_SERPORT")
if CONFIG:
    from liken_devices.machine import serio
    from tests.machine.serport_tty import SerportOps

    _cfg = json.loads(Path(CONFIG).read_text())
    _dev_root = Path(_cfg["dev_root"])
    _slow_exit = float(os.environ.get("LIKEN_TEST_SERPORT_SLOW_EXIT") or 0)
    _real_init = serio.SerioManager.__init__

    class _Ops(SerportOps):
        def close(self, fd: int) -> None:
            if _slow_exit and self.state(fd).ldisc == serio.N_MOUSE:
                time.sleep(_slow_exit)
            super().close(fd)

    def _init(self: serio.SerioManager, ops: serio.LineOps | None = None, *,
              dev_root: Path = _dev_root, on_change: object = None) -> None:
        ops = ops or _Ops(Path(_cfg["state"]), holder_module="serport_holder")
        _real_init(self, ops, dev_root=_dev_root, on_change=on_change)  # type: ignore[arg-type]

    serio.SerioManager.__init__ = _init  # type: ignore[method-assign]
