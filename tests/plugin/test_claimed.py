"""The plugin shares its prepared claims with every walk: a claimed USB device keeps its shape
until its claim ends, and the 128 cap keeps what is claimed (rules: usb.claimed-keeps-shape).

The plugin's prepare walk is told the claims already prepared, an unprepare asks its embedder for
a walk, ``liken-devices claims`` walks with the state's claims, and a whole-device claim whose
program holds an interface is in use, not absent (the real inventory over a built tree).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from liken_devices.cli import main
from liken_devices.inventory.model import NO_CLAIMS, Claimed, Inventory
from tests.support.fakeapi import FakeApiServer
from tests.support.sysfs_builder import SysfsBuilder, bare_sources

from .conftest import Hardware, new_claim
from .kubelet import TestKubelet


def test_the_prepare_walk_knows_the_claims_already_prepared(
        api: FakeApiServer, plugin: Any, kubelet: TestKubelet, hardware: Hardware) -> None:
    first = new_claim(api, ["usb-1-2-1-0", "pnp-00-01"])
    assert kubelet.prepare([first])[first[1]].error == ""
    assert hardware.claimed[-1] == Claimed(frozenset(), frozenset({"usb-1-2-1-0", "pnp-00-01"}))
    second = new_claim(api, ["usb-1-3"])
    assert kubelet.prepare([second])[second[1]].error == ""
    # Held: the claims already prepared; being prepared (counted, not held): this call's.
    assert hardware.claimed[-1] == Claimed(frozenset({"usb-1-2-1-0", "pnp-00-01"}),
                                           frozenset({"usb-1-3"}))
    assert plugin.claimed() == Claimed(frozenset({"usb-1-2-1-0", "pnp-00-01", "usb-1-3"}))
    assert kubelet.unprepare([first]) == {first[1]: ""}
    assert plugin.claimed() == Claimed(frozenset({"usb-1-3"}))


def test_an_unprepare_that_ends_a_claim_asks_for_a_walk(
        api: FakeApiServer, make_plugin: Any) -> None:
    asked: list[str] = []
    p = make_plugin()
    p.on_release = lambda: asked.append("walk")
    k = TestKubelet(p.config.registration_socket)
    k.register()
    try:
        claim = new_claim(api, ["usb-1-2-1-0"])
        assert k.prepare([claim])[claim[1]].error == ""
        assert asked == []
        never = ("default", "0b7c3a57-93a1-4a8e-9f0d-7a3cd3d3c0de", "never")
        assert k.unprepare([never]) == {never[1]: ""}
        assert asked == []  # nothing was held: nothing publishes differently
        assert k.unprepare([claim]) == {claim[1]: ""}
        assert asked == ["walk"]
    finally:
        k.close()


class Reader:
    """A machine with a libusb device (no kernel driver: published whole) on port 1-3."""

    def __init__(self, root: Path) -> None:
        self.b = SysfsBuilder(root / "sys")
        self.sources = bare_sources(root)
        self.usb = self.b.usb_device("1-3", devnum=5)
        self.iface = self.b.usb_interface(self.usb, "1.0", driver=None, cls=0x0B)

    def walk(self, *, claimed: Claimed = NO_CLAIMS) -> Inventory:
        return self.sources.walk(claimed=claimed)


@pytest.fixture
def reader(tmp_path: Path) -> Reader:
    return Reader(tmp_path / "m")


def spec_nodes(cdi_dir: Path, uid: str, device: str) -> list[dict[str, Any]]:
    spec = json.loads((cdi_dir / f"liken.sh-{uid}.json").read_text())
    (d,) = [d for d in spec["devices"] if d["name"] == f"{uid}-{device}"]
    return list(d["containerEdits"]["deviceNodes"])


def test_a_whole_device_claim_whose_program_holds_an_interface_is_in_use_not_absent(
        api: FakeApiServer, make_plugin: Any, reader: Reader) -> None:
    plugin = make_plugin(walk=reader.walk, sysfs=reader.sources.sysfs)
    k = TestKubelet(plugin.config.registration_socket)
    k.register()
    try:
        assert [d.name for d in reader.walk().devices] == ["usb-1-3"]
        claim = new_claim(api, ["usb-1-3"])
        uid = claim[1]
        assert k.prepare([claim])[uid].error == ""
        usbfs = {"path": "/dev/bus/usb/001/005", "type": "c", "major": 189, "minor": 4}

        def nodes() -> list[dict[str, Any]]:
            return [{key: n[key] for key in ("path", "type", "major", "minor") if key in n}
                    for n in spec_nodes(plugin.config.cdi_dir, uid, "usb-1-3")]

        assert nodes() == [usbfs]
        # pcscd in the pod claims the reader's interface: the kernel shows usbfs as its driver.
        reader.b.set_driver(reader.iface, "usb", "usbfs")
        inv = reader.walk(claimed=plugin.claimed())
        assert [d.name for d in inv.devices] == []  # rules: usb.held-by-program, both shapes
        plugin.reconcile(inv)
        assert nodes() == [usbfs]
        assert [(d.device, d.healthy) for d in plugin.health()[1]] == [("usb-1-3", True)]
        # A prepare again (the kubelet's retry) still resolves it.
        assert k.prepare([claim])[uid].error == ""
        # Without the claim (an offline scan) the device is held by a program, not published.
        assert "usb-1-3" not in reader.walk().held
        # The program lets go: the device returns to the slice whole.
        reader.b.set_driver(reader.iface, "usb", None)
        inv = reader.walk(claimed=plugin.claimed())
        assert [d.name for d in inv.devices] == ["usb-1-3"]
        plugin.reconcile(inv)
        assert nodes() == [usbfs]
        assert k.unprepare([claim]) == {uid: ""}
    finally:
        k.close()


def test_the_claims_command_walks_with_the_prepared_claims(
        api: FakeApiServer, make_plugin: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        ) -> None:
    root = tmp_path / "m"
    b = SysfsBuilder(root / "sys")
    sources = bare_sources(root)
    usb = b.usb_device("1-2", devnum=4)
    iface = b.usb_interface(usb, "1.0", driver="usbhid", cls=3)
    hidraw = b.node(iface, "hidraw", "hidraw0", 242, 0, subdir="hidraw")
    plugin = make_plugin(walk=sources.walk, sysfs=sources.sysfs)
    k = TestKubelet(plugin.config.registration_socket)
    k.register()
    try:
        claim = new_claim(api, ["usb-1-2-1-0"])
        assert k.prepare([claim])[claim[1]].error == ""
        # The program held the interface and exited: only the claim keeps the device's shape.
        b.remove(hidraw)
        b.set_driver(iface, "usb", None)
        args = ["claims", "-o", "json", "--state-dir", str(plugin.config.state_dir),
                "--sysfs", str(root / "sys"), "--facts", str(root / "facts"),
                "--modules-dir", str(root / "mods"), "--hwdata-dir", str(root / "hw")]
        assert main(args) == 0
        (view,) = json.loads(capsys.readouterr().out)
        (device,) = view["devices"]
        assert device["present"] is True
        assert device["nodes"] == [{"path": "/dev/bus/usb/001/004", "type": "c", "major": 189,
                                    "minor": 3}]
        assert k.unprepare([claim]) == {claim[1]: ""}
    finally:
        k.close()


def test_in_a_seamless_upgrade_each_instance_walks_with_the_others_claims(
        api: FakeApiServer, make_plugin: Any) -> None:
    old = make_plugin(pod_uid="3f6a1c2e-0000-4000-8000-00000000a01d")
    new = make_plugin(pod_uid="9b2d4e6f-0000-4000-8000-00000000ee01")
    k = TestKubelet(old.config.registration_socket)
    k.register()
    try:
        claim = new_claim(api, ["usb-1-2-1-0"])
        assert k.prepare([claim])[claim[1]].error == ""
        # The new instance never saw the prepare; its walk still keeps the device's shape.
        assert new.claimed() == Claimed(frozenset({"usb-1-2-1-0"}))
        assert k.unprepare([claim]) == {claim[1]: ""}
        assert new.claimed() == NO_CLAIMS
    finally:
        k.close()


class TwoRadios:
    """Two Bluetooth adapters and a key remapper's uinput keyboard (event2, phys names none)."""

    def __init__(self, root: Path) -> None:
        self.b = b = SysfsBuilder(root / "sys")
        self.sources = bare_sources(root)
        for port, devnum in (("1-8", 3), ("1-9", 4)):
            usb = b.usb_device(port, devnum=devnum)
            radio = b.usb_interface(usb, "1.0", driver="btusb", cls=0xE0)
            b.device(radio, f"hci{devnum - 3}", "bluetooth", {"DEVTYPE": "host"},
                     subdir="bluetooth")
        inp = b.device("/devices/virtual/input", "input42", "input", {"NAME": '"remapper"'})
        b.node(inp, "input", "event2", 13, 66, devname="input/event2")

    def walk(self, *, claimed: Claimed = NO_CLAIMS) -> Inventory:
        return self.sources.walk(claimed=claimed)


