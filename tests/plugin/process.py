"""The plugin as a process on a fixture machine (``liken-devices plugin``), for the tests that
kill, restart, signal or duplicate it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.sysfs_builder import Dev, SysfsBuilder

from .conftest import NODE
from .kubelet import TestKubelet

LIKEN = [str(Path(sys.executable).with_name("liken-devices"))]


class Node:
    """A fixture machine with a USB HID interface and a serial card, and the plugin process."""

    def __init__(self, root: Path, sockdir: Path, kubeconfig: Path) -> None:
        self.root = root
        self.sockdir = sockdir
        self.kubeconfig = kubeconfig
        self.b = SysfsBuilder(root / "sys")
        usb = self.b.usb_device("1-2", busnum=1, devnum=4)
        self.intf: Dev = self.b.usb_interface(usb, "1.0", driver="usbhid", cls=3)
        self.b.node(self.intf, "hidraw", "hidraw0", 242, 0, subdir="0003:1234:5678.0001/hidraw")
        ser = self.b.pci("0000:00:1e.0", driver="exar_serial", cls=0x070002)
        self.b.node(ser, "tty", "ttyS4", 4, 68, subdir="tty")
        for d in ("facts/storage", "mods", "hw"):
            (root / d).mkdir(parents=True)
        self.cdi = root / "cdi"
        self.state = root / "state"
        self.registration = sockdir / "registry" / "liken.sh-reg.sock"
        self.proc: subprocess.Popen[bytes] | None = None

    def common(self) -> list[str]:
        r = self.root
        return ["--sysfs", str(r / "sys"), "--facts", str(r / "facts"), "--modules-dir",
                str(r / "mods"), "--hwdata-dir", str(r / "hw"), "--node", NODE,
                "--cdi-dir", str(self.cdi), "--state-dir", str(self.state)]

    def start(self, preexec_fn: Callable[[], None] | None = None) -> None:
        assert self.proc is None
        with open(self.root / "plugin.log", "ab") as log:
            self.proc = subprocess.Popen(
                [*LIKEN, "plugin", *self.common(), "--kubeconfig", str(self.kubeconfig),
                 "--plugin-dir", str(self.sockdir / "plugins" / "liken.sh"),
                 "--registry-dir", str(self.sockdir / "registry"), "-v"],
                stdin=subprocess.DEVNULL, stderr=log, preexec_fn=preexec_fn)
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"plugin exited: {(self.root / 'plugin.log').read_text()}")
            try:
                k = TestKubelet(self.registration)
                k.register()
                k.close()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)
        self.proc = None

    def terminate(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(20)
        self.proc = None
        return rc

    def kubelet(self) -> TestKubelet:
        k = TestKubelet(self.registration)
        k.register()
        return k

    def claims(self, output: str = "json") -> list[dict]:
        out = subprocess.run([*LIKEN, "claims", *self.common(), "-o", output],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        if output == "json":
            return json.loads(out.stdout)
        return [{"line": line} for line in out.stdout.splitlines()]
