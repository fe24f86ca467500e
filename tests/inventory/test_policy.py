"""One test per rule of the inventory policy (docs/rules/), each naming the rule it pins.

Trees are built on disk with the builder and read through the real sysfs reader.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from liken_devices.inventory import Context, Facts, Inventory, MachineSpec, SerioEntry
from liken_devices.inventory.catalogs import Catalogs, ModuleCatalog
from liken_devices.inventory.model import Reason
from liken_devices.inventory.names import device_name
from liken_devices.inventory.policy import build_inventory
from liken_devices.sysfs.reader import read_sysfs
from tests.support.sysfs_builder import Dev, SysfsBuilder

Scan = Callable[..., Inventory]


@pytest.fixture
def b(tmp_path: Path) -> SysfsBuilder:
    return SysfsBuilder(tmp_path / "sys")


@pytest.fixture
def scan(b: SysfsBuilder) -> Scan:
    def run(*, roles: frozenset[str] | None = frozenset(), machine: MachineSpec | None = None,
            catalogs: Catalogs | None = None) -> Inventory:
        facts = Facts(roles, None if roles is not None else "facts root missing")
        ctx = Context(facts, machine or MachineSpec(), catalogs or Catalogs())
        return build_inventory(read_sysfs(b.root), ctx)
    return run


def names(inv: Inventory) -> list[str]:
    return [d.name for d in inv.devices]


def dev(inv: Inventory, name: str):  # type: ignore[no-untyped-def]
    return inv.by_name()[name]


def reason(inv: Inventory, address: str) -> str | None:
    found = [o for o in inv.outcomes if o.address == address]
    assert found, f"{address} was not considered"
    return found[0].reason


def paths(inv: Inventory, name: str) -> list[str]:
    return [n.path for n in dev(inv, name).nodes]


def hid_interface(b: SysfsBuilder, usb: Dev, number: str = "1.0", minor: int = 0) -> Dev:
    iface = b.usb_interface(usb, number, driver="usbhid", cls=3)
    hid = b.device(iface, f"0003:1234:5678.000{minor}", "hid")
    b.node(hid, "hidraw", f"hidraw{minor}", 240, minor, subdir="hidraw")
    return iface


# -- What a node publishes: the three conditions ------------------------------------------------


def test_condition1_no_driver_goes_to_unclaimed(b: SysfsBuilder, scan: Scan) -> None:
    """What a node publishes, 1: hardware with no driver supplies nothing; it is unclaimed."""
    b.pci("0000:00:1f.3", vendor="8086", device="51c8", cls=0x040300)
    inv = scan()
    assert names(inv) == []
    assert reason(inv, "0000:00:1f.3") == Reason.NO_DRIVER
    assert [u.address for u in inv.unclaimed] == ["0000:00:1f.3"]


def test_condition2_no_device_node_never_appears(b: SysfsBuilder, scan: Scan) -> None:
    """What a node publishes, 2: a network card is hardware with nothing to give a pod."""
    nic = b.pci("0000:02:00.0", driver="e1000e", cls=0x020000)
    b.device(nic, "eth0", "net", {"INTERFACE": "eth0"}, subdir="net")
    inv = scan()
    assert names(inv) == []
    assert reason(inv, "0000:02:00.0") == Reason.NETWORK_CARD


def test_condition3_disk_backing_a_storage_role_is_never_published(b: SysfsBuilder,
                                                                     scan: Scan) -> None:
    """What a node publishes, 3: a disk belongs to the machine or to a claim, never both."""
    nvme = b.pci("0000:3d:00.0", driver="nvme", cls=0x010802)
    ctrl = b.node(nvme, "nvme", "nvme0", 240, 0, subdir="nvme")
    disk = b.node(ctrl, "block", "nvme0n1", 259, 0, block=True)
    b.node(disk, "block", "nvme0n1p3", 259, 3, block=True)
    inv = scan(roles=frozenset({"nvme0n1p3"}))
    assert names(inv) == []
    assert reason(inv, "0000:3d:00.0") == Reason.STORAGE_ROLE
    # A spare disk (no role on it) is offered.
    assert names(scan(roles=frozenset({"sda1"}))) == ["pci-0000-3d-00-0"]


def test_condition3_unreadable_facts_offer_no_disk_but_keep_the_gpu(b: SysfsBuilder,
                                                                      scan: Scan) -> None:
    """What a node publishes, 3: without facts no disk at all; a GPU has no disk and stays."""
    sata = b.pci("0000:00:17.0", driver="ahci", cls=0x010601)
    b.node(sata, "block", "sda", 8, 0, block=True, subdir="ata1/host0/target0:0:0/0:0:0:0/block")
    b.gpu()
    inv = scan(roles=None)
    assert reason(inv, "0000:00:17.0") == Reason.FACTS_UNREADABLE
    assert names(inv) == ["pci-0000-00-02-0", "pci-0000-00-02-0-display"]
    assert not inv.facts.readable


def test_storage_role_on_dm_follows_slaves(tmp_path: Path) -> None:
    """What a node publishes, 3: a role on a mapped device reaches the partition beneath it."""
    from liken_devices.sysfs.model import DevNode, Snapshot, SysDevice

    disk = SysDevice("/devices/pci0000:00/0000:00:17.0/ata1/host0/block/sda", "block", None, {},
                     node=DevNode("sda", "b", 8, 0))
    part = SysDevice(disk.path + "/sda2", "block", None, {}, node=DevNode("sda2", "b", 8, 2))
    dm = SysDevice("/devices/virtual/block/dm-0", "block", None, {},
                   node=DevNode("dm-0", "b", 253, 0), slaves=("sda2",))
    ahci = SysDevice("/devices/pci0000:00/0000:00:17.0", "pci", "ahci", {"PCI_CLASS": "10601"})
    snap = Snapshot({d.path: d for d in (disk, part, dm, ahci)})
    inv = build_inventory(snap, Context(Facts(frozenset({"dm-0"}))))
    assert reason(inv, "0000:00:17.0") == Reason.STORAGE_ROLE


# -- the four reserved node kinds ---------------------------------------------------------------


def test_console_is_reserved_and_tty0_is_followed(b: SysfsBuilder, scan: Scan) -> None:
    """What a node publishes: the console (class/tty/console/active, tty0 followed) is held."""
    b.console("tty0", "ttyS0", tty0_active="tty1")
    serial = b.board("platform", "serial8250", driver="serial8250")
    b.node(serial, "tty", "ttyS0", 4, 64, subdir="tty")
    b.node(serial, "tty", "ttyS1", 4, 65, subdir="tty")
    inv = scan()
    assert paths(inv, "platform-serial8250") == ["/dev/ttyS1"]
    assert read_sysfs(b.root).console == ("tty0", "tty1", "ttyS0")


def test_rtc0_only_device_does_not_appear(b: SysfsBuilder, scan: Scan) -> None:
    """What a node publishes: /dev/rtc0 is the clock init writes; a device with only it is gone."""
    rtc = b.board("pnp", "00:04", driver="rtc_cmos")
    b.node(rtc, "rtc", "rtc0", 250, 0, subdir="rtc")
    inv = scan()
    assert names(inv) == []
    assert reason(inv, "00:04") == Reason.ONLY_RESERVED


def test_tpm_nodes_are_never_delivered(b: SysfsBuilder, scan: Scan) -> None:
    """What a node publishes: /dev/tpm* and /dev/tpmrm* give the TPM itself to any process."""
    tpm = b.board("platform", "MSFT0101:00", driver="tpm_crb")
    b.node(tpm, "tpm", "tpm0", 10, 224, subdir="tpm")
    b.node(tpm, "tpmrm", "tpmrm0", 253, 65536, subdir="tpmrm")
    inv = scan()
    assert names(inv) == []
    assert reason(inv, "MSFT0101:00") == Reason.ONLY_RESERVED
    assert device_name("platform", "MSFT0101:00") == "platform-msft0101-00"


def test_watchdogs_are_the_machines(b: SysfsBuilder, scan: Scan) -> None:
    """rules: hardware.watchdogs. /dev/watchdog* is reserved like the console; a
    device whose only nodes are watchdogs is not published, another keeps its other nodes."""
    tco = b.board("platform", "iTCO_wdt", driver="iTCO_wdt")
    b.node(tco, "watchdog", "watchdog0", 247, 0, subdir="watchdog")
    b.node(tco, "misc", "watchdog", 10, 130, subdir="misc")
    ipmi = b.pci("0000:00:1f.4", driver="ipmi_si", cls=0x0C0700)
    b.node(ipmi, "watchdog", "watchdog1", 247, 1, subdir="watchdog")
    b.node(ipmi, "ipmi", "ipmi0", 239, 0, subdir="ipmi")
    inv = scan()
    assert names(inv) == ["pci-0000-00-1f-4"]
    assert reason(inv, "iTCO_wdt") == Reason.ONLY_RESERVED
    assert paths(inv, "pci-0000-00-1f-4") == ["/dev/ipmi0"]


def test_reserved_node_dropped_rest_published(b: SysfsBuilder, scan: Scan) -> None:
    """rules: hardware.reserved-nodes. Dropped; the device keeps the rest of its own nodes."""
    lpc = b.pci("0000:00:16.3", driver="serial", cls=0x070002)
    b.node(lpc, "tty", "ttyS4", 4, 68, subdir="tty")
    b.node(lpc, "tty", "ttyS5", 4, 69, subdir="tty")
    b.console("ttyS4")
    inv = scan()
    assert paths(inv, "pci-0000-00-16-3") == ["/dev/ttyS5"]


# -- bus structure and board devices ------------------------------------------------------------


def test_bus_structure_is_not_listed(b: SysfsBuilder, scan: Scan) -> None:
    """What a node publishes: hubs, PCIe ports and root hubs are structure, not peripherals."""
    b.pci("0000:00:00.0", cls=0x060000)
    b.pci("0000:00:1c.0", driver="pcieport", cls=0x060400)
    root = b.usb_device("usb1", devnum=1, dev_class="09", vendor="1d6b", product="0002")
    b.usb_interface(root, "1.0", driver="hub", cls=9)
    hub = b.usb_device("1-1", parent=root, devnum=2, dev_class="09")
    b.usb_interface(hub, "1.0", driver="hub", cls=9)
    inv = scan()
    assert names(inv) == []
    for address in ("0000:00:00.0", "0000:00:1c.0", "usb1", "1-1", "1-1:1.0"):
        assert reason(inv, address) == Reason.BUS_STRUCTURE


def test_outermost_bound_board_device_owns_its_subtree(b: SysfsBuilder, scan: Scan) -> None:
    """rules: hardware.node-owner. i8042 owns the keyboard and mouse behind it (serio0, serio1)."""
    i8042 = b.board("platform", "i8042", driver="i8042")
    for n, minor in (("serio0", 65), ("serio1", 66)):
        serio = b.device(i8042, n, "serio", driver="atkbd" if n == "serio0" else "psmouse")
        inp = b.device(serio, f"input{minor}", "input", subdir="input")
        b.node(inp, "input", f"event{minor - 64}", 13, minor, devname=f"input/event{minor - 64}")
    inv = scan()
    assert names(inv) == ["platform-i8042"]
    assert paths(inv, "platform-i8042") == ["/dev/input/event1", "/dev/input/event2"]
    assert dev(inv, "platform-i8042").attributes["subsystem"] == "input"
    assert "vendor" not in dev(inv, "platform-i8042").attributes  # board: no vendor


def test_acpi_power_button_is_published(b: SysfsBuilder, scan: Scan) -> None:
    """What a node publishes: the ACPI power button is a board device owning a node."""
    root = b.board("acpi", "LNXSYSTM:00", parent="/devices")
    btn = b.board("acpi", "LNXPWRBN:00", driver="button", parent=root)
    inp = b.device(btn, "input0", "input", subdir="input")
    b.node(inp, "input", "event0", 13, 64, devname="input/event0")
    inv = scan()
    assert names(inv) == ["acpi-lnxpwrbn-00"]
    assert dev(inv, "acpi-lnxpwrbn-00").attributes["bus"] == "acpi"


def test_platform_device_inside_pci_is_not_a_board_device(b: SysfsBuilder, scan: Scan) -> None:
    """rules: hardware.considered. A board device's directory is not inside a PCI or USB device."""
    lpss = b.pci("0000:00:15.0", driver="intel-lpss", cls=0x118000)
    i2c = b.board("platform", "i2c_designware.0", driver="i2c_designware", parent=lpss)
    b.node(i2c, "i2c-dev", "i2c-0", 89, 0, subdir="i2c-0/i2c-dev")
    inv = scan()
    assert names(inv) == ["pci-0000-00-15-0"]
    assert not [o for o in inv.outcomes if o.address == "i2c_designware.0"]


