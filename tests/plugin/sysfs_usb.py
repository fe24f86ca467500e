"""A USB device in a fixture sysfs tree, and a drivers_probe that records what is written.

The layout is the kernel's: the device under ``devices/.../usbN/<port>`` with ``busnum`` and
``devnum``, interfaces ``<port>:<config>.<n>`` beside it with a ``driver`` link into
``bus/usb/drivers/<name>``, and ``bus/usb/devices/`` links to each. ``drivers_probe`` is a FIFO
read by a thread, so every write the plugin makes is seen.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

USB1 = "devices/pci0000:00/0000:00:14.0/usb1"


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink():
        link.unlink()
    link.symlink_to(os.path.relpath(target, link.parent))


def build_usb_device(sysfs: Path, port: str, busnum: int, devnum: int,
                     interfaces: dict[str, str | None]) -> Path:
    dev = sysfs / USB1 / port
    dev.mkdir(parents=True, exist_ok=True)
    (dev / "busnum").write_text(f"{busnum}\n")
    (dev / "devnum").write_text(f"{devnum}\n")
    _link(sysfs / "bus/usb/devices" / port, dev)
    for intf, driver in interfaces.items():
        d = dev / intf
        d.mkdir(exist_ok=True)
        _link(sysfs / "bus/usb/devices" / intf, d)
        if (d / "driver").is_symlink():
            (d / "driver").unlink()
        if driver is not None:
            drv = sysfs / "bus/usb/drivers" / driver
            drv.mkdir(parents=True, exist_ok=True)
            _link(d / "driver", drv)
    return dev


@contextlib.contextmanager
def probe_log(sysfs: Path) -> Iterator[list[str]]:
    fifo = sysfs / "bus/usb/drivers_probe"
    fifo.parent.mkdir(parents=True, exist_ok=True)
    if fifo.exists():
        fifo.unlink()
    os.mkfifo(fifo)
    written: list[str] = []
    data: list[str] = []

    def reader() -> None:
        while True:
            with open(fifo) as f:
                chunk = f.read()
            data.append(chunk)
            if "STOP" in chunk:
                return

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        yield written
    finally:
        with open(fifo, "w") as f:
            f.write("STOP")
        t.join(10)
        fifo.unlink()
        # Writes are whole interface names; two may arrive in one read.
        written.extend(re.findall(r"\d+-[\d.]+:\d+\.\d+?(?=\d+-|STOP|$)", "".join(data)))
