"""The real holder (:mod:`liken_devices.machine.holder`) under serport's rules, for this kernel.

drivers/input/serio/serport.c: one reader at a time holds a line (a second ``read()`` fails with
EBUSY); while the read lasts the serio port is registered under the tty, and pulse8-cec binds it
(the CEC adapter and the remote's input device appear); when the read ends the port is
unregistered. Here the one-reader rule is an ``flock`` on a file that stands for the line, the
port's registration is written into the test's sysfs tree, and each (un)registration sends a
real kernel uevent (a synthetic one on a virtual tty), as the port's own would.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import sys
import uuid
from pathlib import Path

from liken_devices.machine import holder
from tests.support.sysfs_builder import Dev, SysfsBuilder

cfg = json.loads(Path(os.environ["LIKEN_TEST_SERPORT"]).read_text())
SYNTHETIC_TTY = Path("/sys/devices/virtual/tty/tty9/uevent")


def uevent(action: str) -> None:
    SYNTHETIC_TTY.write_text(f"{action} {uuid.uuid4()}\n")


def register(b: SysfsBuilder) -> Dev:
    port = b.device(Dev(cfg["tty"]), "serio0", "serio", {"SERIO_TYPE": "02",
                                                         "SERIO_PROTO": "40"},
                    driver="pulse8-cec")
    b.node(port, "cec", "cec0", 240, 0, subdir="cec")
    rc = b.device(port, "rc0", "rc", subdir="rc")
    inp = b.device(rc, "input7", "input", {"NAME": "Pulse-Eight CEC"})
    b.node(inp, "input", "event7", 13, 71, devname="input/event7")
    uevent("add")
    return port


def main() -> int:
    lock = os.open(cfg["line"], os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        tty_fd, real_read = int(sys.argv[1]), os.read

        def busy_read(fd: int, n: int) -> bytes:
            if fd == tty_fd:  # serport_ldisc_read: SERPORT_BUSY already set
                raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))
            return real_read(fd, n)

        os.read = busy_read
        return holder.main(sys.argv[1:])
    b = SysfsBuilder(Path(cfg["sysfs"]))
    port = register(b)
    done = False

    def unregister() -> None:
        nonlocal done
        if not done:
            done = True
            b.remove(port)
            uevent("remove")

    real_exit = os._exit

    def exit_(code: int) -> None:  # the holder's lifeline ends it with os._exit
        unregister()
        real_exit(code)

    os._exit = exit_  # type: ignore[assignment]
    try:
        return holder.main(sys.argv[1:])
    finally:
        unregister()


if __name__ == "__main__":
    sys.exit(main())
