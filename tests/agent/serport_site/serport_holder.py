"""The real holder under serport's rules (:func:`tests.machine.serport_tty.hold`), with what the
serio port's registration does on a node: while the read lasts the port is registered under the
tty and pulse8-cec binds it (the CEC adapter and the remote's input device appear in the test's
sysfs tree); when the read ends the port is unregistered. Each (un)registration sends a real
kernel uevent (a synthetic one on a virtual tty), as the port's own would.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

from tests.machine import serport_tty
from tests.support.sysfs_builder import Dev, SysfsBuilder

cfg = json.loads(Path(os.environ["LIKEN_TEST_SERPORT"]).read_text())
SYNTHETIC_TTY = Path("/sys/devices/virtual/tty/tty9/uevent")


def uevent(action: str) -> None:
    SYNTHETIC_TTY.write_text(f"{action} {uuid.uuid4()}\n")


def main() -> int:
    b = SysfsBuilder(Path(cfg["sysfs"]))
    ports: list[Dev] = []

    def register() -> None:
        port = b.device(Dev(cfg["tty"]), "serio0", "serio", {"SERIO_TYPE": "02",
                                                             "SERIO_PROTO": "40"},
                        driver="pulse8-cec")
        b.node(port, "cec", "cec0", 240, 0, subdir="cec")
        rc = b.device(port, "rc0", "rc", subdir="rc")
        inp = b.device(rc, "input7", "input", {"NAME": "Pulse-Eight CEC"})
        b.node(inp, "input", "event7", 13, 71, devname="input/event7")
        ports.append(port)
        uevent("add")

    def unregister() -> None:
        b.remove(ports.pop())
        uevent("remove")

    return serport_tty.hold(sys.argv[1:], Path(cfg["state"]), register, unregister)


if __name__ == "__main__":
    sys.exit(main())