# -- device names -------------------------------------------------------------------------------


def test_names_are_bus_and_address_lowercased_with_dashes() -> None:
    """Device names: pci-0000-00-02-0, usb-2-1-1-0, platform-msft0101-00, pnp-00-04."""
    assert device_name("pci", "0000:00:02.0") == "pci-0000-00-02-0"
    assert device_name("usb", "1-2.1:1.0") == "usb-1-2-1-1-0"
    assert device_name("pnp", "00:04") == "pnp-00-04"
    assert device_name("usb", "1-2") == "usb-1-2"


def test_names_stop_at_63_characters_with_suffix_kept() -> None:
    """Device names: a name stops at 63 characters, the limit of a DNS label."""
    address = "device-with-a-very-long-firmware-name-that-goes-on-and-on:00"
    name = device_name("platform", address, "-drm-dp-aux-dev")
    assert len(name) <= 63 and name.endswith("-drm-dp-aux-dev")
    assert not name.removesuffix("-drm-dp-aux-dev").endswith("-")


def test_colliding_cut_names_are_made_unique(b: SysfsBuilder, scan: Scan) -> None:
    """rules: names.collision. Two names equal after the cut get a hash of the full address."""
    long = "a-board-device-whose-firmware-name-is-very-long-indeed-x"
    for n, minor in (("1", 70), ("2", 71)):
        d = b.board("platform", f"{long}{n}.{n}", driver="leds")
        b.node(d, "misc", f"m{minor}", 10, minor, subdir="misc")
    inv = scan()
    got = names(inv)
    assert len(got) == 2 and len(set(got)) == 2
    assert all(len(n) <= 63 for n in got)