def test_a_second_bluetooth_claim_takes_the_unnamed_virtual_node_from_both(
        api: FakeApiServer, make_plugin: Any, tmp_path: Path) -> None:
    """rules: bluetooth.virtual-nodes. A node naming no adapter
    is in a single Bluetooth claim, and in none once two are prepared; the prepare walk counts
    the claim it is preparing, and the reconcile pass rewrites the first claim's spec."""
    radios = TwoRadios(tmp_path / "m")
    plugin = make_plugin(walk=radios.walk, sysfs=radios.sources.sysfs)
    k = TestKubelet(plugin.config.registration_socket)
    k.register()

    def minors(uid: str, device: str) -> set[int]:
        return {int(n["minor"]) for n in spec_nodes(plugin.config.cdi_dir, uid, device)
                if n.get("major") == 13}

    try:
        first = new_claim(api, ["usb-1-8-1-0"])
        assert k.prepare([first])[first[1]].error == ""
        assert 66 in minors(first[1], "usb-1-8-1-0")  # one tenant: the remapper's node is in
        second = new_claim(api, ["usb-1-9-1-0"])
        assert k.prepare([second])[second[1]].error == ""
        assert 66 not in minors(second[1], "usb-1-9-1-0")  # two: in neither
        plugin.reconcile(radios.walk(claimed=plugin.claimed()))
        assert 66 not in minors(first[1], "usb-1-8-1-0")
        assert k.unprepare([second]) == {second[1]: ""}
        plugin.reconcile(radios.walk(claimed=plugin.claimed()))
        assert 66 in minors(first[1], "usb-1-8-1-0")  # one again: back for the next container
    finally:
        k.close()


