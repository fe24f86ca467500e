"""Network cards and USB host controllers (inventory/network.py), on built trees and on the real
recordings (skipped without them).

rules: hardware.bus-structure, hardware.network-cards, hardware.placeholder-serial
"""

from __future__ import annotations

from pathlib import Path

import pytest

from liken_devices.inventory import Context, Facts, Inventory
from liken_devices.inventory.model import Reason
from liken_devices.inventory.policy import build_inventory
from liken_devices.sysfs.reader import read_sysfs
from liken_devices.sysfs.umockdev import load_recording
from tests.support.corpus import recording
from tests.support.sysfs_builder import SysfsBuilder

HWLOC = ("hwloc-32em64t-2n8c+dax+nvme+mic+dimms.umockdev",
         "hwloc-32intel64-2p8co2t+8ve.umockdev",
         "hwloc-40intel64-4n10c+pci-conflicts.umockdev")
T60P = "thinkpad-t60p-systemd-sys-script.umockdev"


@pytest.fixture
def b(tmp_path: Path) -> SysfsBuilder:
    return SysfsBuilder(tmp_path / "sys")


def scan(b: SysfsBuilder) -> Inventory:
    return build_inventory(read_sysfs(b.root), Context(Facts(frozenset())))


def from_recording(name: str) -> Inventory:
    return build_inventory(load_recording(recording(name)), Context(Facts(frozenset())))


def reason(inv: Inventory, address: str) -> str | None:
    [o] = [o for o in inv.outcomes if o.address == address]
    return o.reason


def delivered(inv: Inventory) -> list[str]:
    return [n.path for d in inv.devices for n in d.nodes]


# -- bus structure ------------------------------------------------------------------------------


def test_every_pci_bridge_is_bus_structure_and_a_driverless_bridge_is_not_unclaimed(
        b: SysfsBuilder) -> None:
    b.pci("0000:00:1f.0", cls=0x060100)  # an ISA/LPC bridge with no driver
    b.pci("0000:00:1e.0", cls=0x068000)  # an "other" bridge
    b.pci("0000:00:1c.0", driver="pcieport", cls=0x060400)
    inv = scan(b)
    for address in ("0000:00:1f.0", "0000:00:1e.0", "0000:00:1c.0"):
        assert reason(inv, address) == Reason.BUS_STRUCTURE
    assert inv.unclaimed == () and inv.devices == ()


def test_usb_host_controllers_are_never_published_and_their_usbmon_nodes_never_delivered(
        b: SysfsBuilder) -> None:
    for i, progif in enumerate((0x00, 0x10, 0x20, 0x30, 0xFE)):  # UHCI, OHCI, EHCI, xHCI, device
        hcd = b.pci(f"0000:00:1{i}.0", driver="ehci-pci", cls=0x0C0300 | progif)
        b.node(hcd, "usbmon", f"usbmon{i + 1}", 246, i + 1, subdir="usbmon")
    # A host controller on the board (no PCI class) owns a usbmon node: still never delivered.
    board = b.board("platform", "xhci-hcd.0.auto", driver="xhci-hcd")
    b.node(board, "usbmon", "usbmon9", 246, 9, subdir="usbmon")
    inv = scan(b)
    assert inv.devices == ()
    for i in range(5):
        assert reason(inv, f"0000:00:1{i}.0") == Reason.BUS_STRUCTURE
    assert not any("usbmon" in p for p in delivered(inv))


def test_usb_host_controllers_are_never_published_on_the_hwloc_recording() -> None:
    """The hwloc recording's EHCI controllers each carry a usbmon node."""
    snap = load_recording(recording(HWLOC[0]))
    inv = build_inventory(snap, Context(Facts(frozenset())))
    hcds = [d for d in snap.devices.values()
            if d.subsystem == "pci" and (d.props.get("PCI_CLASS", "") or "").upper()
            .zfill(6).startswith("0C03")]
    assert hcds, "the recording holds USB host controllers"
    for d in hcds:
        assert reason(inv, d.name) == Reason.BUS_STRUCTURE
    assert not any("usbmon" in p for p in delivered(inv))


@pytest.mark.parametrize("name", HWLOC)
def test_every_pci_bridge_is_bus_structure_on_recordings(name: str) -> None:
    snap = load_recording(recording(name))
    inv = build_inventory(snap, Context(Facts(frozenset())))
    bridges = [d for d in snap.devices.values()
               if d.subsystem == "pci" and (d.props.get("PCI_CLASS", "") or "").upper()
               .zfill(6).startswith("06")]
    assert bridges
    for d in bridges:
        assert reason(inv, d.name) == Reason.BUS_STRUCTURE
    assert not {d.name for d in bridges} & {u.address for u in inv.unclaimed}


# -- network cards ------------------------------------------------------------------------------


def test_a_network_cards_ptp_clock_is_never_delivered_so_the_card_never_appears(
        b: SysfsBuilder) -> None:
    nic = b.pci("0000:02:00.0", driver="igb", cls=0x020000)
    b.device(nic, "eth0", "net", {"INTERFACE": "eth0"}, subdir="net")
    b.node(nic, "ptp", "ptp0", 247, 0, subdir="ptp")
    inv = scan(b)
    assert inv.devices == ()
    assert reason(inv, "0000:02:00.0") == Reason.NETWORK_CARD