def test_name_follows_the_port_not_the_unit(b: SysfsBuilder, scan: Scan) -> None:
    """Device names: an identical dongle in the same port keeps the name; serial tells units."""
    usb = b.usb_device("1-2", serial="UNIT-A")
    hid_interface(b, usb)
    first = scan()
    b.remove(usb)
    usb = b.usb_device("1-2", devnum=7, serial="UNIT-B")
    hid_interface(b, usb)
    second = scan()
    assert names(first) == names(second) == ["usb-1-2-1-0"]
    assert dev(first, "usb-1-2-1-0").attributes["serial"] == "UNIT-A"
    assert dev(second, "usb-1-2-1-0").attributes["serial"] == "UNIT-B"
    assert paths(second, "usb-1-2-1-0")[-1] == "/dev/bus/usb/001/007"


# -- attributes ---------------------------------------------------------------------------------


def test_pci_attributes(b: SysfsBuilder, scan: Scan) -> None:
    """Attributes: bus, address, driver, class, classCode, vendor, product, name, pciBusID."""
    b.gpu()
    a = dev(scan(), "pci-0000-00-02-0").attributes
    assert a["bus"] == "pci" and a["address"] == "0000:00:02.0" and a["driver"] == "i915"
    assert a["class"] == "display" and a["classCode"] == "030000"
    assert a["vendor"] == "8086" and a["product"] == "46a6" and a["name"] == "8086:46a6"
    assert a["resource.kubernetes.io/pciBusID"] == "0000:00:02.0"
    assert str(a["modalias"]).startswith("pci:v00008086")