CLONE_ADDR = "00:1a:7d:da:71:13"  # the BD_ADDR every clone CSR8510 dongle reports


class TwoClones:
    """Two clone CSR8510 radios that report one address, and tenant B's BLE keyboard: a uhid
    device BlueZ made (phys = the adapter's address) holding event8 (13:72)."""

    def __init__(self, root: Path) -> None:
        self.b = b = SysfsBuilder(root / "sys")
        self.sources = bare_sources(root)
        for port, devnum in (("1-8", 3), ("1-9", 4)):
            usb = b.usb_device(port, devnum=devnum, vendor="0a12", product="0001")
            radio = b.usb_interface(usb, "1.0", driver="btusb", cls=0xE0)
            b.device(radio, f"hci{devnum - 3}", "bluetooth", {"DEVTYPE": "host"},
                     subdir="bluetooth", attrs={"address": CLONE_ADDR.upper()})
        inp = b.device("/devices/virtual/misc/uhid/0005:04E8:7021.0001", "input50", "input",
                       {"NAME": '"BLE keyboard"', "PHYS": f'"{CLONE_ADDR}"'}, subdir="input")
        b.node(inp, "input", "event8", 13, 72, devname="input/event8")

    def walk(self, *, claimed: Claimed = NO_CLAIMS) -> Inventory:
        return self.sources.walk(claimed=claimed)


def test_two_radios_at_one_address_give_the_keyboard_to_neither_tenant(
        api: FakeApiServer, make_plugin: Any, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """rules: bluetooth.virtual-nodes. An address is not an identity: two clone radios report
    the same one, so a virtual keyboard whose phys is that address cannot be proved either
    radio's, and neither tenant's claim gets its number; ``claims`` says why."""
    radios = TwoClones(tmp_path / "m")
    plugin = make_plugin(walk=radios.walk, sysfs=radios.sources.sysfs)
    k = TestKubelet(plugin.config.registration_socket)
    k.register()

    def minors(uid: str, device: str) -> set[int]:
        return {int(n["minor"]) for n in spec_nodes(plugin.config.cdi_dir, uid, device)
                if n.get("major") == 13}

    try:
        tenant_a = new_claim(api, ["usb-1-8-1-0"])
        assert k.prepare([tenant_a])[tenant_a[1]].error == ""
        tenant_b = new_claim(api, ["usb-1-9-1-0"])
        assert k.prepare([tenant_b])[tenant_b[1]].error == ""
        plugin.reconcile(radios.walk(claimed=plugin.claimed()))
        assert 72 not in minors(tenant_a[1], "usb-1-8-1-0")
        assert 72 not in minors(tenant_b[1], "usb-1-9-1-0")
        assert {73, 95} <= minors(tenant_a[1], "usb-1-8-1-0")  # the free numbers stay in
        assert main(["claims", "--state-dir", str(plugin.config.state_dir), "--sysfs",
                     str(radios.sources.sysfs), "--facts", str(tmp_path), "--modules-dir",
                     str(tmp_path), "--hwdata-dir", str(tmp_path), "-o", "json"]) == 0
        for claim in json.loads(capsys.readouterr().out):
            (device,) = claim["devices"]
            (why,) = [x["why"] for x in device["leftOut"] if x["minor"] == 72]
            assert f"phys {CLONE_ADDR} is the address of 2 Bluetooth adapters" in why
            assert "usb-1-8-1-0, usb-1-9-1-0" in why
    finally:
        k.close()