def test_rdma_nodes_of_an_infiniband_card_are_never_delivered(b: SysfsBuilder) -> None:
    # Class 0x0c06 (InfiniBand) and no netdev left on the host (moved into a pod).
    hca = b.pci("0000:82:00.0", driver="mlx4_core", cls=0x0C0600)
    b.node(hca, "infiniband_verbs", "uverbs0", 231, 192, devname="infiniband/uverbs0",
           subdir="infiniband_verbs")
    b.node(hca, "infiniband_mad", "umad0", 231, 0, devname="infiniband/umad0",
           subdir="infiniband_mad")
    b.node(hca, "infiniband_mad", "issm0", 231, 64, devname="infiniband/issm0",
           subdir="infiniband_mad")
    b.node(hca, "infiniband_cm", "rdma_cm", 10, 58, subdir="infiniband_cm")
    inv = scan(b)
    assert inv.devices == ()
    assert reason(inv, "0000:82:00.0") == Reason.NETWORK_CARD


def test_a_function_whose_subtree_holds_a_network_interface_is_a_network_card(
        b: SysfsBuilder) -> None:
    # Class "other" (0xff), but a netdev in its subtree: its PTP clock serves the host.
    odd = b.pci("0000:03:00.0", driver="vendor_nic", cls=0xFF0000)
    b.device(odd, "eth1", "net", {"INTERFACE": "eth1"}, subdir="net")
    b.node(odd, "ptp", "ptp3", 247, 3, subdir="ptp")
    # A PTP clock on a card of its own (a timing card, no netdev) is delivered as usual.
    timer = b.pci("0000:04:00.0", driver="ptp_ocp", cls=0x118000)
    b.node(timer, "ptp", "ptp4", 247, 4, subdir="ptp")
    inv = scan(b)
    assert reason(inv, "0000:03:00.0") == Reason.NETWORK_CARD
    assert [d.name for d in inv.devices] == ["pci-0000-04-00-0"]


def test_a_usb_network_interface_is_a_network_card_but_a_modems_control_port_still_publishes(
        b: SysfsBuilder) -> None:
    usb = b.usb_device("1-3", devnum=5, vendor="1199", product="9071")
    net = b.usb_interface(usb, "1.8", driver="cdc_mbim", cls=0x02)
    b.device(net, "wwan0", "net", {"INTERFACE": "wwan0"}, subdir="net")
    b.node(net, "usbmisc", "cdc-wdm0", 180, 176, devname="cdc-wdm0", subdir="usbmisc")
    r8152 = b.usb_device("1-4", devnum=6, vendor="0bda", product="8153")
    eth = b.usb_interface(r8152, driver="r8152", cls=0xFF)
    b.device(eth, "eth2", "net", {"INTERFACE": "eth2"}, subdir="net")
    inv = scan(b)
    modem = inv.by_name()["usb-1-3-1-8"]
    assert [n.path for n in modem.nodes] == ["/dev/cdc-wdm0", "/dev/bus/usb/001/005"]
    assert reason(inv, "1-4:1.0") == Reason.NETWORK_CARD
    assert "usb-1-4-1-0" not in inv.by_name()


def zynqmp_gem(b: SysfsBuilder, *, netdev: bool = True) -> None:
    """A ZynqMP board's Cadence GEM as the kernel lays it out: the devicetree's ``axi`` simple
    bus (no driver), ``ff0e0000.ethernet`` bound to macb (OF_NAME=ethernet), its network
    interface ``net/eth0`` and the PTP clock macb registers, ``ptp/ptp0``."""
    axi = b.device("/devices/platform", "axi", "platform",
                   {"OF_NAME": "axi", "OF_FULLNAME": "/axi", "OF_COMPATIBLE_0": "simple-bus",
                    "OF_COMPATIBLE_N": "1", "MODALIAS": "of:NaxiT(null)Csimple-bus"})
    gem = b.device(axi, "ff0e0000.ethernet", "platform",
                   {"OF_NAME": "ethernet", "OF_FULLNAME": "/axi/ethernet@ff0e0000",
                    "OF_COMPATIBLE_0": "xlnx,zynqmp-gem", "OF_COMPATIBLE_1": "cdns,gem",
                    "OF_COMPATIBLE_N": "2",
                    "MODALIAS": "of:NethernetT(null)Cxlnx,zynqmp-gemCcdns,gem"}, driver="macb")
    if netdev:
        b.device(gem, "eth0", "net", {"INTERFACE": "eth0", "IFINDEX": "2"}, subdir="net")
    b.node(gem, "ptp", "ptp0", 246, 0, subdir="ptp")