def test_names_come_from_the_id_catalogs(b: SysfsBuilder, scan: Scan, tmp_path: Path) -> None:
    """Attributes: name is words from pci.ids/usb.ids, or the USB descriptor strings."""
    (tmp_path / "hw").mkdir()
    (tmp_path / "hw" / "pci.ids").write_text(
        "# comment\n8086  Intel Corporation\n\t46a6  Alder Lake-P GT2 [Iris Xe Graphics]\n"
        "C 03  Display controller\n\t00  VGA compatible controller\n")
    (tmp_path / "hw" / "usb.ids").write_text("1234  Example\n")
    b.gpu()
    usb = b.usb_device("1-2", manufacturer="Acme", product_name="Radio \x01Stick")
    hid_interface(b, usb)
    inv = scan(catalogs=Catalogs.load(tmp_path / "none", tmp_path / "hw"))
    assert dev(inv, "pci-0000-00-02-0").attributes["name"] == \
        "Intel Corporation Alder Lake-P GT2 [Iris Xe Graphics]"
    assert dev(inv, "usb-1-2-1-0").attributes["name"] == "Acme Radio ?Stick"


def test_absent_attributes_are_absent_not_empty(b: SysfsBuilder, scan: Scan) -> None:
    """Attributes: has(device.attributes["liken.sh"].serial) gives a correct result."""
    usb = b.usb_device("1-2", serial="")
    hid_interface(b, usb)
    a = dev(scan(), "usb-1-2-1-0").attributes
    assert "serial" not in a
    assert all(v != "" for v in a.values())


def test_strange_serial_bytes_never_break_the_slice(b: SysfsBuilder, scan: Scan) -> None:
    """rules: attributes.bounded. Non-printable UTF-8 is replaced, strings cut to 64 bytes."""
    usb = b.usb_device("1-2", serial=b"\xff\xfe\x00A\xe2\x82\xac" + "é".encode() * 40)
    hid_interface(b, usb)
    serial = dev(scan(), "usb-1-2-1-0").attributes["serial"]
    assert isinstance(serial, str)
    assert len(serial.encode()) <= 64
    assert serial.startswith("???A€é")
    serial.encode("utf-8")  # valid UTF-8


# -- sharing ------------------------------------------------------------------------------------


