"""A claimed USB device keeps its shape until its claim ends (rules: usb.claimed-keeps-shape).

The agent and its embedded kubelet plugin in one process, over a built sysfs tree; real uevents
wake the walks. A claim on a HID interface is prepared through the test kubelet; a libusb
program then holds the interface (the kernel shows ``usbfs`` as its driver and the hidraw node
is gone), exits (no driver), and the claim ends (unprepare writes ``drivers_probe``; the kernel,
played by the test, binds ``usbhid`` again). At each step the slice the loopback API server
stores, the claim's CDI spec and the plugin's health stream are checked.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from liken_devices.agent.cli import run_options
from liken_devices.agent.run import Assembled, assemble
from liken_devices.cli import build_parser
from liken_devices.inventory import Inventory
from tests.plugin.kubelet import TestKubelet
from tests.support.fakeapi import FakeApiServer
from tests.support.sysfs_builder import Dev

from .node import FixtureNode, is_root, synthetic_uevent

pytestmark = [pytest.mark.root, pytest.mark.skipif(not is_root(), reason="real uevents")]

GPU = ["pci-0000-00-02-0", "pci-0000-00-02-0-display"]
UPS = "usb-1-2-1-0"  # the interface a Network UPS Tools pod claims
UPS_WHOLE = "usb-1-2"
USBFS = "/dev/bus/usb/001/003"
HEALTHY = 1


class Node:
    """The fixture node, the agent with its plugin, and the test kubelet."""

    def __init__(self, api: FakeApiServer, root: Path, sockets: Path) -> None:
        self.api = api
        self.fixture = FixtureNode(root / "node")
        b = self.fixture.builder
        self.usb = b.usb_device("1-2", devnum=3)
        self.iface = b.usb_interface(self.usb, "1.0", driver="usbhid", cls=3)
        self.hidraw: Dev | None = None
        self.bind_usbhid()
        self.name = f"claimed-{uuid.uuid4().hex[:8]}"
        api.add_node(self.name)
        api.add_machine(self.name, {})
        self.cdi = root / "cdi"
        self.registry = sockets / "registry"
        args = build_parser().parse_args([
            "run", "--node", self.name, *self.fixture.args(),
            "--kubeconfig", str(api.write_kubeconfig(root / "kubeconfig")),
            "--api-timeout", "2", "--console", str(root / "console"),
            "--cdi-dir", str(self.cdi), "--state-dir", str(root / "state"),
            "--plugin-dir", str(sockets / "plugin"), "--registry-dir", str(self.registry),
            "--no-machine-side", "--quiet-seconds", "0.2"])
        self.built: Assembled = assemble(run_options(args))
        self.agent = self.built.agent
        plugin = self.agent.plugin
        assert plugin is not None
        self.plugin: Any = plugin
        # Every finished reconcile pass, with the inventory it was given.
        self.passes: list[Inventory] = []
        reconcile = plugin.reconcile

        def counted(inv: Inventory) -> list[str]:
            try:
                return reconcile(inv)
            finally:
                self.passes.append(inv)

        setattr(plugin, "reconcile", counted)  # noqa: B010 (a method replaced on one object)
        self.thread = threading.Thread(target=self.agent.run, daemon=True)
        self.kubelet = TestKubelet(self.registry / "liken.sh-reg.sock")
        self.health: list[list[tuple[str, str, int]]] = []
        self._health_thread: threading.Thread | None = None

    # -- the kernel, as the test plays it ---------------------------------------------------------

    def bind_usbhid(self) -> None:
        b = self.fixture.builder
        b.set_driver(self.iface, "usb", "usbhid")
        self.hidraw = b.node(self.iface, "hidraw", "hidraw2", 242, 2, subdir="hidraw")

    def program_holds(self) -> None:
        """libusb detaches usbhid (its hidraw node goes) and claims the interface: usbfs."""
        assert self.hidraw is not None
        self.fixture.builder.remove(self.hidraw)
        self.hidraw = None
        self.fixture.builder.set_driver(self.iface, "usb", "usbfs")

    def program_exits(self) -> None:
        """The program ends inside the running pod: the interface has no driver."""
        self.fixture.builder.set_driver(self.iface, "usb", None)

    # -- what the API server, the CDI dir and the health stream show ------------------------------

    def slice_names(self) -> list[str]:
        obj = self.api.get_object("resourceslices", f"{self.name}-liken.sh")
        return [d["name"] for d in (obj or {}).get("spec", {}).get("devices") or []]

    def spec_nodes(self, uid: str, device: str) -> list[dict[str, Any]]:
        spec = json.loads((self.cdi / f"liken.sh-{uid}.json").read_text())
        (d,) = [d for d in spec["devices"] if d["name"] == f"{uid}-{device}"]
        return list(d["containerEdits"]["deviceNodes"])

    def spec_paths(self, uid: str, device: str) -> list[str]:
        return [n["path"] for n in self.spec_nodes(uid, device)]

    def watch_health(self) -> None:
        def run() -> None:
            for message in self.kubelet.watch_health(timeout=120):
                self.health.append(message)

        self._health_thread = threading.Thread(target=run, daemon=True)
        self._health_thread.start()

    # -- driving ----------------------------------------------------------------------------------

    def after_walk(self, change: Callable[[], None], seen: Callable[[Inventory], bool]) -> None:
        """Change the tree, send a real uevent, and wait for a finished pass that saw it."""
        before = len(self.passes)
        change()
        synthetic_uevent("add")
        self.api.wait_for(lambda: len(self.passes) > before and seen(self.passes[-1]), 15)
        # The slice is written before the reconcile pass: it is already there.

    def start(self) -> None:
        self.thread.start()
        assert self.agent.ready.wait(15)
        self.api.wait_for(lambda: (self.registry / "liken.sh-reg.sock").exists(), 10)
        self.kubelet.register()

    def stop(self) -> None:
        self.kubelet.close()
        self.agent.request_stop()
        self.thread.join(10)
        self.built.close()
        assert not self.thread.is_alive()


def reason_of(inv: Inventory, address: str) -> str | None:
    (o,) = [o for o in inv.outcomes if o.address == address]
    return o.reason


@pytest.fixture
def sockets() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="lkc-", dir="/tmp"))  # sun_path is 108 bytes
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_a_claimed_interface_keeps_its_shape_while_its_program_leaves_it(
        api: FakeApiServer, tmp_path: Path, sockets: Path) -> None:
    node = Node(api, tmp_path, sockets)
    node.start()
    try:
        api.wait_for(lambda: node.slice_names() == sorted([*GPU, UPS]), 15)
        claim = api.add_claim("default", "ups", results=[{"request": "ups", "device": UPS}],
                              node=node.name)
        uid = claim["metadata"]["uid"]
        ref = ("default", uid, "ups")
        assert node.kubelet.prepare([ref])[uid].error == ""
        assert node.spec_paths(uid, UPS) == ["/dev/hidraw2", USBFS]
        node.watch_health()
        api.wait_for(lambda: node.health[-1:] == [[(node.name, UPS, HEALTHY)]], 10)

        # The pod's program detaches usbhid and holds the interface through usbfs: the
        # interface leaves the slice (rules: usb.held-by-program); the claim keeps the usbfs node.
        node.after_walk(node.program_holds,
                        lambda inv: reason_of(inv, "1-2:1.0") == "held by a program through "
                                                                 "usbfs")
        assert node.slice_names() == GPU
        assert node.spec_paths(uid, UPS) == [USBFS]
        assert node.spec_nodes(uid, UPS)[0]["major"] == 189

        # The program exits inside the running pod: the kernel shows no driver on any interface.
        # Nothing changes: the device does not publish whole, the spec keeps the current usbfs
        # node, the device stays healthy.
        node.after_walk(node.program_exits,
                        lambda inv: reason_of(inv, "1-2:1.0") == "held by a claim")
        assert node.slice_names() == GPU
        assert UPS_WHOLE not in node.slice_names()
        assert node.spec_paths(uid, UPS) == [USBFS]
        assert node.spec_nodes(uid, UPS)[0]["minor"] == 2
        assert node.plugin.health()[1][0].healthy
        # A second claim allocated the whole device from an older slice gets nothing.
        second = api.add_claim("default", "second", results=[{"request": "r",
                                                              "device": UPS_WHOLE}],
                               node=node.name)
        sid = second["metadata"]["uid"]
        assert "not offered" in node.kubelet.prepare([("default", sid, "second")])[sid].error
        time.sleep(0.5)  # let the stream deliver anything the passes changed
        assert node.health and all(m == [(node.name, UPS, HEALTHY)] for m in node.health), \
            node.health

        # The claim ends: unprepare gives the interface back (drivers_probe) and the agent walks
        # by itself, publishing what the kernel then shows: still no driver, so the whole
        # device; once the kernel binds usbhid again, the interface.
        probe = node.fixture.sysfs / "bus" / "usb" / "drivers_probe"
        assert node.kubelet.unprepare([ref]) == {uid: ""}
        assert probe.read_text() == "1-2:1.0"
        assert not (node.cdi / f"liken.sh-{uid}.json").exists()
        api.wait_for(lambda: node.slice_names() == sorted([*GPU, UPS_WHOLE]), 10)
        node.after_walk(node.bind_usbhid, lambda inv: reason_of(inv, "1-2:1.0") is None)
        assert node.slice_names() == sorted([*GPU, UPS])
        api.wait_for(lambda: node.health[-1:] == [[]], 10)
    finally:
        node.stop()