@pytest.mark.parametrize("netdev", [True, False], ids=["eth0", "netdev-in-a-pod"])
def test_a_board_network_port_never_appears_and_its_ptp_clock_is_never_delivered(
        b: SysfsBuilder, netdev: bool) -> None:
    """rules: hardware.network-cards. A Zynq board's macb port with ``/dev/ptp0``: the network
    device is not published on the platform bus either, and explain says why. With its netdev
    moved into a pod's namespace the devicetree node's name (``ethernet``) still says what it
    is."""
    zynqmp_gem(b, netdev=netdev)
    inv = scan(b)
    assert inv.devices == ()
    assert reason(inv, "ff0e0000.ethernet") == Reason.NETWORK_CARD
    [o] = [o for o in inv.outcomes if o.address == "ff0e0000.ethernet"]
    assert "network device" in o.detail and "PTP" in o.detail


def test_a_board_network_devices_other_nodes_still_publish(b: SysfsBuilder) -> None:
    """rules: hardware.network-cards. A board modem (a network interface and its control port)
    keeps its control port, as a USB modem does; only the host network's nodes go."""
    modem = b.board("platform", "4080000.remoteproc", driver="qcom-q6v5-mss")
    b.device(modem, "rmnet_ipa0", "net", {"INTERFACE": "rmnet_ipa0"}, subdir="net")
    b.node(modem, "wwan", "wwan0at0", 234, 0, subdir="wwan0/wwan0at0")
    b.node(modem, "ptp", "ptp1", 246, 1, subdir="ptp")
    inv = scan(b)
    assert [d.name for d in inv.devices] == ["platform-4080000-remoteproc"]
    assert delivered(inv) == ["/dev/wwan0at0"]


def test_explain_says_a_board_network_port_is_a_network_card(
        b: SysfsBuilder, capsys: pytest.CaptureFixture[str]) -> None:
    """rules: hardware.network-cards. explain's line for the Zynq port gives the reason."""
    from liken_devices.cli import main

    zynqmp_gem(b)
    assert main(["explain", "--sysfs", str(b.root), "--facts", str(b.root.parent),
                 "--node", "n"]) == 0
    text = capsys.readouterr().out.replace("\n    ", " ")
    assert ("platform ff0e0000.ethernet [macb]: not published: a network card (a network "
            "device on the platform bus: its nodes (PTP clocks, RDMA) serve the host's network; "
            "it has nothing to give a pod)") in text


def test_network_cards_never_appear_on_recordings() -> None:
    """The hwloc recording's igb cards carry /dev/ptp*, its Mellanox card uverbs0, umad0 and
    issm0: none is delivered and none of the cards appears."""
    inv = from_recording(HWLOC[0])
    for address in ("0000:02:00.0", "0000:02:00.3", "0000:82:00.0"):
        assert reason(inv, address) == Reason.NETWORK_CARD
    paths = delivered(inv)
    assert not [p for p in paths if "ptp" in p or "uverbs" in p or "umad" in p or "issm" in p]


# -- placeholder serial ports -------------------------------------------------------------------


def test_a_ttys_port_whose_type_is_0_is_not_a_node_of_any_device(b: SysfsBuilder) -> None:
    serial = b.board("platform", "serial8250", driver="serial8250")
    for i, kind in enumerate(("0", "0", "4")):
        port = b.node(serial, "tty", f"ttyS{i}", 4, 64 + i, subdir="tty")
        (b.dir(port) / "type").write_text(kind + "\n")
    b.node(serial, "tty", "ttyS3", 4, 67, subdir="tty")  # no type file: taken as real
    spare = b.board("platform", "serial8250.1", driver="serial8250")
    port = b.node(spare, "tty", "ttyS9", 4, 73, subdir="tty")
    (b.dir(port) / "type").write_text("0\n")
    inv = scan(b)
    assert [n.path for n in inv.by_name()["platform-serial8250"].nodes] == ["/dev/ttyS2",
                                                                           "/dev/ttyS3"]
    # A board device is considered when it owns a node: the spare port's owns none.
    assert not [o for o in inv.outcomes if o.address == "serial8250.1"]


def test_a_port_with_no_type_file_is_taken_as_real_on_the_t60p() -> None:
    """The T60p's serial8250 ports were recorded without their type attribute: real."""
    inv = from_recording(T60P)
    ports = [n.path for n in inv.by_name()["platform-serial8250"].nodes]
    assert ports == ["/dev/ttyS0", "/dev/ttyS1", "/dev/ttyS2", "/dev/ttyS3"]


def test_the_t60p_with_type_0_ports_publishes_no_placeholder(tmp_path: Path) -> None:
    """The same recording with the 8250's spare ports marked as the kernel marks them."""
    text = recording(T60P).read_text(errors="surrogateescape")
    for i in (1, 2, 3):
        text = text.replace(f"P: /devices/platform/serial8250/tty/ttyS{i}\n",
                            f"P: /devices/platform/serial8250/tty/ttyS{i}\nA: type=0\\n\n")
    path = tmp_path / "t60p.umockdev"
    path.write_text(text, errors="surrogateescape")
    inv = build_inventory(load_recording(path), Context(Facts(frozenset())))
    assert [n.path for n in inv.by_name()["platform-serial8250"].nodes] == ["/dev/ttyS0"]
    assert reason(inv, "serial8250") is None  # published