def test_gpu_splits_render_shared_and_display_exclusive(b: SysfsBuilder, scan: Scan) -> None:
    """Sharing: the render node is the one shareable device; the card node is -display."""
    gpu = b.gpu()
    b.node(gpu, "i2c-dev", "i2c-3", 89, 3, subdir="i2c-3/i2c-dev")
    aux = b.device(gpu, "card0-DP-1", "drm", subdir="drm/card0")
    b.node(aux, "drm_dp_aux_dev", "drm_dp_aux0", 237, 0)
    fb = b.node(gpu, "graphics", "fb0", 29, 0, subdir="graphics")
    del fb
    inv = scan()
    assert names(inv) == ["pci-0000-00-02-0", "pci-0000-00-02-0-display",
                          "pci-0000-00-02-0-drm-dp-aux-dev", "pci-0000-00-02-0-i2c-dev"]
    render = dev(inv, "pci-0000-00-02-0")
    assert render.shareable and render.attributes["renderNode"] is True
    assert paths(inv, "pci-0000-00-02-0") == ["/dev/dri/renderD128"]
    display = dev(inv, "pci-0000-00-02-0-display")
    assert not display.shareable and display.attributes["displayNode"] is True
    assert paths(inv, "pci-0000-00-02-0-display") == ["/dev/dri/card0"]
    assert dev(inv, "pci-0000-00-02-0-i2c-dev").attributes["subsystem"] == "i2c-dev"
    assert dev(inv, "pci-0000-00-02-0-drm-dp-aux-dev").attributes["subsystem"] == \
        "drm_dp_aux_dev"
    # The framebuffer is not delivered by any device.
    assert all(n.name != "fb0" for d in inv.devices for n in d.nodes)
    # Every device of the card carries the card's address, so matchAttribute pairs them.
    assert {d.attributes["address"] for d in inv.devices} == {"0000:00:02.0"}


def test_usb_gpu_shared_render_half_carries_no_usbfs(b: SysfsBuilder, scan: Scan) -> None:
    """rules: sharing.usb-render-no-usbfs. usbfs gives control
    of the whole device, which no shared claim may have; the exclusive display half carries it."""
    usb = b.usb_device("3-1", busnum=3, devnum=4, vendor="1d5c", product="2000")
    iface = b.usb_interface(usb, "1.0", driver="gud", cls=0xFF)
    b.node(iface, "drm", "card1", 226, 1, devname="dri/card1", subdir="drm")
    b.node(iface, "drm", "renderD129", 226, 129, devname="dri/renderD129", subdir="drm")
    inv = scan()
    assert names(inv) == ["usb-3-1-1-0", "usb-3-1-1-0-display"]
    render = dev(inv, "usb-3-1-1-0")
    assert render.shareable
    assert paths(inv, "usb-3-1-1-0") == ["/dev/dri/renderD129"]
    display = dev(inv, "usb-3-1-1-0-display")
    assert not display.shareable
    assert paths(inv, "usb-3-1-1-0-display") == ["/dev/dri/card1", "/dev/bus/usb/003/004"]
    # Property: no shareable device of any shape delivers a usbfs node (major 189).
    assert not [n for d in inv.devices if d.shareable for n in d.nodes if n.major == 189]


def test_gpu_without_render_node_publishes_only_display(b: SysfsBuilder, scan: Scan) -> None:
    """rules: sharing.display-only. A GPU with a card but no render node: only -display."""
    b.gpu(render=None)
    assert names(scan()) == ["pci-0000-00-02-0-display"]


def test_framebuffer_only_device_is_withheld(b: SysfsBuilder, scan: Scan) -> None:
    """Sharing: no workload claims a bare framebuffer."""
    vga = b.pci("0000:00:01.0", driver="bochs-drm-fb", cls=0x030000)
    b.node(vga, "graphics", "fb0", 29, 0, subdir="graphics")
    inv = scan()
    assert names(inv) == []
    assert reason(inv, "0000:00:01.0") == Reason.ONLY_WITHHELD


def test_gpu_with_unknown_mix_is_whole_and_exclusive(b: SysfsBuilder, scan: Scan) -> None:
    """rules: sharing.unknown-mix. A GPU that also holds another kind of node is an unknown mix."""
    gpu = b.gpu()
    b.node(gpu, "misc", "accel0", 10, 99, subdir="misc")
    inv = scan()
    assert names(inv) == ["pci-0000-00-02-0"]
    d = dev(inv, "pci-0000-00-02-0")
    assert not d.shareable and "subsystem" not in d.attributes
    assert "renderNode" not in d.attributes and "displayNode" not in d.attributes
    assert len(d.nodes) == 3


def test_audio_controller_delivers_jack_inputs_and_is_exclusive(b: SysfsBuilder,
                                                                 scan: Scan) -> None:
    """Sharing: an audio controller's claim delivers the card's subtree, jack inputs included."""
    b.hda(jacks=3)
    inv = scan()
    d = dev(inv, "pci-0000-00-1f-3")
    assert not d.shareable
    assert d.attributes["subsystem"] == "sound"
    assert d.attributes["sound.liken.sh/supportsSound"] is True
    assert {"/dev/snd/controlC0", "/dev/snd/pcmC0D0p", "/dev/input/event20",
            "/dev/input/event22"} <= set(paths(inv, "pci-0000-00-1f-3"))


