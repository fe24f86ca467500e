"""Every kind of device the real inventory publishes, prepared and unprepared by the test kubelet.

The fixture machine is built with tests/support/sysfs_builder.py and walked with the real
``Sources.walk``; each published device is claimed alone, and the claim's CDI spec must name
exactly the nodes the inventory says a claim on it delivers (rules: delivery.nodes-only).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from liken_devices.inventory import MachineSpec, SerioEntry
from liken_devices.inventory.model import NO_CLAIMS, Claimed
from liken_devices.plugin.cdi import ROOT_ONLY
from tests.support.fakeapi import FakeApiServer
from tests.support.sysfs_builder import Dev, SysfsBuilder, bare_sources

from .cdi_schema import check_claim_spec
from .conftest import cdi_files, new_claim
from .kubelet import TestKubelet

PULSE8 = SerioEntry("pulse8-cec", "2548", "1002")


class FixtureMachine:
    def __init__(self, root: Path) -> None:
        self.b = b = SysfsBuilder(root / "sys")
        self.sources = bare_sources(root)
        self.machine = MachineSpec()
        gpu = b.gpu()  # render + card
        b.node(gpu, "i2c-dev", "i2c-3", 89, 3, subdir="i2c-3/i2c-dev")
        b.hda()  # sound card with two jack inputs
        hid = b.usb_device("1-2", devnum=4)
        intf = b.usb_interface(hid, "1.0", driver="usbhid", cls=3)
        b.node(intf, "hidraw", "hidraw0", 242, 0, subdir="0003:1234:5678.0001/hidraw")
        sdr = b.usb_device("1-3", devnum=5)  # no kernel driver: published whole
        b.usb_interface(sdr, "1.0", driver=None, cls=0xFF)
        bt = b.usb_device("1-8", devnum=3)
        radio = b.usb_interface(bt, "1.0", driver="btusb", cls=0xE0)
        b.usb_interface(bt, "1.1", driver="btusb", cls=0xE0)
        b.device(radio, "hci0", "bluetooth", {"DEVTYPE": "host"}, subdir="bluetooth")
        ser = b.pci("0000:00:1e.0", driver="exar_serial", cls=0x070002)
        b.node(ser, "tty", "ttyS4", 4, 68, subdir="tty")
        sata = b.pci("0000:00:17.0", driver="ahci", cls=0x010601)
        b.node(sata, "block", "sdb", 8, 16, block=True, subdir="host0/target0:0:0/0:0:0:0/block")
        # A USB-CEC adapter's serial line, not attached yet.
        cec = b.usb_device("1-5", devnum=6, vendor="2548", product="1002", serial="P8-1")
        acm = b.usb_interface(cec, "1.0", driver="cdc_acm", cls=2)
        self.line = b.node(acm, "tty", "ttyACM0", 166, 0, subdir="tty")

    def attach_serio(self) -> None:
        """spec.serio declares the adapter and the machine attaches the line."""
        self.machine = MachineSpec(serio=(PULSE8,))
        serio = self.b.device(self.line, "serio2", "serio", driver="pulse8-cec")
        self.b.node(serio, "cec", "cec0", 511, 0, subdir="cec")
        rc = self.b.device(serio, "rc0", "rc", subdir="rc")
        inp = self.b.device(rc, "input30", "input")
        self.b.node(inp, "input", "event30", 13, 94, devname="input/event30")

    def walk(self, *, claimed: Claimed = NO_CLAIMS) -> Any:
        return self.sources.walk(self.machine, claimed=claimed)


@pytest.fixture
def fm(tmp_path: Path) -> FixtureMachine:
    return FixtureMachine(tmp_path / "m")


def nodes_in_spec(cdi_dir: Path, uid: str, device: str) -> list[dict[str, Any]]:
    spec = json.loads((cdi_dir / f"liken.sh-{uid}.json").read_text())
    check_claim_spec(spec, uid)
    (d,) = [d for d in spec["devices"] if d["name"] == f"{uid}-{device}"]
    return list(d["containerEdits"]["deviceNodes"])


def test_every_published_device_prepares(api: FakeApiServer, make_plugin: Any,
                                         fm: FixtureMachine) -> None:
    plugin = make_plugin(walk=fm.walk, sysfs=fm.sources.sysfs)
    k = TestKubelet(plugin.config.registration_socket)
    k.register()
    inv = fm.walk()
    kinds = {d.name: d.kind for d in inv.devices}
    # The kinds docs/rules/ names, as the real inventory publishes them from this tree.
    for name in ("pci-0000-00-02-0", "pci-0000-00-02-0-display", "pci-0000-00-02-0-i2c-dev",
                 "pci-0000-00-1f-3", "usb-1-2-1-0", "usb-1-3", "usb-1-8-1-0",
                 "pci-0000-00-1e-0", "pci-0000-00-17-0", "usb-1-5-1-0"):
        assert name in kinds, (name, sorted(kinds))
    for d in inv.devices:
        claim = new_claim(api, [d.name])
        ans = k.prepare([claim])[claim[1]]
        assert ans.error == "", (d.name, ans.error)
        assert ans.devices[0]["cdi"] == [f"liken.sh/device={claim[1]}-{d.name}"]
        assert nodes_in_spec(plugin.config.cdi_dir, claim[1], d.name) == [
            n.to_json() | ROOT_ONLY.to_json() for n in d.nodes], d.name  # an empty /dev
        assert k.unprepare([claim]) == {claim[1]: ""}
    assert cdi_files(plugin.config.cdi_dir) == []
    k.close()


def test_bare_name_then_serio_entry(api: FakeApiServer, make_plugin: Any,
                                    fm: FixtureMachine) -> None:
    """rules: serial.bare-name-claim. A claim on the bare name gets the nonexistent node
    once spec.serio reserves the line; -cec and -input are claimed instead."""
    plugin = make_plugin(walk=fm.walk, sysfs=fm.sources.sysfs)
    k = TestKubelet(plugin.config.registration_socket)
    k.register()
    bare = new_claim(api, ["usb-1-5-1-0"])
    assert k.prepare([bare])[bare[1]].error == ""
    assert [n["path"] for n in nodes_in_spec(plugin.config.cdi_dir, bare[1], "usb-1-5-1-0")] == [
        "/dev/ttyACM0", "/dev/bus/usb/001/006"]
    fm.attach_serio()
    assert plugin.reconcile(fm.walk()) == [bare[1]]
    assert all(n == {"path": f"/dev/.liken.sh-absent/usb-1-5-1-0/{x}"} for n, x in zip(
        nodes_in_spec(plugin.config.cdi_dir, bare[1], "usb-1-5-1-0"),
        ("ttyACM0", "bus/usb/001/006"), strict=True))
    # A new claim on the bare name is refused; -cec and -input deliver their own nodes only.
    again = new_claim(api, ["usb-1-5-1-0"])
    assert "not offered" in k.prepare([again])[again[1]].error
    both = new_claim(api, [], results=[{"request": "bus", "device": "usb-1-5-1-0-cec"},
                                       {"request": "remote", "device": "usb-1-5-1-0-input"}])
    assert k.prepare([both])[both[1]].error == ""
    assert nodes_in_spec(plugin.config.cdi_dir, both[1], "usb-1-5-1-0-cec") == [
        {"path": "/dev/cec0", "type": "c", "major": 511, "minor": 0, **ROOT_ONLY.to_json()}]
    assert nodes_in_spec(plugin.config.cdi_dir, both[1], "usb-1-5-1-0-input") == [
        {"path": "/dev/input/event30", "type": "c", "major": 13, "minor": 94,
         **ROOT_ONLY.to_json()}]
    assert plugin.prepared()[both[1]].usb_interfaces == []  # no usbfs: nothing to give back
    assert k.unprepare([bare, both]) == {bare[1]: "", both[1]: ""}
    assert cdi_files(plugin.config.cdi_dir) == []
    k.close()


def test_bluetooth_claim_states_only_numbers_no_other_device_holds(
        api: FakeApiServer, make_plugin: Any, fm: FixtureMachine,
        capsys: pytest.CaptureFixture[str]) -> None:
    """rules: bluetooth.event-numbers-exclusive. The sound card's
    jacks and, once attached, the CEC remote hold event numbers of their own; the Bluetooth
    claim's spec leaves them out, each reconcile pass writes the current set, and ``claims``
    says which numbers and whose they are."""
    from liken_devices.cli import main
    from liken_devices.plugin.prepared import claims_view

    plugin = make_plugin(walk=fm.walk, sysfs=fm.sources.sysfs)
    k = TestKubelet(plugin.config.registration_socket)
    k.register()
    claim = new_claim(api, ["usb-1-8-1-0"])
    uid = claim[1]
    assert k.prepare([claim])[uid].error == ""

    def minors() -> set[int]:
        return {n["minor"] for n in nodes_in_spec(plugin.config.cdi_dir, uid, "usb-1-8-1-0")
                if n["major"] == 13}

    def left_out() -> list[tuple[int, str]]:
        (c,) = claims_view(plugin.config.state_dir, fm.walk())
        return [(x["minor"], x["owner"]) for x in c["devices"][0]["leftOut"]]

    jacks = {84, 85}  # the sound card's two jack inputs, event20 and event21
    assert minors() == set(range(64, 96)) - jacks
    assert left_out() == [(84, "pci 0000:00:1f.3"), (85, "pci 0000:00:1f.3")]
    root = fm.sources.sysfs.parent
    assert main(["claims", "--state-dir", str(plugin.config.state_dir), "--sysfs",
                 str(fm.sources.sysfs), "--facts", str(root / "facts"), "--modules-dir",
                 str(root / "mods"), "--hwdata-dir", str(root / "hw")]) == 0
    text = capsys.readouterr().out
    assert "left out: 13:84 is /dev/input/event20, the node of pci 0000:00:1f.3" in text
    assert "left out: 13:85 is /dev/input/event21, the node of pci 0000:00:1f.3" in text
    fm.attach_serio()  # the CEC adapter's remote registers event30 (13:94)
    assert plugin.reconcile(fm.walk()) == [uid]
    assert minors() == set(range(64, 96)) - jacks - {94}
    assert left_out()[-1] == (94, "usb 1-5:1.0")
    fm.b.remove(Dev(f"{fm.line.path}/serio2"))  # the line is released: 94 is free
    assert plugin.reconcile(fm.walk()) == [uid]
    assert minors() == set(range(64, 96)) - jacks
    assert k.unprepare([claim]) == {uid: ""}
    k.close()