def test_unknown_mix_is_whole_exclusive_without_subsystem(b: SysfsBuilder, scan: Scan) -> None:
    """Sharing: a device that delivers a mix liken has no name for is published whole."""
    usb = b.usb_device("1-3")
    iface = b.usb_interface(usb, driver="uvcvideo", cls=0x0E)
    b.node(iface, "video4linux", "video0", 81, 0, subdir="video4linux")
    inp = b.device(iface, "input9", "input", subdir="input")
    b.node(inp, "input", "event9", 13, 73, devname="input/event9")
    inv = scan()
    d = dev(inv, "usb-1-3-1-0")
    assert "subsystem" not in d.attributes and not d.shareable
    assert paths(inv, "usb-1-3-1-0") == ["/dev/input/event9", "/dev/video0",
                                         "/dev/bus/usb/001/002"]


def test_one_kind_of_node_is_one_device_with_its_subsystem(b: SysfsBuilder, scan: Scan) -> None:
    """Sharing: a device that delivers one kind of node publishes as one device."""
    usb = b.usb_device("1-4")
    iface = b.usb_interface(usb, driver="cdc_acm", cls=2)
    b.node(iface, "tty", "ttyACM0", 166, 0, subdir="tty")
    inv = scan()
    assert dev(inv, "usb-1-4-1-0").attributes["subsystem"] == "tty"


def test_only_render_devices_are_shareable(b: SysfsBuilder, scan: Scan) -> None:
    """Sharing: liken publishes allowMultipleAllocations for one kind: the graphics half."""
    b.gpu()
    b.hda()
    hid_interface(b, b.usb_device("1-2"))
    inv = scan()
    assert [d.name for d in inv.devices if d.shareable] == ["pci-0000-00-02-0"]


# -- USB devices ----------------------------------------------------------------------------------


def test_usb_interfaces_each_deliver_the_usbfs_node(b: SysfsBuilder, scan: Scan) -> None:
    """USB devices: each driven interface is its own device, each with the same usbfs node."""
    usb = b.usb_device("1-2", devnum=5)
    hid_interface(b, usb, "1.0", 0)
    hid_interface(b, usb, "1.1", 1)
    inv = scan()
    assert names(inv) == ["usb-1-2-1-0", "usb-1-2-1-1"]
    for name in names(inv):
        assert paths(inv, name)[-1] == "/dev/bus/usb/001/005"
        assert dev(inv, name).attributes["subsystem"] == "hidraw"  # usbfs does not count


def test_usbfs_alone_never_keeps_an_interface_in_the_slice(b: SysfsBuilder, scan: Scan) -> None:
    """rules: usb.usbfs-alone. The usbfs node belongs to the USB device, not to the interface."""
    usb = b.usb_device("1-2")
    hid_interface(b, usb, "1.0", 0)
    b.usb_interface(usb, "1.1", driver="usbhid", cls=3)  # bound, but no node of its own
    inv = scan()
    assert names(inv) == ["usb-1-2-1-0"]
    assert reason(inv, "1-2:1.1") == Reason.NO_NODE


def test_usb_device_with_no_driver_publishes_whole(b: SysfsBuilder, scan: Scan) -> None:
    """USB devices with no kernel driver: whole, usbfs only, class from the first interface."""
    usb = b.usb_device("1-2", devnum=9, vendor="03c3", product="120a")
    b.usb_interface(usb, "1.1", cls=0xFF)
    b.usb_interface(usb, "1.0", cls=0x0B)
    inv = scan()
    assert names(inv) == ["usb-1-2"]
    d = dev(inv, "usb-1-2")
    assert paths(inv, "usb-1-2") == ["/dev/bus/usb/001/009"]
    assert d.attributes["classCode"] == "0b" and d.attributes["class"] == "smart-card"
    assert "driver" not in d.attributes and "subsystem" not in d.attributes
    assert not d.shareable
    assert reason(inv, "1-2:1.0") == Reason.FOLDED


def test_driven_interface_replaces_the_whole_device(b: SysfsBuilder, scan: Scan) -> None:
    """USB devices with no kernel driver: once a module binds an interface, it publishes."""
    usb = b.usb_device("1-2")
    iface = b.usb_interface(usb, "1.0", cls=3)
    assert names(scan()) == ["usb-1-2"]
    b.set_driver(iface, "usb", "usbhid")
    b.node(b.device(iface, "0003:1234:5678.0001", "hid"), "hidraw", "hidraw0", 240, 0,
           subdir="hidraw")
    assert names(scan()) == ["usb-1-2-1-0"]


def test_interface_held_through_usbfs_leaves_the_slice(b: SysfsBuilder, scan: Scan) -> None:
    """USB devices: a device leaves the slice while a program holds an interface via usbfs."""
    usb = b.usb_device("1-2", devnum=4)
    b.usb_interface(usb, "1.0", driver="usbfs", cls=0xFF)
    inv = scan()
    assert names(inv) == []
    assert reason(inv, "1-2:1.0") == Reason.HELD_BY_PROGRAM
    # The claim that holds it keeps its usbfs node (the hardware is present).
    assert inv.lookup("usb-1-2-1-0") == (read_sysfs(b.root).devices[usb.path].node,)


# -- Bluetooth ----------------------------------------------------------------------------------


def bluetooth(b: SysfsBuilder) -> Dev:
    usb = b.usb_device("1-8", devnum=3, vendor="8087", product="0026")
    radio = b.usb_interface(usb, "1.0", driver="btusb", cls=0xE0)
    b.usb_interface(usb, "1.1", driver="btusb", cls=0xE0)
    hci = b.device(radio, "hci0", "bluetooth", {"DEVTYPE": "host"}, subdir="bluetooth")
    # A connected game controller's HID device sits under the adapter's interface.
    hid = b.device(hci, "hci0:256", "bluetooth")
    pad = b.device(hid, "0005:054C:09CC.0007", "hid")
    b.node(pad, "hidraw", "hidraw3", 240, 3, subdir="hidraw")
    return usb


def test_bluetooth_adapter_delivers_the_fixed_set(b: SysfsBuilder, scan: Scan) -> None:
    """Bluetooth adapters: usbfs, /dev/uinput and the 32 legacy event nodes 13:64..13:95."""
    bluetooth(b)
    inv = scan()
    assert names(inv) == ["usb-1-8-1-0"]
    d = dev(inv, "usb-1-8-1-0")
    assert not d.shareable and "subsystem" not in d.attributes
    nodes = d.nodes
    assert nodes[0].path == "/dev/bus/usb/001/003"
    assert (nodes[1].path, nodes[1].major, nodes[1].minor) == ("/dev/uinput", 10, 223)
    events = [n for n in nodes if n.major == 13]
    assert [(n.minor, n.path) for n in events] == [(64 + i, f"/dev/input/event{i}")
                                                   for i in range(32)]
    assert "/dev/uhid" not in [n.path for n in nodes]
    assert reason(inv, "1-8:1.1") == Reason.FOLDED


def test_bluetooth_walk_stops_at_the_bluetooth_subtree(b: SysfsBuilder, scan: Scan) -> None:
    """Bluetooth adapters: a connected peripheral's hidraw node is not the adapter's."""
    bluetooth(b)
    inv = scan()
    assert all(n.name != "hidraw3" for d in inv.devices for n in d.nodes)


def test_bluetooth_uhid_when_declared(b: SysfsBuilder, scan: Scan) -> None:
    """Bluetooth adapters: /dev/uhid on a machine whose spec.modules declares uhid."""
    bluetooth(b)
    inv = scan(machine=MachineSpec(modules=("uhid",)))
    assert paths(inv, "usb-1-8-1-0")[-1] == "/dev/uhid"
    assert dev(inv, "usb-1-8-1-0").nodes[-1].minor == 239


# -- Serial-line adapters -----------------------------------------------------------------------


PULSE8 = SerioEntry("pulse8-cec", "2548", "1002")


def cec_adapter(b: SysfsBuilder, *, attached: bool, tty: str = "ttyACM0") -> Dev:
    usb = b.usb_device("1-5", devnum=6, vendor="2548", product="1002", serial="P8-1")
    acm = b.usb_interface(usb, "1.0", driver="cdc_acm", cls=2)
    b.usb_interface(usb, "1.1", driver="cdc_acm", cls=0x0A)
    hid_interface(b, usb, "1.2", 4)
    line = b.node(acm, "tty", tty, 166, int(tty[-1]), subdir="tty")
    if attached:
        serio = b.device(line, "serio2", "serio", driver="pulse8-cec")
        b.node(serio, "cec", "cec0", 242, 0, subdir="cec")
        rc = b.device(serio, "rc0", "rc", subdir="rc")
        inp = b.device(rc, "input30", "input")
        b.node(inp, "input", "event30", 13, 94, devname="input/event30")
    return usb


def test_serial_line_before_attachment_publishes_nothing(b: SysfsBuilder, scan: Scan) -> None:
    """Serial-line adapters: the tty is never published; before attachment, nothing."""
    cec_adapter(b, attached=False)
    inv = scan(machine=MachineSpec(serio=(PULSE8,)))
    assert "usb-1-5-1-0" not in names(inv)
    assert reason(inv, "1-5:1.0") == Reason.ONLY_RESERVED
    assert all(n.name != "ttyACM0" for d in inv.devices for n in d.nodes)


def test_serial_line_after_attachment_publishes_cec_and_input(b: SysfsBuilder,
                                                               scan: Scan) -> None:
    """Serial-line adapters: -cec and -input, both exclusive, no usbfs, no bare name."""
    cec_adapter(b, attached=True)
    inv = scan(machine=MachineSpec(serio=(PULSE8,)))
    assert names(inv) == ["usb-1-5-1-0-cec", "usb-1-5-1-0-input", "usb-1-5-1-2"]
    assert paths(inv, "usb-1-5-1-0-cec") == ["/dev/cec0"]
    assert paths(inv, "usb-1-5-1-0-input") == ["/dev/input/event30"]
    assert dev(inv, "usb-1-5-1-0-cec").attributes["subsystem"] == "cec"
    assert dev(inv, "usb-1-5-1-0-input").attributes["subsystem"] == "input"
    # The adapter's other interfaces keep their devices, without the usbfs node.
    assert paths(inv, "usb-1-5-1-2") == ["/dev/hidraw4"]
    assert not any(d.shareable for d in inv.devices)
    assert {d.attributes["address"] for d in inv.devices} == {"1-5:1.0", "1-5:1.2"}


def test_serial_line_without_entry_is_an_ordinary_tty(b: SysfsBuilder, scan: Scan) -> None:
    """Serial-line adapters: before an entry declared it, the bare name was the tty's device."""
    cec_adapter(b, attached=False)
    inv = scan()
    assert paths(inv, "usb-1-5-1-0") == ["/dev/ttyACM0", "/dev/bus/usb/001/006"]


def test_serio_entry_serial_must_match(b: SysfsBuilder, scan: Scan) -> None:
    """rules: serial.one-matching-rule. An entry with a serial matches only that unit."""
    cec_adapter(b, attached=False)
    other = SerioEntry("pulse8-cec", "2548", "1002", "OTHER")
    assert "usb-1-5-1-0" in names(scan(machine=MachineSpec(serio=(other,))))


# -- Limits -------------------------------------------------------------------------------------


def test_more_than_128_devices_drop_the_overflow(b: SysfsBuilder, scan: Scan) -> None:
    """Limits: at most 128 devices; the overflow is dropped and counted."""
    for i in range(130):
        d = b.board("platform", f"gpio-keys.{i:03d}", driver="gpio-keys")
        b.node(d, "misc", f"k{i}", 10, 100 + i, subdir="misc")
    inv = scan()
    assert len(inv.devices) == 128
    assert inv.total == 130
    assert inv.overflow == ("platform-gpio-keys-128", "platform-gpio-keys-129")
    assert reason(inv, "gpio-keys.129") == Reason.OVER_CAP


# -- Hardware that is not published ---------------------------------------------------------------


def test_unclaimed_lists_candidate_modules_without_builtins(b: SysfsBuilder, scan: Scan) -> None:
    """Hardware that is not published: unclaimed, with the modules that could drive it."""
    b.pci("0000:00:1f.3", vendor="8086", device="51c8", cls=0x040300)
    modules = ModuleCatalog(
        None,
        alias=b"alias pci:v00008086d000051C8sv*sd*bc*sc*i* snd_hda_intel\n"
              b"alias pci:v00008086d000051C8sv*sd*bc*sc*i* snd_sof_pci_intel_tgl\n"
              b"alias pci:v*d*sv*sd*bc04sc03i* builtin_hda\n"
              b"alias usb:v1234p*d*dc*dsc*dp*ic*isc*ip*in* unrelated\n",
        builtin=b"kernel/sound/builtin-hda.ko\n")
    catalogs = Catalogs(modules)
    inv = scan(catalogs=catalogs)
    [u] = inv.unclaimed
    assert u.candidates == ("snd_hda_intel", "snd_sof_pci_intel_tgl")
    assert "spec.modules" in u.message and "snd_hda_intel" in u.message
    assert u.to_status()["class"] == "multimedia"


def test_declaring_the_module_moves_hardware_to_the_slice(b: SysfsBuilder, scan: Scan) -> None:
    """Hardware that is not published: the device appears at the next pass once driven."""
    hda = b.pci("0000:00:1f.3", vendor="8086", device="51c8", cls=0x040300)
    assert scan().unclaimed
    b.set_driver(hda, "pci", "snd_hda_intel")
    c = b.device(hda, "card0", "sound", subdir="sound")
    b.node(c, "sound", "controlC0", 116, 2, devname="snd/controlC0")
    inv = scan()
    assert not inv.unclaimed
    assert names(inv) == ["pci-0000-00-1f-3"]
